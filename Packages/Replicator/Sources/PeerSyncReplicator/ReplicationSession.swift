import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// What a session reports while it runs (all optional; called from session tasks).
struct SessionEvents: Sendable {
    var documents: @Sendable (DocumentReplication) -> Void = { _ in }
    /// Completed and total change counts grew by these amounts.
    var progress: @Sendable (_ completed: Int, _ total: Int) -> Void = { _, _ in }
    /// The session became busy (true) or caught up / idle (false).
    var busy: @Sendable (Bool) -> Void = { _ in }
}

struct SessionCollection: Sendable {
    let collection: Collection
    let config: CollectionConfiguration
    var resolver: any ConflictResolver { config.conflictResolver ?? ConflictResolvers.default }
    /// `name` for the default scope, `scope.name` otherwise (the `getCollections` path).
    var path: String {
        collection.scope.name == "_default" ? collection.name : "\(collection.scope.name).\(collection.name)"
    }
}

/// The replication protocol over one BLIP connection, for either role. Both roles can push
/// and pull: the active side pushes with `proposeChanges` and pulls with `subChanges`; the
/// passive side answers those and pushes with `changes` when the peer subscribed.
///
/// Couchbase Lite's conflict rules (see the Replicator README, "Conflicts"):
/// - only a document's current revision is pushed or sent in a pull, with its history —
///   never another leaf, never the tombstone that closed a resolved conflict's losing branch;
/// - the passive side never lets a push create a conflict: a `proposeChanges` entry whose
///   parent is not the current revision is answered 409 (with the current revision) in the
///   reply, and a `rev` whose parent is not current is refused with 409;
/// - the active side resolves conflicts found while pulling with the collection's resolver
///   (see ``ConflictResolver``) and saves the result as a child of the *remote* revision,
///   closing the local branch with a tombstone that stays local; what it pushes next is a
///   fast-forward for the peer.
actor ReplicationSession {
    enum Role: Sendable { case active, passive }

    let blip: BLIPConnection
    let database: Database
    let role: Role
    let events: SessionEvents
    let replyTimeout: Duration
    let readOnly: Bool
    /// Passive: advertise `deltas: true` in `changes`/`proposeChanges` replies and send
    /// deltas to a peer that advertises them (LiteCore's listener option). The active side
    /// always does both.
    let enableDeltaSync: Bool
    /// Active: purge documents the peer revoked access to (see `Revocation.swift`).
    let enableAutoPurge: Bool
    let maxHistory = 50
    /// Delta sync tuning (LiteCore's): only bodies of at least this many bytes are sent as
    /// deltas, and only when the delta is at most `maxDeltaRatio` × the body.
    static let minDeltaBodySize = 200
    static let maxDeltaRatio = 1.2
    let batchSize = 200
    /// Inserts received revisions in shared transactions (see ``RevisionInserter``).
    let inserter: RevisionInserter

    /// Collections in protocol-index order (active: the configured ones; passive: those the
    /// peer asked for in `getCollections`, nil where not served).
    private var indexed: [SessionCollection?] = []
    /// Passive: every collection this side serves.
    private let served: [SessionCollection]
    private var collectionAware = true
    private var sawFirstMessage = false
    private var pushTasks: [Task<Void, Never>] = []
    /// Revisions known to be on the peer, per collection index and document.
    /// Bounded (see ``RecentMap``): memory stays flat however many documents replicate.
    private var remoteRevs: [Int: RecentMap<RevisionID>] = [:]
    private var pullStates: [Int: PullState] = [:]
    private var closed = false
    /// Active: why the session failed on its own side (a pulled revision that could not be
    /// stored, a revision the peer could not read); the run ends with this error, never with
    /// success, and no checkpoint passes the revision. See ``fail(_:)``.
    private(set) var failure: PeerSyncError?

    /// What keeps the session busy: a push not caught up, or a pull not caught up or with
    /// revisions still pending. The session is idle when the set is empty.
    enum BusyPart: Hashable { case push(Int), pull(Int) }
    private var busyParts: Set<BusyPart> = []
    private var reportedBusy: Bool?

    /// Records whether `part` is busy and reports a change of the whole session's state
    /// (busy while any direction of any collection is busy) through `events.busy`.
    private func setBusy(_ part: BusyPart, _ busy: Bool) {
        if busy { busyParts.insert(part) } else { busyParts.remove(part) }
        let now = !busyParts.isEmpty
        guard now != reportedBusy else { return }
        reportedBusy = now
        events.busy(now)
    }

    struct PullBatch {
        var lastSequence: JSONValue
        var pending: Set<String>
        /// A revision of this batch was not stored: the checkpoint never passes this batch.
        var failed = false
    }

    struct PullState {
        var caughtUp = false
        var batches: [PullBatch] = []
        var completedRemote: JSONValue?
        var waiters: [CheckedContinuation<Void, Never>] = []
        var isIdle: Bool { caughtUp && batches.allSatisfy { $0.pending.isEmpty } }
    }

    init(blip: BLIPConnection, database: Database, role: Role, collections: [SessionCollection],
         readOnly: Bool = false, enableDeltaSync: Bool = false, enableAutoPurge: Bool = true,
         replyTimeout: Duration = .seconds(60), events: SessionEvents = SessionEvents()) {
        self.enableDeltaSync = enableDeltaSync
        self.enableAutoPurge = enableAutoPurge
        self.inserter = RevisionInserter(database: database)
        self.blip = blip
        self.database = database
        self.role = role
        self.served = collections
        self.readOnly = readOnly
        self.replyTimeout = replyTimeout
        self.events = events
        if role == .active { indexed = collections }
    }

    // MARK: - Setup

    func registerHandlers() async {
        let handlers: [(String, Bool, @Sendable (ReplicationSession, BLIPRequest) async throws -> BLIPMessage?)] = [
            ("getCollections", false, { try await $0.handleGetCollections($1) }),
            ("getCheckpoint", false, { try await $0.handleGetCheckpoint($1) }),
            ("setCheckpoint", false, { try await $0.handleSetCheckpoint($1) }),
            ("subChanges", false, { try await $0.handleSubChanges($1) }),
            ("changes", false, { try await $0.handleChanges($1, proposed: false) }),
            ("proposeChanges", false, { try await $0.handleChanges($1, proposed: true) }),
            ("rev", true, { try await $0.handleRev($1) }),
            ("norev", false, { try await $0.handleNoRev($1) }),
        ]
        for (profile, concurrent, handler) in handlers {
            await blip.setHandler(profile: profile, concurrent: concurrent) { [weak self] request in
                guard let self else { throw blipError("BLIP", 503, "replication session ended") }
                return try await handler(self, request)
            }
        }
        await registerBlobHandlers()
    }

    func stop() async {
        closed = true
        for task in pushTasks { task.cancel() }
        for (i, var state) in pullStates {
            for w in state.waiters { w.resume() }
            state.waiters = []
            pullStates[i] = state
        }
        await blip.close()
    }

    // MARK: - Requests

    func send(_ message: BLIPMessage, _ what: String) async throws -> BLIPMessage {
        if message.profile == "rev", !sentBlobDigests.isEmpty { return try await sendRevAwaitingBlobs(message, what) }
        // The connection's one reply watchdog: no task, timer or lock per request.
        return try await blip.sendRequest(message, timeout: replyTimeout, waitingFor: what)
    }

    func collectionProperty(_ index: Int) -> BLIPProperties {
        collectionAware ? [("collection", String(index))] : [:]
    }

    /// The collection a request is about, checked as LiteCore does.
    func collection(of request: BLIPRequest) throws -> (Int, SessionCollection) {
        noteFirstMessage(request.profile)
        let value = request.properties["collection"]
        if collectionAware {
            guard let value, let index = Int(value) else {
                throw blipError("HTTP", 400, "inappropriate use of the collection property.")
            }
            guard indexed.indices.contains(index), let c = indexed[index] else {
                throw blipError("HTTP", 400, "the collection property is out of range.")
            }
            return (index, c)
        }
        guard value == nil else { throw blipError("HTTP", 400, "inappropriate use of the collection property.") }
        guard let c = indexed.first ?? nil else { throw blipError("HTTP", 404, "the default collection is not served") }
        return (0, c)
    }

    /// Passive: the first message decides between collection-aware and legacy mode.
    private func noteFirstMessage(_ profile: String?) {
        guard role == .passive, !sawFirstMessage else { return }
        sawFirstMessage = true
        if profile != "getCollections" {
            collectionAware = false
            indexed = [served.first { $0.collection.scope.name == "_default" && $0.collection.name == "_default" }]
        }
    }

    // MARK: - Passive: collections and checkpoints

    private func handleGetCollections(_ request: BLIPRequest) async throws -> BLIPMessage? {
        guard role == .passive, !sawFirstMessage else {
            throw blipError("BLIP", 400, "getCollections must be the first message")
        }
        sawFirstMessage = true
        guard let body = try JSONValue.parse(request.body, "getCollections").objectValue,
              let names = body["collections"]?.arrayValue, let ids = body["checkpoint_ids"]?.arrayValue,
              names.count == ids.count, !names.isEmpty else {
            throw blipError("BLIP", 400, "getCollections needs collections and checkpoint_ids of the same length")
        }
        let paths = names.compactMap(\.stringValue)
        guard paths.count == names.count, Set(paths).count == paths.count else {
            throw blipError("BLIP", 400, "collection names must be distinct strings")
        }
        indexed = paths.map { path in served.first { $0.path == path } }
        var reply: [JSONValue] = []
        for (i, c) in indexed.enumerated() {
            guard c != nil else { reply.append(.null); continue }
            guard let client = ids[i].stringValue else { reply.append(.object([:])); continue }
            if let stored = try await database.getLocal(id: Self.checkpointKey(client)),
               var object = stored.properties["body"]?.objectValue {
                object["rev"] = .string(stored.revisionID)
                reply.append(.object(object))
            } else {
                reply.append(.object([:]))
            }
        }
        return BLIPMessage(type: .response, body: JSONValue.array(reply).json)
    }

    static func checkpointKey(_ client: String) -> String {
        "checkpoint/" + String(decoding: client.utf8.prefix(200), as: UTF8.self)
    }

    private func handleGetCheckpoint(_ request: BLIPRequest) async throws -> BLIPMessage? {
        _ = try collection(of: request)
        guard let client = request.properties["client"], !client.isEmpty else {
            throw blipError("BLIP", 400, "missing client")
        }
        guard let stored = try await database.getLocal(id: Self.checkpointKey(client)),
              let body = stored.properties["body"] else {
            throw blipError("HTTP", 404, "no checkpoint")
        }
        return BLIPMessage(type: .response, properties: [("rev", stored.revisionID)], body: body.json)
    }

    private func handleSetCheckpoint(_ request: BLIPRequest) async throws -> BLIPMessage? {
        _ = try collection(of: request)
        guard let client = request.properties["client"], !client.isEmpty else {
            throw blipError("BLIP", 400, "missing client")
        }
        let body = try JSONValue.parse(request.body, "setCheckpoint")
        do {
            let saved = try await database.putLocal(id: Self.checkpointKey(client), json: ["body": body],
                                                    ifRevision: request.properties["rev"] ?? "")
            return BLIPMessage(type: .response, properties: [("rev", saved.revisionID)])
        } catch let error as PeerSyncError where error.code == .conflict {
            throw blipError("HTTP", 409, "checkpoint revision mismatch")
        }
    }

    // MARK: - Active: start

    struct Checkpoint: Sendable {
        var local: UInt64 = 0
        var remote: JSONValue?
        var remoteRev: String?
    }

    /// Active: opens the session (getCollections, or legacy getCheckpoint on BLIP/404) and
    /// returns the peer's checkpoints per collection.
    func openActive(checkpointIDs: [String]) async throws -> [(body: [String: JSONValue]?, rev: String?)] {
        let body: JSONValue = .object(["checkpoint_ids": .array(checkpointIDs.map { .string($0) }),
                                       "collections": .array(served.map { .string($0.path) })])
        let reply = try await send(.request("getCollections", body: body.json), "getCollections")
        if reply.isError, reply.errorDomain == "BLIP", reply.errorCode == 404 {
            // Legacy peer: only the default collection, no `collection` property.
            guard served.count == 1, served[0].path == "_default" else {
                throw PeerSyncError(.collectionNotServed, "the peer does not support collections; only the default collection can be replicated")
            }
            collectionAware = false
            let cp = try await send(.request("getCheckpoint", properties: [("client", checkpointIDs[0])]), "getCheckpoint")
            if cp.isError {
                if cp.errorCode == 404 { return [(nil, nil)] }
                _ = try cp.checked("getCheckpoint")
            }
            return [(try JSONValue.parse(cp.body, "checkpoint").objectValue, cp.properties["rev"])]
        }
        let checked = try reply.checked("getCollections")
        guard let array = try JSONValue.parse(checked.body, "getCollections reply").arrayValue,
              array.count == served.count else {
            throw PeerSyncError(.protocolError, "getCollections reply does not list every collection")
        }
        var out: [(body: [String: JSONValue]?, rev: String?)] = []
        for (i, entry) in array.enumerated() {
            guard var object = entry.objectValue else {
                throw PeerSyncError(.collectionNotServed, "the peer does not serve collection \(served[i].path)")
            }
            let rev = object.removeValue(forKey: "rev")?.stringValue
            out.append((object.isEmpty ? nil : object, rev))
        }
        return out
    }

    /// Active: saves a checkpoint on the peer; returns its new MVCC revision.
    func saveRemoteCheckpoint(index: Int, client: String, body: JSONValue, rev: String?) async throws -> String? {
        var props: BLIPProperties = [("client", client)]
        if let rev { props["rev"] = rev }
        for (k, v) in collectionProperty(index) { props[k] = v }
        var reply = try await send(.request("setCheckpoint", properties: props, body: body.json), "setCheckpoint")
        if reply.isError, reply.errorCode == 409 {
            // Someone else moved it: re-read the revision and retry once.
            var getProps: BLIPProperties = [("client", client)]
            for (k, v) in collectionProperty(index) { getProps[k] = v }
            let current = try await send(.request("getCheckpoint", properties: getProps), "getCheckpoint")
            props["rev"] = current.isError ? nil : current.properties["rev"]
            reply = try await send(.request("setCheckpoint", properties: props, body: body.json), "setCheckpoint")
        }
        return try reply.checked("setCheckpoint").properties["rev"]
    }

    // MARK: - Pushing

    enum PushMode: Sendable { case propose, changes }

    /// Pushes the changes of collection `index` after `since`. Returns when caught up
    /// (one-shot) or when cancelled / the connection closes (continuous). `progress` gets the
    /// sequence up to which everything was handled. `activeOnly` (a `subChanges` property):
    /// deleted documents are left out.
    func push(index: Int, since start: UInt64, continuous: Bool, mode: PushMode, docIDs: Set<String>?,
              activeOnly: Bool = false, progress: @escaping @Sendable (UInt64) async -> Void) async throws {
        guard let sc = indexed[index] else { return }
        let stream = continuous ? sc.collection.changeStream() : nil
        var since = start
        var sentCaughtUp = false
        var pipeline = PushPipeline()
        setBusy(.push(index), true)
        defer { setBusy(.push(index), false) }
        try await withThrowingTaskGroup(of: (Int, [UInt64]).self) { group in
            var iterator = stream?.makeAsyncIterator()
            while !closed, !Task.isCancelled {
                let changes = try await sc.collection.changes(since: since, limit: batchSize)
                if changes.isEmpty {
                    // Caught up: every batch in flight is answered before saying so.
                    while !pipeline.inFlight.isEmpty { try await collectBatch(&group, &pipeline, progress) }
                    if !sentCaughtUp {
                        sentCaughtUp = true
                        var props = collectionProperty(index)
                        props["Profile"] = nil
                        try await blip.sendNoReply(.request(mode == .propose ? "proposeChanges" : "changes",
                                                            properties: props, body: Array("[]".utf8)))
                    }
                    guard continuous, iterator != nil else { return }
                    setBusy(.push(index), false)
                    guard await iterator?.next() != nil else { return }
                    continue
                }
                setBusy(.push(index), true)
                let prefetched: [String: Prefetched]
                do { prefetched = try await prefetch(sc, changes.map(\.docID)) } catch let error as PeerSyncError
                    where error.code != .closed && error.code != .cancelled {
                    // A damaged record: each document is read on its own, so that only the
                    // damaged ones fail, each reported to the peer (see `sendRev`).
                    prefetched = [:]
                }
                var candidates: [ChangeEntry] = []
                for change in changes {
                    if let docIDs, !docIDs.contains(change.docID) { continue }
                    if activeOnly, change.deleted { continue }
                    // (An ID that cannot travel skips the filter, which could not read it, and
                    // fails as a document in `sendRev`.)
                    if let filter = sc.config.pushFilter, (try? DocumentID.validate(change.docID)) != nil {
                        guard let doc = try await sc.collection.documentIncludingDeleted(id: change.docID) else { continue }
                        if !filter(doc, change.deleted ? .deleted : []) { continue }
                    }
                    // Only the current revision travels (the feed's entry), never another leaf.
                    if remoteRevs[index]?[change.docID] == change.revID { continue }
                    candidates.append(change)
                }
                since = changes.last?.sequence ?? since
                events.progress(0, candidates.count)
                let ids = Set(candidates.map(\.docID))
                // A document already in flight (changed again meanwhile) waits until the
                // earlier batches are answered, so its proposal names the right server revision.
                if pipeline.inFlight.contains(where: { !$0.docIDs.isDisjoint(with: ids) }) {
                    while !pipeline.inFlight.isEmpty { try await collectBatch(&group, &pipeline, progress) }
                }
                while pipeline.inFlight.count >= Self.pushPipelineDepth { try await collectBatch(&group, &pipeline, progress) }
                let number = pipeline.next
                pipeline.next += 1
                pipeline.inFlight.append(PushPipeline.Batch(number: number, lastSequence: since, count: candidates.count, docIDs: ids))
                if candidates.isEmpty {
                    pipeline.done[number] = []
                    await reportBatches(&pipeline, progress)
                } else {
                    group.addTask {
                        switch mode {
                        case .propose: (number, try await self.proposeBatch(index: index, sc: sc, candidates, prefetched: prefetched))
                        case .changes: (number, try await self.changesBatch(index: index, sc: sc, candidates, prefetched: prefetched))
                        }
                    }
                }
            }
        }
    }

    /// Batches of a push sent but not all answered yet. Up to ``pushPipelineDepth`` batches
    /// are in flight at once (their `rev`s overlap on the connection); progress and the
    /// checkpoint advance in batch order only.
    struct PushPipeline {
        struct Batch {
            var number: Int
            var lastSequence: UInt64
            var count: Int
            var docIDs: Set<String>
        }
        var next = 0
        var inFlight: [Batch] = []
        /// Failed sequences of answered batches not yet reported (an earlier one is pending).
        var done: [Int: [UInt64]] = [:]
        var firstFailure: UInt64?
    }

    static let pushPipelineDepth = 4

    private func collectBatch(_ group: inout ThrowingTaskGroup<(Int, [UInt64]), any Error>, _ pipeline: inout PushPipeline,
                              _ progress: @Sendable (UInt64) async -> Void) async throws {
        guard let (number, failed) = try await group.next() else { return }
        pipeline.done[number] = failed
        await reportBatches(&pipeline, progress)
    }

    /// Reports the answered batches at the head of the pipeline, in order.
    private func reportBatches(_ pipeline: inout PushPipeline, _ progress: @Sendable (UInt64) async -> Void) async {
        while let first = pipeline.inFlight.first, let failed = pipeline.done.removeValue(forKey: first.number) {
            pipeline.inFlight.removeFirst()
            if let low = failed.min() { pipeline.firstFailure = min(pipeline.firstFailure ?? low, low) }
            events.progress(first.count, 0)
            // The checkpoint never passes a revision that failed (e.g. refused as a conflict):
            // the next run proposes it again.
            await progress(pipeline.firstFailure.map { min(first.lastSequence, $0 - 1) } ?? first.lastSequence)
        }
    }

    private struct Proposal {
        var docID: String
        var revID: RevisionID
        var deleted: Bool
        var serverRev: RevisionID?
        var sequence: UInt64
    }

    /// Returns the sequences of the changes that failed.
    private func proposeBatch(index: Int, sc: SessionCollection, _ changes: [ChangeEntry],
                              prefetched: [String: Prefetched] = [:]) async throws -> [UInt64] {
        var failed: [UInt64] = []
        var round: [Proposal] = []
        for c in changes {
            var p = Proposal(docID: c.docID, revID: c.revID, deleted: c.deleted,
                             serverRev: remoteRevs[index]?[c.docID], sequence: c.sequence)
            // The serverRevID must be an ancestor of what is proposed; a stale one is left
            // out (the peer then answers 409 with its current revision).
            if let known = p.serverRev, let revs = try await prefetchedOrRead(prefetched[c.docID], sc, c.docID),
               !(revs.history(of: c.revID) ?? []).contains(known) {
                p.serverRev = nil
            }
            round.append(p)
        }
        var results: [ReplicatedDocument] = []
        var attempts = 0
        while !round.isEmpty {
            attempts += 1
            let body: JSONValue = .array(round.map { p in
                .array([.string(p.docID), .string(p.revID.description), .string(p.serverRev?.description ?? "")])
            })
            var props = collectionProperty(index)
            props["conflictIncludesRev"] = "true"
            let reply = try await send(.request("proposeChanges", properties: props, body: body.json,
                                                flags: [.urgent, .compressed]), "proposeChanges").checked("proposeChanges")
            let answers = try JSONValue.parse(reply.body, "proposeChanges reply").arrayValue ?? []
            var next: [Proposal] = []
            var toSend: [Proposal] = []
            for (i, p) in round.enumerated() {
                let answer = i < answers.count ? answers[i] : .int(0)
                let status = answer.intValue ?? answer["status"]?.intValue ?? (answer.isNull ? 0 : 500)
                switch status {
                case 0: toSend.append(p)
                case 304:
                    remoteRevs[index, default: RecentMap()][p.docID] = p.revID
                case 409:
                    let serverRev = (answer["rev"]?.stringValue).flatMap { try? RevisionID($0) }
                    if let serverRev { remoteRevs[index, default: RecentMap()][p.docID] = serverRev }
                    var known = false
                    if attempts < 4, let serverRev {
                        switch try await settleRefusal(sc: sc, p, serverRev: serverRev) {
                        case .peerHasCurrent: continue
                        case .propose(let fix): next.append(fix); continue
                        case .unresolved(let k): known = k
                        }
                    }
                    // The sequence is not checkpointed: the next run proposes it again.
                    failed.append(p.sequence)
                    if let error = pushConflictError(index: index, sc: sc, p, serverRev: serverRev, known: known) {
                        results.append(ReplicatedDocument(id: p.docID, collection: sc.collection.fullName,
                                                          flags: p.deleted ? .deleted : [], error: error))
                    }
                default:
                    failed.append(p.sequence)
                    results.append(ReplicatedDocument(id: p.docID, collection: sc.collection.fullName, flags: p.deleted ? .deleted : [],
                                                      error: PeerSyncError(.replicationFailed, "the peer rejected the revision",
                                                                           context: ["docID": p.docID, "status": String(status)])))
                }
            }
            let maxHistory = reply.properties.int("maxHistory") ?? self.maxHistory
            let deltas = reply.properties.bool("deltas")
            let legacyAttachments = !reply.properties.bool("blobs")
            let outcomes = try await withThrowingTaskGroup(of: (Proposal, PeerSyncError?).self) { group in
                for p in toSend {
                    group.addTask {
                        let error = try await self.sendRev(index: index, sc: sc, docID: p.docID, revID: p.revID,
                                                           sequence: String(p.sequence), known: p.serverRev.map { [$0] } ?? [],
                                                           maxHistory: maxHistory, noConflicts: true, deltas: deltas,
                                                           legacyAttachments: legacyAttachments, prefetched: prefetched[p.docID])
                        return (p, error)
                    }
                }
                var out: [(Proposal, PeerSyncError?)] = []
                for try await r in group { out.append(r) }
                return out
            }
            for (p, error) in outcomes {
                if error == nil {
                    remoteRevs[index, default: RecentMap()][p.docID] = p.revID
                } else {
                    failed.append(p.sequence)
                }
                results.append(ReplicatedDocument(id: p.docID, collection: sc.collection.fullName,
                                                  flags: p.deleted ? .deleted : [], error: error))
            }
            round = next
        }
        if !results.isEmpty { events.documents(DocumentReplication(isPush: true, documents: results)) }
        return failed
    }

    /// The revision tree read with the batch, or read now when the batch did not have it.
    private func prefetchedOrRead(_ prefetched: Prefetched?, _ sc: SessionCollection, _ docID: String) async throws
        -> DocumentRevisions? {
        if let prefetched { return prefetched.revisions }
        return try await sc.collection.revisions(of: docID)
    }

    /// What a proposal refused with 409 (naming the peer's current revision) comes to.
    private enum RefusalOutcome {
        case peerHasCurrent, propose(Proposal)
        /// `known`: whether the peer's revision is in this database.
        case unresolved(known: Bool)
    }

    /// After a 409 naming the peer's current revision `serverRev`, looking at this database
    /// again (the pull of the same session may have changed it meanwhile):
    /// - the peer already holds our current revision (e.g. the pull resolved the conflict in
    ///   favour of the peer's revision): nothing to send;
    /// - our current revision descends from it (our cache of the peer was stale, or the pull
    ///   resolved the conflict onto the peer's branch): propose it again with that parent;
    /// - it is known here on another branch (one this database resolved away, or pulled and not
    ///   resolved yet): resolve against it as if just pulled (active side only), then look again;
    /// - it is unknown here: only a pull (here or by the peer) can settle it.
    /// Only the current revision is ever proposed.
    private func settleRefusal(sc: SessionCollection, _ p: Proposal, serverRev: RevisionID) async throws -> RefusalOutcome {
        for _ in 0..<3 {
            guard let revs = try await sc.collection.revisions(of: p.docID), let remote = revs.revision(serverRev),
                  let local = revs.revision(revs.currentRevID) else { return .unresolved(known: false) }
            if serverRev == revs.currentRevID { return .peerHasCurrent }
            if (revs.history(of: revs.currentRevID) ?? []).contains(serverRev) {
                return .propose(Proposal(docID: p.docID, revID: revs.currentRevID, deleted: revs.isDeleted,
                                         serverRev: serverRev, sequence: p.sequence))
            }
            guard role == .active else { return .unresolved(known: true) }
            do {
                try await resolve(sc: sc, docID: p.docID, local: local, remote: remote, in: revs)
            } catch let error as PeerSyncError where error.code == .invalidArgument {
                // Resolved meanwhile by the pull (or changed): look again.
            }
        }
        return .unresolved(known: true)
    }

    /// The document error for a proposal the peer refused with 409, or nil when this session
    /// also pulls the collection (without a pull filter, which might drop the peer's revision)
    /// and the peer's revision is new here: the pull brings it, the
    /// resolver settles the conflict, and the resolution is pushed (in a one-shot run, by the
    /// push that follows the pull) — a transient refusal, not an error. A peer revision that
    /// is already known here lies on a branch this database resolved away: only a sync in
    /// which the peer pulls from here (or the peer's own resolution) can settle it, so that
    /// is reported.
    /// `known`: whether the peer's revision was in this database when the refusal was looked at.
    private func pushConflictError(index: Int, sc: SessionCollection, _ p: Proposal, serverRev: RevisionID?,
                                   known: Bool) -> PeerSyncError? {
        if pullStates[index] != nil, !known, sc.config.pullFilter == nil { return nil }
        let reason = known
            ? "the peer's current revision \(serverRev?.description ?? "-") is on a branch this database resolved away; it converges when the peer pulls from this database"
            : "the peer has a conflicting revision \(serverRev?.description ?? "-"); pull to resolve it"
        return PeerSyncError(.conflict, reason, context: ["docID": p.docID, "status": "409"])
    }

    private func changesBatch(index: Int, sc: SessionCollection, _ changes: [ChangeEntry],
                              prefetched: [String: Prefetched] = [:]) async throws -> [UInt64] {
        let body: JSONValue = .array(changes.map { c in
            var entry: [JSONValue] = [.int(Int64(c.sequence)), .string(c.docID), .string(c.revID.description)]
            if c.deleted { entry.append(.int(1)) }
            return .array(entry)
        })
        let reply = try await send(.request("changes", properties: collectionProperty(index), body: body.json,
                                            flags: [.compressed]), "changes").checked("changes")
        let answers = try JSONValue.parse(reply.body, "changes reply").arrayValue ?? []
        let maxHistory = reply.properties.int("maxHistory") ?? self.maxHistory
        let deltas = reply.properties.bool("deltas")
        let legacyAttachments = !reply.properties.bool("blobs")
        let outcomes = try await withThrowingTaskGroup(of: (ChangeEntry, PeerSyncError?, Bool).self) { group in
            for (i, c) in changes.enumerated() {
                guard i < answers.count, let known = answers[i].arrayValue else { continue }
                let knownRevs = known.compactMap { $0.stringValue.flatMap { try? RevisionID($0) } }
                group.addTask {
                    let error = try await self.sendRev(index: index, sc: sc, docID: c.docID, revID: c.revID,
                                                       sequence: String(c.sequence), known: knownRevs,
                                                       maxHistory: maxHistory, noConflicts: false, deltas: deltas,
                                                       legacyAttachments: legacyAttachments, prefetched: prefetched[c.docID])
                    return (c, error, true)
                }
            }
            var out: [(ChangeEntry, PeerSyncError?, Bool)] = []
            for try await r in group { out.append(r) }
            return out
        }
        var docs: [ReplicatedDocument] = []
        for (c, error, _) in outcomes {
            if error == nil {
                remoteRevs[index, default: RecentMap()][c.docID] = c.revID
            }
            docs.append(ReplicatedDocument(id: c.docID, collection: sc.collection.fullName, flags: c.deleted ? .deleted : [], error: error))
        }
        if !docs.isEmpty { events.documents(DocumentReplication(isPush: true, documents: docs)) }
        return outcomes.filter { $0.1 != nil }.map(\.0.sequence)
    }

    /// What ``sendRev(index:sc:docID:revID:sequence:known:maxHistory:noConflicts:deltas:legacyAttachments:prefetched:)``
    /// needs of a document, read for a whole batch of changes at once.
    struct Prefetched: Sendable {
        let revisions: DocumentRevisions
        /// The current revision's stored body (tombstones included), not parsed; nil when
        /// it is not stored.
        let currentBody: RevisionBodyData?
    }

    /// The revision trees and stored current bodies of `docIDs`, read in ONE read transaction
    /// (a snapshot; `inReadBatch`) rather than two database round trips per document, and one
    /// record read per document. Documents that no longer exist are absent from the result.
    private func prefetch(_ sc: SessionCollection, _ docIDs: [String]) async throws -> [String: Prefetched] {
        let collection = sc.collection
        let ids = Array(Set(docIDs))
        return try await database.inReadBatch { txn in
            var out: [String: Prefetched] = [:]
            out.reserveCapacity(ids.count)
            for id in ids {
                guard let (revs, body) = try txn.revisionsAndBody(of: id, in: collection) else { continue }
                out[id] = Prefetched(revisions: revs, currentBody: body)
            }
            return out
        }
    }

    /// Sends one `rev`; returns the per-document error (nil on success). Transport failures throw.
    ///
    /// With `deltas` (the peer's reply advertised `deltas: true`), a live revision whose body
    /// is at least ``minDeltaBodySize`` bytes goes as a delta against the first of `known`
    /// whose live body is still stored here, when the delta is at most ``maxDeltaRatio`` ×
    /// the body; if the peer answers `HTTP`/422 (unknown base, bad delta) the full body is sent.
    /// With `legacyAttachments` (the reply lacked `blobs: true`) a body with blobs, and a delta
    /// base, go in legacy form (``LegacyAttachments/encode(_:revpos:)``, `revpos` = generation);
    /// see ``LegacyAttachments/sendsLegacyForm(_:peerSupportsBlobs:)``.
    private func sendRev(index: Int, sc: SessionCollection, docID: String, revID: RevisionID, sequence: String,
                         known: [RevisionID], maxHistory: Int, noConflicts: Bool, deltas: Bool = false,
                         legacyAttachments: Bool = false, prefetched: Prefetched? = nil) async throws -> PeerSyncError? {
        // A document stored before IDs were validated may hold one that cannot travel (NUL
        // separates BLIP properties): that document fails, the session goes on.
        do { try DocumentID.validate(docID) } catch { return error }
        var props = collectionProperty(index)
        props["id"] = docID
        props["rev"] = revID.description
        props["sequence"] = sequence
        var revs: DocumentRevisions?, stored: RevisionBodyData?
        if let prefetched, prefetched.revisions.currentRevID == revID, let current = prefetched.currentBody,
           current.revID == revID {
            revs = prefetched.revisions
            stored = current
        } else {
            let database = self.database, collection = sc.collection
            do {
                (revs, stored) = try await database.inReadBatch { txn in
                    let read = try txn.revisionsAndBody(of: docID, revID: revID, in: collection)
                    return (read?.revisions, read?.body)
                }
            } catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled {
                // Never skipped, never left unanswered: the peer is told, and this side logs it.
                Logger(.replicator).error("could not read \(docID) \(revID) of \(sc.collection.fullName): \(error.message)")
                props["error"] = "500"
                props["errorCode"] = error.code.rawValue
                props["reason"] = error.message
                try await blip.sendNoReply(.request("norev", properties: props))
                return PeerSyncError(error.code, error.message, context: ["docID": docID])
            }
        }
        guard let revs, let info = revs.revision(revID), let stored else {
            if let revs, String(revs.sequence) == sequence {
                // The document has not changed since this change was announced, yet the revision
                // it named cannot be read: the stored record is damaged (its version and its
                // revision tree disagree). Never a 404 ("replaced since"), which the peer skips.
                let error = PeerSyncError(.corrupt, "the stored document \(docID) is damaged: revision \(revID) of its "
                                          + "current record is not in its revision tree with a body", context: ["docID": docID])
                Logger(.replicator).error("could not read \(docID) \(revID) of \(sc.collection.fullName): \(error.message)")
                props["error"] = "500"
                props["errorCode"] = error.code.rawValue
                props["reason"] = error.message
                try await blip.sendNoReply(.request("norev", properties: props))
                return error
            }
            props["error"] = "404"
            props["reason"] = "revision no longer available"
            try await blip.sendNoReply(.request("norev", properties: props))
            return PeerSyncError(.notFound, "revision no longer available", context: ["docID": docID])
        }
        var history: [RevisionID] = []
        let knownSet = Set(known)
        for ancestor in revs.history(of: revID) ?? [] {
            if history.count >= maxHistory {
                if let last = known.first(where: { (revs.history(of: revID) ?? []).contains($0) }) { history[history.count - 1] = last }
                break
            }
            history.append(ancestor)
            if knownSet.contains(ancestor) { break }
        }
        if !history.isEmpty { props["history"] = history.map(\.description).joined(separator: ",") }
        if info.isDeleted { props["deleted"] = "1" }
        if noConflicts { props["noconflicts"] = "1" }
        // The stored canonical JSON goes as it is (the same bytes `JSONValue.object(body).json`
        // gives); it is parsed only when the bytes may reference blobs (blob scan, legacy
        // `_attachments` form) or for a delta against a base the peer has.
        var full = stored.data
        var parsed: [String: JSONValue]?
        var legacy = false
        if stored.mayReferenceBlobs {
            var body = try stored.properties()
            noteSentBlobs(body)
            legacy = LegacyAttachments.sendsLegacyForm(body, peerSupportsBlobs: !legacyAttachments)
            if legacy {
                body = LegacyAttachments.encode(body, revpos: revID.generation)
                full = JSONValue.object(body).json
            }
            parsed = body
        }
        var reply: BLIPMessage
        if deltas, role == .active || enableDeltaSync, !info.isDeleted, full.count >= Self.minDeltaBodySize,
           known.contains(where: { revs.revision($0).map { !$0.isDeleted && $0.hasBody } ?? false }),
           let (base, delta) = try await deltaBody(sc: sc, docID: docID, revs: revs, body: parsed ?? stored.properties(),
                                                  bodySize: full.count, known: known, legacyAttachments: legacy) {
            var deltaProps = props
            deltaProps["deltaSrc"] = base.description
            reply = try await send(.request("rev", properties: deltaProps, body: delta, flags: [.compressed]), "rev")
            if reply.isError, reply.errorDomain == "HTTP", reply.errorCode == 422 {
                reply = try await send(.request("rev", properties: props, body: full, flags: [.compressed]), "rev")
            }
        } else {
            reply = try await send(.request("rev", properties: props, body: full, flags: [.compressed]), "rev")
        }
        if reply.isError, reply.errorDomain == "HTTP", reply.errorCode == 507 {
            // The peer could not store it (disk full): not a per-document refusal; the push
            // stops here and its checkpoint stays before this revision.
            throw PeerSyncError(.diskFull, "disk full on the peer: \(reply.bodyString)",
                                context: ["docID": docID, "status": "507"])
        }
        if reply.isError {
            if role == .passive, reply.errorCode != 409 {
                Logger(.replicator).error("the peer refused \(docID) \(revID): \(reply.errorDomain ?? "BLIP")/\(reply.errorCode ?? 0) \(reply.bodyString)")
            }
            return PeerSyncError(reply.errorCode == 409 ? .conflict : .replicationFailed,
                                 "the peer refused the revision: \(reply.errorDomain ?? "BLIP")/\(reply.errorCode ?? 0) \(reply.bodyString)",
                                 context: ["docID": docID, "status": String(reply.errorCode ?? 0)])
        }
        return nil
    }

    /// The base revision and encoded delta for sending `body` to a peer that has `known`, or
    /// nil when no known live revision's body is stored or the delta is too large.
    private func deltaBody(sc: SessionCollection, docID: String, revs: DocumentRevisions, body: [String: JSONValue],
                           bodySize: Int, known: [RevisionID], legacyAttachments: Bool) async throws -> (RevisionID, [UInt8])? {
        for base in known {
            guard let info = revs.revision(base), !info.isDeleted,
                  var baseBody = try await sc.collection.revisionBody(docID: docID, revID: base) else { continue }
            if legacyAttachments { baseBody = LegacyAttachments.encode(baseBody, revpos: base.generation) }
            let delta = JSONDelta.create(old: .object(baseBody), new: .object(body)) ?? .object([:])
            let bytes = delta.json
            guard Double(bytes.count) <= Self.maxDeltaRatio * Double(bodySize) else { return nil }
            return (base, bytes)
        }
        return nil
    }

    // MARK: - Passive: subChanges

    private func handleSubChanges(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let (index, sc) = try collection(of: request)
        let since = request.properties["since"].flatMap { UInt64($0) } ?? 0
        let continuous = request.properties.bool("continuous")
        var docIDs: Set<String>?
        if !request.body.isEmpty, let ids = try JSONValue.parse(request.body, "subChanges").objectValue?["docIDs"]?.arrayValue {
            docIDs = Set(ids.compactMap(\.stringValue))
        }
        // Sent by Couchbase Lite when it pulls into an empty database: no tombstones.
        let activeOnly = request.properties.bool("activeOnly")
        let task = Task {
            do {
                try await self.push(index: index, since: since, continuous: continuous, mode: .changes,
                                    docIDs: docIDs, activeOnly: activeOnly, progress: { _ in })
            } catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled
                && error.code != .connectionClosed {
                // This side could not read its changes: the peer must not wait for changes that
                // never come. It gets a `norev` with the error (no `sequence`: not about one
                // revision; see `handleNoRev`), then the connection closes.
                Logger(.replicator).error("serving the changes of \(sc.collection.fullName) failed: \(error.message)")
                var props = self.collectionProperty(index)
                props["error"] = "500"
                props["errorCode"] = error.code.rawValue
                props["reason"] = error.message
                try? await self.blip.sendNoReply(.request("norev", properties: props))
                // A PeerSync peer fails its run on that `norev` and closes; closing here at once
                // could overtake it (the peer would see a dropped connection and retry). A peer
                // that ignores it is closed after a grace period.
                try? await Task.sleep(for: .seconds(3))
                await self.blip.close(code: 1011, reason: "the changes feed failed")
            } catch {
                // The connection ended or the peer failed; the session ends with it.
            }
        }
        pushTasks.append(task)
        return nil
    }

    // MARK: - Pulling

    /// Active: subscribes to the peer's changes of collection `index`.
    func subscribe(index: Int, since: JSONValue?, continuous: Bool, docIDs: [String]?, channels: [String]?) async throws {
        pullStates[index] = PullState()
        setBusy(.pull(index), true)
        var props = collectionProperty(index)
        if let since { props["since"] = since.canonicalString }
        if continuous { props["continuous"] = "true" }
        props["batch"] = String(batchSize)
        props["versioning"] = "rev-trees"
        props["revocations"] = "true"
        if let channels, !channels.isEmpty {
            props["filter"] = "sync_gateway/bychannel"
            props["channels"] = channels.joined(separator: ",")
        }
        var body: [UInt8] = []
        if let docIDs { body = JSONValue.object(["docIDs": .array(docIDs.map { .string($0) })]).json }
        _ = try await send(.request("subChanges", properties: props, body: body), "subChanges").checked("subChanges")
    }

    /// Active: waits until the pull of collection `index` is caught up with nothing pending.
    func waitPullIdle(index: Int) async {
        guard let state = pullStates[index], !state.isIdle, !closed else { return }
        await withCheckedContinuation { pullStates[index, default: PullState()].waiters.append($0) }
    }

    /// The remote sequence up to which everything pulled was handled.
    func pulledRemoteSequence(index: Int) -> JSONValue? { pullStates[index]?.completedRemote }

    private func updatePull(_ index: Int, _ change: (inout PullState) -> Void) {
        guard var state = pullStates[index] else { return }
        change(&state)
        while let first = state.batches.first, first.pending.isEmpty, !first.failed {
            state.completedRemote = first.lastSequence
            state.batches.removeFirst()
        }
        if state.isIdle {
            for w in state.waiters { w.resume() }
            state.waiters = []
        }
        pullStates[index] = state
        setBusy(.pull(index), !state.isIdle)
    }

    private func handleChanges(_ request: BLIPRequest, proposed: Bool) async throws -> BLIPMessage? {
        let (index, sc) = try collection(of: request)
        if proposed && role == .active { throw blipError("HTTP", 403, "the active peer does not accept proposed changes") }
        if readOnly { throw blipError("HTTP", 403, "Attempting to push to a pull-only replicator") }
        guard let entries = try JSONValue.parse(request.body, request.profile ?? "changes").arrayValue else {
            throw blipError("BLIP", 400, "changes body must be an array")
        }
        if entries.isEmpty {
            if !proposed { updatePull(index) { $0.caughtUp = true } }
            return BLIPMessage(type: .response, body: Array("[]".utf8))
        }
        if !proposed { setBusy(.pull(index), true) }
        var answers: [JSONValue] = []
        var behindPeer: [(String, RevisionID)] = []
        var requested = Set<String>()
        var lastSequence: JSONValue = .null
        // Every entry's revision tree, read in one transaction (malformed entries are
        // refused below, in order).
        let offset = proposed ? 0 : 1
        let ids = entries.compactMap { $0.arrayValue.flatMap { $0.count > offset ? $0[offset].stringValue : nil } }
        let collection = sc.collection
        let trees = try await database.inReadBatch { txn in
            var out: [String: DocumentRevisions] = [:]
            for id in Set(ids) where (try? DocumentID.validate(id)) != nil {
                if let revs = try txn.revisions(of: id, in: collection) { out[id] = revs }
            }
            return out
        }
        for entry in entries {
            guard let e = entry.arrayValue else { throw blipError("BLIP", 400, "malformed change entry") }
            guard e.count > offset + 1, let docID = e[offset].stringValue,
                  let revText = e[offset + 1].stringValue, let revID = try? RevisionID(revText) else {
                throw blipError("BLIP", 400, "malformed change entry")
            }
            // An ID no peer could store or send (NUL, other controls, too long): that entry is
            // refused with 400 and reported; the rest of the batch goes on.
            do { try DocumentID.validate(docID) } catch {
                if !proposed { lastSequence = e[0] }
                answers.append(.int(400))
                events.documents(DocumentReplication(isPush: false, documents: [
                    ReplicatedDocument(id: docID, collection: sc.collection.fullName, flags: [], error: error),
                ]))
                continue
            }
            let revs = trees[docID]
            if proposed {
                let serverRev = e.count > 2 ? e[2].stringValue.flatMap { $0.isEmpty ? nil : try? RevisionID($0) } : nil
                guard let revs else { answers.append(.int(0)); continue }
                // LiteCore's rule: 304 only for the current revision; only a fast-forward of
                // the current revision (deleted or not) is accepted; anything else — even a
                // revision known here on another branch — is refused before the body travels.
                if revs.currentRevID == revID { answers.append(.int(304)); continue }
                if serverRev == revs.currentRevID {
                    answers.append(.int(0))
                } else {
                    answers.append(.object(["status": .int(409), "rev": .string(revs.currentRevID.description)]))
                }
            } else {
                lastSequence = e[0]
                if role == .active, Self.isRevocation(e.count > 3 ? e[3] : nil) {
                    answers.append(.int(0))
                    remoteRevs[index]?[docID] = nil
                    await applyRevocation(sc: sc, docID: docID)
                    continue
                }
                if let revs, revs.revision(revID) != nil {
                    answers.append(.int(0))
                    remoteRevs[index, default: RecentMap()][docID] = revID
                    if role == .active, revID != revs.currentRevID, !(revs.history(of: revs.currentRevID) ?? []).contains(revID) {
                        // The peer's current revision is on a branch resolved away here.
                        behindPeer.append((docID, revID))
                    }
                    continue
                }
                var known: [JSONValue] = []
                if let revs {
                    for leaf in revs.leaves { known.append(.string(leaf.revID.description)) }
                    for a in (revs.history(of: revs.currentRevID, maxCount: 20) ?? []) { known.append(.string(a.description)) }
                }
                answers.append(.array(known))
                requested.insert(e[0].canonicalString)
            }
        }
        // Resolve against the peer's current revisions that lie on branches closed here, as
        // if they had just been pulled, so that this side's next push is a fast-forward.
        for (docID, revID) in behindPeer {
            do { _ = try await resolveAgainstPeer(sc: sc, docID: docID, serverRev: revID) } catch {
                events.documents(DocumentReplication(isPush: false, documents: [
                    ReplicatedDocument(id: docID, collection: sc.collection.fullName, flags: [],
                                       error: (error as? PeerSyncError) ?? PeerSyncError(.internalError, "\(error)")),
                ]))
            }
        }
        if !proposed {
            let seq = lastSequence
            let pending = requested
            events.progress(0, pending.count)
            updatePull(index) { $0.batches.append(PullBatch(lastSequence: seq, pending: pending)) }
        }
        while answers.last == .int(0) { answers.removeLast() }
        var replyProps: BLIPProperties = [("maxHistory", String(maxHistory)), ("blobs", "true")]
        if role == .active || enableDeltaSync { replyProps["deltas"] = "true" }
        return BLIPMessage(type: .response, properties: replyProps, body: JSONValue.array(answers).json)
    }

    /// A `norev` with `error` 404 is a revision replaced on the peer since its `changes`
    /// (the next change brings the new one). Any other error is the peer failing to read the
    /// revision: a document error, and the session fails (``fail(_:)``) without the
    /// checkpoint passing it. The PeerSync peer adds `errorCode` (its ``PeerSyncError/Code``).
    private func handleNoRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let (index, sc) = try collection(of: request)
        let props = request.properties
        let status = props["error"].flatMap { Int($0) } ?? 404
        if status != 404, role == .active {
            let docID = props["id"] ?? "-"
            let code = props["errorCode"].map { PeerSyncError.Code(rawValue: $0) } ?? .replicationFailed
            let what = props["id"] == nil ? "its changes" : docID
            let error = PeerSyncError(code, "the peer could not send \(what): \(props["reason"] ?? "error \(status)")",
                                      context: ["docID": docID, "status": String(status)])
            finishRev(index, props["sequence"], failed: true)
            events.documents(DocumentReplication(isPush: false, documents: [
                ReplicatedDocument(id: docID, collection: sc.collection.fullName, flags: [], error: error),
            ]))
            fail(error)
            return nil
        }
        if props["sequence"] != nil {
            finishRev(index, props["sequence"])
            events.progress(1, 0)
        }
        return nil
    }

    /// The pulled change `sequence` is handled; `failed`: it was not stored, so the
    /// checkpoint never passes its batch.
    private func finishRev(_ index: Int, _ sequence: String?, failed: Bool = false) {
        guard let sequence else { return }
        let key = (try? JSONValue(parsing: sequence))?.canonicalString ?? sequence
        updatePull(index) { state in
            for i in state.batches.indices where state.batches[i].pending.remove(key) != nil && failed {
                state.batches[i].failed = true
            }
        }
    }

    /// Active: ends the session with `error` (the first one wins): the connection is closed,
    /// waiting pulls are released, and the run throws `error` instead of completing.
    func fail(_ error: PeerSyncError) {
        guard role == .active, failure == nil else { return }
        failure = error
        Task { await self.stop() }
    }

    /// A received revision that could not be stored (the transaction failed: disk full, I/O
    /// error): its document event carries the error, its change is never checkpointed, the
    /// active session fails (``fail(_:)``) and the peer gets HTTP 507 (disk full) or 500 —
    /// never success, never a per-document refusal that a checkpoint would pass.
    private func storageFailure(_ error: any Error, index: Int, sc: SessionCollection, docID: String,
                                sequence: String?, flags: DocumentFlags) -> PeerSyncError {
        let e = (error as? PeerSyncError) ?? PeerSyncError(.storage, "\(error)")
        let docError = PeerSyncError(e.code, e.message, context: e.context.merging(["docID": docID]) { a, _ in a })
        finishRev(index, sequence, failed: true)
        // The session is already ending (another failure, or stopped): nothing new to report.
        guard failure == nil, !closed else { return blipError("HTTP", 503, e.message) }
        // The listener logs it; the active side reports it in its status.
        if role == .passive { Logger(.replicator).error("could not store \(docID) in \(sc.collection.fullName): \(e.message)") }
        events.documents(DocumentReplication(isPush: false, documents: [
            ReplicatedDocument(id: docID, collection: sc.collection.fullName, flags: flags, error: docError),
        ]))
        fail(docError)
        return e.code == .diskFull ? blipError("HTTP", 507, e.message) : blipError("HTTP", 500, e.message)
    }

    /// A `rev`. On the active side a pulled revision that is not stored for any reason but a
    /// delta to resend in full (422) or a document ID no database can hold (a per-document
    /// error) — a body that does not parse, an invalid revision ID, a storage failure — is
    /// never skipped: its document event has the error, its change is never
    /// checkpointed and the session fails (``fail(_:)``); a damaged revision is `.corrupt`.
    private func handleRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        do {
            return try await receiveRev(request)
        } catch let error as PeerSyncError where role == .active && failure == nil && error.context["blipCode"] != "422" {
            let docID = request.properties["id"] ?? "-"
            let collection = (try? self.collection(of: request))?.1.collection.fullName ?? "-"
            do { try DocumentID.validate(docID) } catch let idError {
                // An ID no database can hold (e.g. NUL): a per-document error; the session goes on.
                events.documents(DocumentReplication(isPush: false, documents: [
                    ReplicatedDocument(id: docID, collection: collection, flags: [], error: idError),
                ]))
                throw error
            }
            let e = PeerSyncError(.corrupt, "the peer sent a revision of \(docID) that cannot be stored: \(error.message)",
                                  context: ["docID": docID])
            events.documents(DocumentReplication(isPush: false, documents: [
                ReplicatedDocument(id: docID, collection: collection, flags: [], error: e),
            ]))
            fail(e)
            throw error
        }
    }

    private func receiveRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let (index, sc) = try collection(of: request)
        let props = request.properties
        let sequence = props["sequence"]
        // Active: true until the revision is stored (or deliberately not: filter, revocation,
        // a delta to be resent in full, an ID no database can hold); the defer then never lets
        // the checkpoint pass it.
        var notStored = role == .active
        defer { finishRev(index, sequence, failed: notStored) }
        guard let docID = props["id"], let revText = props["rev"], let revID = try? RevisionID(revText) else {
            throw blipError("HTTP", 400, "invalid document or revision ID")
        }
        do { try DocumentID.validate(docID) } catch {
            // Never storable anywhere (e.g. NUL): a per-document error, not a failed session.
            notStored = false
            throw blipError("HTTP", 400, error.message)
        }
        if role == .passive && readOnly { throw blipError("HTTP", 403, "Attempting to push to a pull-only replicator") }
        var history: [RevisionID] = []
        if let text = props["history"], !text.isEmpty {
            for part in text.split(separator: ",") {
                guard let r = try? RevisionID(part.trimmingCharacters(in: .whitespaces)) else {
                    throw blipError("HTTP", 400, "invalid revision history")
                }
                history.append(r)
            }
        }
        let deleted = props.bool("deleted")
        let parsed = try JSONValue.parse(request.body, "rev")
        var newBody: JSONValue = parsed
        if let src = props["deltaSrc"] {
            guard let base = try? RevisionID(src), let revs = try await sc.collection.revisions(of: docID),
                  let info = revs.revision(base), !info.isDeleted,
                  var baseBody = try await sc.collection.revisionBody(docID: docID, revID: base) else {
                notStored = false  // the peer resends the full revision with this sequence
                throw blipError("HTTP", 422, "unknown delta base revision \(src)")
            }
            // A delta touching `_attachments` is against the base's legacy form (notes §8).
            if parsed[LegacyAttachments.key] != nil {
                baseBody = LegacyAttachments.encode(baseBody, revpos: base.generation)
            }
            do { newBody = try JSONDelta.apply(parsed, to: .object(baseBody)) } catch {
                notStored = false
                throw blipError("HTTP", 422, error.message)
            }
        }
        guard var body = newBody.objectValue else {
            throw blipError("HTTP", 400, "revision body must be a JSON object")
        }
        if role == .active, Self.isRemovedBody(body) {
            remoteRevs[index]?[docID] = nil
            await applyRevocation(sc: sc, docID: docID)
            events.progress(1, 0)
            notStored = false
            return nil
        }
        do { body = try LegacyAttachments.decode(body) } catch {
            throw blipError("LiteCore", 7, error.message)  // LiteCore's NotFound
        }
        let flags: DocumentFlags = deleted ? .deleted : []
        let fullName = sc.collection.fullName
        if role == .active, let filter = sc.config.pullFilter {
            let candidate = Self.document(docID: docID, revID: revID, body: body, deleted: deleted, like: sc)
            if let candidate, !filter(candidate, flags) {
                events.progress(1, 0)
                notStored = false
                return nil
            }
        }
        // Blobs first: the revision is only inserted once every blob it references is stored.
        var pins: [Blob] = []
        for ref in blobReferences(in: .object(body)) + LegacyAttachments.attachmentReferences(in: body) {
            if try await database.getBlob(properties: ref) != nil { continue }
            guard let digest = ref["digest"]?.stringValue else { continue }
            pins.append(try await fetchBlob(digest: digest, reference: ref, index: index, docID: docID))
        }
        // Inserted with the other revisions arriving meanwhile, in one transaction; the reply
        // (returning from this handler) is only sent once that transaction has committed.
        // The passive side accepts only a fast-forward of the current revision, whatever the
        // pusher's `noconflicts` says (a Couchbase Lite listener does the same): the pusher
        // must pull and resolve.
        let request = RevisionInsert(collection: sc.collection, docID: docID, revID: revID, history: history, body: body,
                                     deleted: deleted, allowConflict: role == .active, readBack: role == .active)
        let outcome: RevisionInsertOutcome
        do { outcome = try await inserter.insert(request) } catch {
            throw storageFailure(error, index: index, sc: sc, docID: docID, sequence: sequence, flags: flags)
        }
        let result: InsertResult
        var treeAfter: DocumentRevisions?
        switch outcome {
        case .refused(let error) where error.code == .conflict:
            throw blipError("HTTP", 409, "conflict: the revision's parent is not the current revision")
        case .refused(let error):
            throw blipError("HTTP", 400, error.message)
        case .inserted(let inserted, let tree):
            result = inserted
            treeAfter = tree
        }
        withExtendedLifetime(pins) {}
        notStored = false
        remoteRevs[index, default: RecentMap()][docID] = revID
        var docError: PeerSyncError?
        if role == .active, result.inserted {
            do { try await resolveIfConflicted(index: index, sc: sc, docID: docID, pulled: revID, tree: treeAfter) } catch {
                docError = (error as? PeerSyncError) ?? PeerSyncError(.internalError, "\(error)")
            }
        }
        if role == .active { events.progress(1, 0) }
        events.documents(DocumentReplication(isPush: false, documents: [
            ReplicatedDocument(id: docID, collection: fullName, flags: flags, error: docError),
        ]))
        return nil
    }

    static func document(docID: String, revID: RevisionID, body: [String: JSONValue], deleted: Bool,
                         like sc: SessionCollection) -> Document? {
        sc.collection.makeDocument(id: docID, revisionID: revID, properties: body, isDeleted: deleted)
    }

    // MARK: - Conflicts

    /// After inserting a pulled revision: if it conflicts with the local current revision
    /// (two branches; or a live revision beside a deletion it does not descend from), ask the
    /// resolver and save the result the Couchbase Lite way — always on the *remote* branch:
    /// the remote revision itself when the result has its content (or both are deletions),
    /// otherwise a new revision, child of the remote one, with the result's body (a tombstone
    /// when the result is nil). The local branch is closed (a tombstone flagged
    /// ``RevisionFlags/closed``) and stays local, so pushing the new current revision is a
    /// fast-forward for the peer.
    /// `tree`: the document's revision tree read right after the insertion, if known (saves
    /// a read in the common case where there is nothing to resolve).
    private func resolveIfConflicted(index: Int, sc: SessionCollection, docID: String, pulled: RevisionID,
                                     tree: DocumentRevisions? = nil) async throws {
        var known = tree
        var lastRefusal: PeerSyncError?
        for _ in 0..<4 {
            let read: DocumentRevisions?
            if let known { read = known } else { read = try await sc.collection.revisions(of: docID) }
            known = nil
            guard let revs = read, let remoteInfo = revs.revision(pulled), remoteInfo.isLeaf else { return }
            guard let localInfo = Self.conflictingLocal(revs, pulled: remoteInfo) else {
                if remoteInfo.isConflict {
                    try await sc.collection.closeConflict(docID: docID, winningRevisionID: pulled, losingRevisionID: nil)
                }
                return
            }
            do {
                try await resolve(sc: sc, docID: docID, local: localInfo, remote: remoteInfo, in: revs)
                return
            } catch let error as PeerSyncError where error.code == .invalidArgument {
                lastRefusal = error
                continue  // the document changed under us (or the resolution was refused); look again
            }
        }
        // Never silently unresolved: the document's pull event carries this error.
        throw PeerSyncError(.conflict, "the conflict on \(docID) is still unresolved after 4 attempts: "
                            + (lastRefusal?.message ?? "the document kept changing"), context: ["docID": docID])
    }

    /// Asks the resolver about `local` against `remote` and saves the result on the remote
    /// branch (see ``resolveIfConflicted(index:sc:docID:pulled:tree:)``). `remote` may lie on a
    /// branch this database closed earlier (the peer still has it as its current revision):
    /// it is reopened. When the remote body is no longer stored, the local body continues the
    /// remote branch (local wins). Throws `.invalidArgument` when the document changed meanwhile.
    private func resolve(sc: SessionCollection, docID: String, local localInfo: RevisionInfo,
                         remote remoteInfo: RevisionInfo, in revs: DocumentRevisions) async throws {
        let localRev = localInfo.revID, remoteRev = remoteInfo.revID
        // Whether the remote revision is a leaf once the closed leaves under it are removed.
        let remoteIsLeaf = revs.revisions.allSatisfy { $0.parentRevID != remoteRev || ($0.isLeaf && $0.flags.contains(.closed)) }
        if localInfo.isDeleted && remoteInfo.isDeleted {
            // Two deletions: nothing to ask; the remote branch continues.
            try await sc.collection.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev,
                                                  mergedBody: remoteIsLeaf ? nil : [:], mergedDeleted: true)
            return
        }
        let localBody = localInfo.isDeleted ? nil : try await sc.collection.revisionBody(docID: docID, revID: localRev)
        let remoteBody = remoteInfo.isDeleted ? nil : try await sc.collection.revisionBody(docID: docID, revID: remoteRev)
        let resolvedBody: [String: JSONValue]?
        if !remoteInfo.isDeleted && remoteBody == nil {
            resolvedBody = localBody
        } else {
            let local = localBody.flatMap { Self.document(docID: docID, revID: localRev, body: $0, deleted: false, like: sc) }
            let remote = remoteBody.flatMap { Self.document(docID: docID, revID: remoteRev, body: $0, deleted: false, like: sc) }
            let conflict = Conflict(documentID: docID, localDocument: local, remoteDocument: remote,
                                    localRevisionID: localRev, remoteRevisionID: remoteRev)
            resolvedBody = try await sc.resolver.resolve(conflict)?.properties
        }
        let remoteAsIs = remoteInfo.isDeleted ? resolvedBody == nil : resolvedBody == remoteBody
        if remoteAsIs && remoteIsLeaf && remoteInfo.hasBody {
            // The remote revision as it is (its content, or its deletion).
            try await sc.collection.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev)
        } else {
            // Local wins, a merge or a deletion: a new revision continues the remote branch.
            try await sc.collection.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev,
                                                  mergedBody: resolvedBody ?? [:], mergedDeleted: resolvedBody == nil)
        }
    }

    /// Resolves against a peer's current revision that is known here on a branch this database
    /// resolved away (the peer never learnt of that resolution), as if it had just been pulled,
    /// so that this side's next push is a fast-forward. Returns the document's revisions
    /// afterwards, or nil when there was nothing to resolve (or it changed meanwhile).
    private func resolveAgainstPeer(sc: SessionCollection, docID: String, serverRev: RevisionID) async throws
        -> DocumentRevisions? {
        guard let revs = try await sc.collection.revisions(of: docID), let remote = revs.revision(serverRev),
              serverRev != revs.currentRevID, !(revs.history(of: revs.currentRevID) ?? []).contains(serverRev),
              let local = revs.revision(revs.currentRevID) else { return nil }
        do {
            try await resolve(sc: sc, docID: docID, local: local, remote: remote, in: revs)
        } catch let error as PeerSyncError where error.code == .invalidArgument {
            return nil
        }
        return try await sc.collection.revisions(of: docID)
    }

    /// The local leaf a pulled leaf conflicts with, or nil when there is no conflict: the
    /// current revision when the pulled one did not become current; when it did, another
    /// live leaf, or — for a live pulled revision — an open tombstone leaf it does not
    /// descend from (deletion vs edit). Closed leaves never take part.
    static func conflictingLocal(_ revs: DocumentRevisions, pulled: RevisionInfo) -> RevisionInfo? {
        if revs.currentRevID != pulled.revID { return revs.revision(revs.currentRevID) }
        let open = revs.leaves.filter { $0.revID != pulled.revID && !$0.flags.contains(.closed) }
        if let live = open.first(where: { !$0.isDeleted }) { return live }
        guard !pulled.isDeleted else { return nil }
        return open.filter { deletionConflicts(live: pulled.revID, tombstone: $0, in: revs) }.max { $0.revID < $1.revID }
    }

    /// The deletion-vs-edit rule, the same for both roles (Couchbase Lite: deletion wins):
    /// live revision `live` conflicts with tombstone leaf `tombstone` unless `live`
    /// recreates the document, i.e. unless a deletion is among its ancestors.
    static func deletionConflicts(live: RevisionID, tombstone: RevisionInfo, in revs: DocumentRevisions) -> Bool {
        guard tombstone.isDeleted, tombstone.isLeaf else { return false }
        let ancestors = revs.history(of: live) ?? []
        return !ancestors.contains { revs.revision($0)?.isDeleted == true }
    }

    // MARK: - Blobs

    /// Digests referenced by revisions sent in this session: the only ones served to the peer
    /// (see `ReplicationSession+Blobs.swift`).
    var sentBlobDigests: Set<String> = []
    /// When this session last served blob content (a `rev` reply waits while the peer fetches).
    let blobActivity = BlobActivity()

    // MARK: - Passive entry

    /// Passive: serves the peer until the connection closes.
    func runPassive() async {
        await registerHandlers()
        await blip.start()
        _ = await blip.waitUntilClosed()
        closed = true
        for task in pushTasks { task.cancel() }
    }
}
