import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// Receives one collection's revisions from the peer (LiteCore's `Puller`, with its
/// `RevFinder`): decides from each `changes`/`proposeChanges` batch which revisions to ask for,
/// receives the `rev`s (deltas, legacy attachments, blobs — see `Puller+Revisions.swift`),
/// hands them to the shared ``RevisionInserter``, and tracks what is still pending. Two ways
/// revisions arrive, each with its own entry points (the session wires the ones of its role):
///
/// - **pulled** — the active side subscribed (``subscribe(since:continuous:docIDs:channels:)``)
///   and receives `changes` (``handleChanges(_:)``), `rev` (``handleRev(_:)``) and `norev`
///   (``handleNoRev(_:)``). A pulled revision may conflict: it is stored as a branch and
///   resolved here (``ConflictResolution``); revocations are honoured (`Revocation.swift`); the
///   remote sequence up to which everything was handled is tracked for the checkpoint
///   (``pulledRemoteSequence``), and a revision that cannot be stored fails the session.
/// - **pushed** — the passive side receives the peer's push: `proposeChanges`
///   (``handleProposedChanges(_:)``), `changes` from a legacy pusher
///   (``handlePushedChanges(_:)``) and `rev` (``handlePushedRev(_:)``). Only a fast-forward of
///   the current revision is accepted (409 otherwise), whatever the pusher's `noconflicts`
///   says: the pusher must pull and resolve (Couchbase Lite's rule).
///
/// Thread-safety: an actor, one per collection and session, running concurrently with the
/// ``Pusher``; `rev`s are handled concurrently (each in its own BLIP handler task, interleaved
/// on this actor while they wait for blobs and the inserter). Shared state lives in the
/// ``SessionContext``.
actor Puller {
    let context: SessionContext
    let index: Int
    let collection: SessionCollection
    /// Inserts received revisions in shared transactions (one per session).
    let inserter: RevisionInserter
    /// Pushes are refused with `HTTP`/403 (a read-only passive side).
    let readOnly: Bool
    /// Replies to `changes`/`proposeChanges` carry `deltas: true`, so the peer may send deltas
    /// (the active side always; a passive side only with `enableDeltaSync`).
    let acceptsDeltas: Bool
    /// Purge documents the peer revoked access to (see `Revocation.swift`).
    let enableAutoPurge: Bool

    /// The pull since ``subscribe(since:continuous:docIDs:channels:)``: nil before (and on a
    /// passive side, which never subscribes).
    private var pull: PullState?

    struct PullBatch {
        var lastSequence: JSONValue
        var pending: Set<String>
        /// A revision of this batch was not stored: the checkpoint never passes this batch.
        var failed = false
    }

    /// Pending revisions per `changes` batch, in order: the checkpoint only passes a batch
    /// once it and every batch before it are complete.
    struct PullState {
        var caughtUp = false
        var batches: [PullBatch] = []
        var completedRemote: JSONValue?
        var waiters: [CheckedContinuation<Void, Never>] = []
        var isIdle: Bool { caughtUp && batches.allSatisfy { $0.pending.isEmpty } }
    }

    init(context: SessionContext, index: Int, collection: SessionCollection, inserter: RevisionInserter,
         readOnly: Bool = false, acceptsDeltas: Bool, enableAutoPurge: Bool = true) {
        self.context = context
        self.index = index
        self.collection = collection
        self.inserter = inserter
        self.readOnly = readOnly
        self.acceptsDeltas = acceptsDeltas
        self.enableAutoPurge = enableAutoPurge
    }

    /// Releases whoever waits in ``waitUntilIdle()``.
    func stop() {
        guard var state = pull else { return }
        for w in state.waiters { w.resume() }
        state.waiters = []
        pull = state
    }

    // MARK: - Pulling (active)

    /// Subscribes to the peer's changes (`subChanges`, with revocations) after `since`; the
    /// peer then sends `changes`. Throws the peer's refusal or a transport error.
    func subscribe(since: JSONValue?, continuous: Bool, docIDs: [String]?, channels: [String]?) async throws {
        pull = PullState()
        context.setBusy(.pull(index), true)
        var props = context.collectionProperty(index)
        if let since { props["since"] = since.canonicalString }
        if continuous { props["continuous"] = "true" }
        props["batch"] = String(SessionContext.batchSize)
        props["versioning"] = "rev-trees"
        props["revocations"] = "true"
        if let channels, !channels.isEmpty {
            props["filter"] = "sync_gateway/bychannel"
            props["channels"] = channels.joined(separator: ",")
        }
        var body: [UInt8] = []
        if let docIDs { body = JSONValue.object(["docIDs": .array(docIDs.map { .string($0) })]).json }
        _ = try await context.send(.request("subChanges", properties: props, body: body), "subChanges").checked("subChanges")
    }

    /// Resolves the conflicts already stored in this collection (LiteCore's
    /// `findExistingConflicts`): a pulled branch whose resolution did not finish — the session
    /// ended part-way, or the resolver threw — would otherwise stay unresolved, because the
    /// checkpoint has passed it and the peer never sends it again. Run when the pull starts;
    /// each document resolved is a pull event (with its error if the resolution failed).
    /// Throws only what ends the session (the database closed, the session stopped).
    func resolveExistingConflicts() async throws {
        let docIDs = try await collection.collection.conflictedDocumentIDs()
        let resolution = ConflictResolution(collection: collection)
        for docID in docIDs {
            if context.isClosed { return }
            do {
                let resolved = try await context.handlingConflicts(of: docID) { try await resolution.resolveExisting(docID: docID) }
                guard resolved else { continue }
                context.events.documents(DocumentReplication(isPush: false, documents: [
                    ReplicatedDocument(id: docID, collection: collection.collection.fullName, flags: [], error: nil),
                ]))
            } catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled {
                reportError(docID, error)
            }
        }
    }

    /// Waits until the pull is caught up with nothing pending (or the session stopped).
    func waitUntilIdle() async {
        guard let state = pull, !state.isIdle, !context.isClosed else { return }
        await withCheckedContinuation { pull?.waiters.append($0) }
    }

    /// The remote sequence up to which everything pulled was handled (the checkpoint's `remote`).
    var pulledRemoteSequence: JSONValue? { pull?.completedRemote }

    private func updatePull(_ change: (inout PullState) -> Void) {
        guard var state = pull else { return }
        change(&state)
        while let first = state.batches.first, first.pending.isEmpty, !first.failed {
            state.completedRemote = first.lastSequence
            state.batches.removeFirst()
        }
        if state.isIdle {
            for w in state.waiters { w.resume() }
            state.waiters = []
        }
        pull = state
        context.setBusy(.pull(index), !state.isIdle)
    }

    /// The pulled change `sequence` is handled; `failed`: it was not stored, so the
    /// checkpoint never passes its batch.
    func finishRev(_ sequence: String?, failed: Bool = false) {
        guard let sequence else { return }
        let key = (try? JSONValue(parsing: sequence))?.canonicalString ?? sequence
        updatePull { state in
            for i in state.batches.indices where state.batches[i].pending.remove(key) != nil && failed {
                state.batches[i].failed = true
            }
        }
    }

    /// Pulled `changes`: answers, per entry, 0 (not wanted: known here, or revoked) or the
    /// revisions this side has of the document (asking for the revision, with those as
    /// possible delta bases and history ends); an entry whose document ID no database can
    /// hold is answered 400 and reported. A peer's current revision known here on a branch
    /// this side resolved away is resolved against now, so that the next push is a
    /// fast-forward. An empty batch means caught up.
    func handleChanges(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let entries = try changeEntries(request)
        if entries.isEmpty {
            updatePull { $0.caughtUp = true }
            return BLIPMessage(type: .response, body: Array("[]".utf8))
        }
        context.setBusy(.pull(index), true)
        let trees = try await readTrees(entries, docIDAt: 1)
        var answers: [JSONValue] = []
        var behindPeer: [(String, RevisionID)] = []
        var requested = Set<String>()
        var wanted: [WantedRevision] = []
        var lastSequence: JSONValue = .null
        for entry in entries {
            let (e, docID, revID) = try Self.parse(entry, docIDAt: 1)
            lastSequence = e[0]
            guard refuseInvalid(docID, &answers) else { continue }
            if Self.isRevocation(e.count > 3 ? e[3] : nil) {
                answers.append(.int(0))
                context.setPeerRevision(index, docID, nil)
                await applyRevocation(docID: docID)
                continue
            }
            let revs = trees[docID]
            if let revs, revs.revision(revID) != nil {
                answers.append(.int(0))
                context.setPeerRevision(index, docID, revID)
                if revID != revs.currentRevID, !(revs.history(of: revs.currentRevID) ?? []).contains(revID) {
                    // The peer's current revision is on a branch resolved away here.
                    behindPeer.append((docID, revID))
                }
                continue
            }
            wanted.append(WantedRevision(answer: answers.count, entry: entry, docID: docID, revID: revID))
            answers.append(Self.knownRevisions(revs))
            requested.insert(e[0].canonicalString)
        }
        // Offered over another link too and being fetched there: fetched once.
        for (w, fresh) in try await settleClaims(wanted, docIDAt: 1) {
            if let fresh, fresh.revision(w.revID) != nil {
                answers[w.answer] = .int(0)
                context.setPeerRevision(index, w.docID, w.revID)
                requested.remove(w.entry.arrayValue?.first?.canonicalString ?? "")
            } else {
                answers[w.answer] = Self.knownRevisions(fresh)
            }
        }
        // Resolve against the peer's current revisions that lie on branches closed here, as
        // if they had just been pulled, so that this side's next push is a fast-forward.
        let resolution = ConflictResolution(collection: collection)
        for (docID, revID) in behindPeer {
            do {
                _ = try await context.handlingConflicts(of: docID) {
                    try await resolution.resolveAgainstPeer(docID: docID, serverRev: revID)
                }
            } catch {
                reportError(docID, (error as? PeerSyncError) ?? PeerSyncError(.internalError, "\(error)"))
            }
        }
        let seq = lastSequence
        let pending = requested
        ReplicationCounters.add(ReplicationCounters.entriesRequested, pending.count)
        context.events.progress(0, pending.count)
        updatePull { $0.batches.append(PullBatch(lastSequence: seq, pending: pending)) }
        return reply(answers)
    }

    /// A `norev` with `error` 404 is a revision replaced on the peer since its `changes`
    /// (the next change brings the new one). Any other error is the peer failing to read the
    /// revision (or, without `sequence`, its changes): a document error, and the session fails
    /// (``SessionContext/fail(_:)``) without the checkpoint passing it. The PeerSync peer adds
    /// `errorCode` (its ``PeerSyncError/Code``).
    func handleNoRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let props = request.properties
        if let docID = props["id"], let revID = props["rev"].flatMap({ try? RevisionID($0) }) { releaseClaim(docID, revID) }
        let status = props["error"].flatMap { Int($0) } ?? 404
        if status != 404 {
            let docID = props["id"] ?? "-"
            let code = props["errorCode"].map { PeerSyncError.Code(rawValue: $0) } ?? .replicationFailed
            let what = props["id"] == nil ? "its changes" : docID
            let error = PeerSyncError(code, "the peer could not send \(what): \(props["reason"] ?? "error \(status)")",
                                      context: ["docID": docID, "status": String(status)])
            finishRev(props["sequence"], failed: true)
            reportError(docID, error)
            context.fail(error)
            return nil
        }
        if props["sequence"] != nil {
            finishRev(props["sequence"])
            context.events.progress(1, 0)
        }
        return nil
    }

    // MARK: - Receiving a push (passive)

    /// `proposeChanges` (LiteCore's rule): 304 only for the current revision; 0 when the
    /// proposal's parent (`serverRev`) is the current revision (deleted or not) or the document
    /// is new; anything else — even a revision known here on another branch — is refused with
    /// `{"status":409,"rev":<current>}` before the body travels. An invalid document ID is 400.
    func handleProposedChanges(_ request: BLIPRequest) async throws -> BLIPMessage? {
        try await answerPushedBatch(request, docIDAt: 0) { e, docID, revID, revs in
            // The proposer's current revision is `revID` whatever the answer: this side's pusher
            // need not offer it back (a 304 was not recorded, so the peer was offered, in a
            // `changes`, revisions it had just proposed).
            context.setPeerRevision(index, docID, revID)
            let serverRev = e.count > 2 ? e[2].stringValue.flatMap { $0.isEmpty ? nil : try? RevisionID($0) } : nil
            guard let revs else { return .int(0) }
            if revs.currentRevID == revID { return .int(304) }
            if serverRev == revs.currentRevID { return .int(0) }
            return .object(["status": .int(409), "rev": .string(revs.currentRevID.description)])
        }
    }

    /// `changes` from a pusher (a legacy client): answers 0 for revisions known here, the
    /// revisions this side has of the document otherwise (whether the pushed revision is a
    /// fast-forward is decided when it arrives, ``handlePushedRev(_:)``).
    func handlePushedChanges(_ request: BLIPRequest) async throws -> BLIPMessage? {
        try await answerPushedBatch(request, docIDAt: 1) { _, docID, revID, revs in
            guard let revs, revs.revision(revID) != nil else { return Self.knownRevisions(revs) }
            context.setPeerRevision(index, docID, revID)
            return .int(0)
        }
    }

    /// A batch the peer pushes: refused with `HTTP`/403 when read-only; each entry answered by
    /// `answer` with the document's revision tree (all read in one transaction), except an
    /// invalid document ID (400, reported).
    private func answerPushedBatch(
        _ request: BLIPRequest, docIDAt offset: Int,
        _ answer: (_ entry: [JSONValue], _ docID: String, _ revID: RevisionID, _ revs: DocumentRevisions?) -> JSONValue
    ) async throws -> BLIPMessage {
        if readOnly { throw PeerSyncError.reply(.http(403, "Attempting to push to a pull-only replicator")) }
        let entries = try changeEntries(request)
        if entries.isEmpty { return BLIPMessage(type: .response, body: Array("[]".utf8)) }
        let trees = try await readTrees(entries, docIDAt: offset)
        var answers: [JSONValue] = []
        var wanted: [WantedRevision] = []
        for entry in entries {
            let (e, docID, revID) = try Self.parse(entry, docIDAt: offset)
            guard refuseInvalid(docID, &answers) else { continue }
            let a = answer(e, docID, revID, trees[docID])
            if Self.asksForRevision(a, proposal: offset == 0) {
                wanted.append(WantedRevision(answer: answers.count, entry: entry, docID: docID, revID: revID))
            }
            answers.append(a)
        }
        // Offered over another link too and being fetched there: fetched once.
        for (w, fresh) in try await settleClaims(wanted, docIDAt: offset) {
            let (e, _, _) = try Self.parse(w.entry, docIDAt: offset)
            answers[w.answer] = answer(e, w.docID, w.revID, fresh)
            // Not asked for after all (stored meanwhile, or now a conflict): nobody is to wait
            // for it here.
            if !Self.asksForRevision(answers[w.answer], proposal: offset == 0) { releaseClaim(w.docID, w.revID) }
        }
        ReplicationCounters.add(ReplicationCounters.entriesRequested,
                                answers.count { Self.asksForRevision($0, proposal: offset == 0) })
        return reply(answers)
    }

    // MARK: - Revisions offered over several links

    /// An entry of a `changes`/`proposeChanges` batch this side asks for.
    struct WantedRevision {
        /// Its index in the batch's answers.
        let answer: Int
        let entry: JSONValue
        let docID: String
        let revID: RevisionID
    }

    /// Whether an answer asks for the revision: in a `proposeChanges` reply 0 does; in a
    /// `changes` reply an array (the revisions known here) does.
    private static func asksForRevision(_ answer: JSONValue, proposal: Bool) -> Bool {
        proposal ? answer == .int(0) : answer.arrayValue != nil
    }

    /// How long a batch's answer waits for revisions that another session of this database is
    /// fetching (then it reads the database again, and asks for what is still missing): as
    /// long as that session keeps delivering them — until none arrived for
    /// ``claimQuietLimit`` — and at most a quarter of the reply timeout, well before the
    /// peer gives up on the answer.
    var claimWaitLimit: Duration { context.replyTimeout / 4 }
    /// The claim wait ends when none of the awaited revisions arrived for this long.
    var claimQuietLimit: Duration { min(context.replyTimeout / 4, .seconds(2)) }

    /// Claims `wanted` in the database's ``RevisionsInFlight``. Those another session (another
    /// link) is fetching are waited for (at most ``claimWaitLimit``), read again and returned
    /// with their tree now (nil: the document is still unknown) for the caller to answer again;
    /// those still missing are claimed by this session, which asks for them.
    private func settleClaims(_ wanted: [WantedRevision], docIDAt offset: Int) async throws -> [(WantedRevision, DocumentRevisions?)] {
        guard !wanted.isEmpty else { return [] }
        let inFlight = context.database.revisionsInFlight, owner = ObjectIdentifier(context)
        // The session stopped meanwhile (a batch is answered while, or after, its connection
        // closes): its stop released its claims, perhaps before these were taken, and nothing
        // would release them later — every batch offering them over another link would wait
        // its quiet limit for them (the 10–15 s tail of the 64-peer mesh benchmark).
        defer { if context.isClosed { inFlight.releaseAll(owner: owner) } }
        let name = collection.collection.fullName
        let keyed = wanted.map { (RevisionsInFlight.key(collection: name, docID: $0.docID, revID: $0.revID), $0) }
        let others = inFlight.claim(keyed.map(\.0), owner: owner)
        guard !others.isEmpty else { return [] }
        await inFlight.waitForRelease(of: others, quietLimit: claimQuietLimit, totalLimit: claimWaitLimit)
        let deferred = keyed.filter { others.contains($0.0) }
        let trees = try await readTrees(deferred.map(\.1.entry), docIDAt: offset)
        ReplicationCounters.add(ReplicationCounters.entriesDeferred, deferred.count)
        return deferred.map { key, w in
            let fresh = trees[w.docID]
            if fresh?.revision(w.revID) == nil { inFlight.take(key, owner: owner) } else {
                ReplicationCounters.add(ReplicationCounters.entriesSavedByClaims)
            }
            return (w, fresh)
        }
    }

    /// Releases this session's claim on a revision once it has been handled (stored or not).
    func releaseClaim(_ docID: String, _ revID: RevisionID) {
        context.database.revisionsInFlight.release(
            RevisionsInFlight.key(collection: collection.collection.fullName, docID: docID, revID: revID),
            owner: ObjectIdentifier(context))
    }

    /// A `rev` that arrived: its claim moves from the session to the handler until the
    /// handler ends (``ReceivedClaim/release()``), so that the session's end — which releases
    /// all its claims at once (``SessionContext/stop()``) — never releases a revision that is
    /// still being stored: another link would find the database without it and fetch it a
    /// second time (a revision waits up to ``RevisionInserter/insertionDelay`` for its
    /// transaction; a link moved to another transport closes its old session meanwhile).
    func holdClaim(_ docID: String, _ revID: RevisionID) -> ReceivedClaim {
        ReceivedClaim(RevisionsInFlight.key(collection: collection.collection.fullName, docID: docID, revID: revID),
                      in: context.database.revisionsInFlight)
    }

    // MARK: - Reading change entries

    /// The entries of a `changes`/`proposeChanges` body (`BLIP`/400 unless a JSON array).
    private func changeEntries(_ request: BLIPRequest) throws -> [JSONValue] {
        guard let entries = try JSONValue.parse(request.body, request.profile ?? "changes").arrayValue else {
            throw PeerSyncError.reply(.blip(400, "changes body must be an array"))
        }
        return entries
    }

    /// Every entry's revision tree, read in one read transaction (malformed entries and
    /// invalid IDs are skipped here and answered in order by the caller).
    private func readTrees(_ entries: [JSONValue], docIDAt offset: Int) async throws -> [String: DocumentRevisions] {
        let ids = entries.compactMap { $0.arrayValue.flatMap { $0.count > offset ? $0[offset].stringValue : nil } }
        let collection = self.collection.collection
        return try await context.database.inReadBatch { txn in
            var out: [String: DocumentRevisions] = [:]
            for id in Set(ids) where (try? DocumentID.validate(id)) != nil {
                if let revs = try txn.revisions(of: id, in: collection) { out[id] = revs }
            }
            return out
        }
    }

    /// One entry: `[seq, docID, revID, …]` (`docIDAt` 1) or `[docID, revID, serverRev?]`
    /// (`docIDAt` 0). Throws `BLIP`/400 for a malformed entry (the whole batch is refused).
    private static func parse(_ entry: JSONValue, docIDAt offset: Int) throws -> ([JSONValue], String, RevisionID) {
        guard let e = entry.arrayValue, e.count > offset + 1, let docID = e[offset].stringValue,
              let revText = e[offset + 1].stringValue, let revID = try? RevisionID(revText) else {
            throw PeerSyncError.reply(.blip(400, "malformed change entry"))
        }
        return (e, docID, revID)
    }

    /// An ID no peer could store or send (NUL, other controls, too long): its entry is refused
    /// with 400 and reported; the rest of the batch goes on. Returns whether `docID` is valid.
    private func refuseInvalid(_ docID: String, _ answers: inout [JSONValue]) -> Bool {
        do { try DocumentID.validate(docID) } catch {
            answers.append(.int(400))
            reportError(docID, error)
            return false
        }
        return true
    }

    /// The answer asking for a revision: the leaves and the current revision's recent
    /// ancestors this side has (possible delta bases and history ends; empty when new).
    private static func knownRevisions(_ revs: DocumentRevisions?) -> JSONValue {
        var known: [JSONValue] = []
        if let revs {
            for leaf in revs.leaves { known.append(.string(leaf.revID.description)) }
            for a in (revs.history(of: revs.currentRevID, maxCount: 20) ?? []) { known.append(.string(a.description)) }
        }
        return .array(known)
    }

    /// The reply to a batch: its answers (trailing zeros left out, as LiteCore does), the
    /// history length wanted, `blobs: true`, and `deltas: true` when deltas are accepted.
    private func reply(_ answers: [JSONValue]) -> BLIPMessage {
        var answers = answers
        while answers.last == .int(0) { answers.removeLast() }
        var props: BLIPProperties = [("maxHistory", String(SessionContext.maxHistory)), ("blobs", "true")]
        if acceptsDeltas { props["deltas"] = "true" }
        // PeerSync's `revs` (several revisions per message), which every PeerSync session
        // handles; Couchbase Lite ignores the property and keeps sending `rev`s.
        props[RevisionBatch.capabilityProperty] = String(RevisionBatch.maxRevisions)
        return BLIPMessage(type: .response, properties: props, body: JSONValue.array(answers).json)
    }

    /// A pull event for `docID` carrying `error`.
    func reportError(_ docID: String, _ error: PeerSyncError, flags: DocumentFlags = []) {
        context.events.documents(DocumentReplication(isPush: false, documents: [
            ReplicatedDocument(id: docID, collection: collection.collection.fullName, flags: flags, error: error),
        ]))
    }
}

/// The claim on one received revision, held by its handler (``Puller/holdClaim(_:_:)``): the
/// object's identity is the claim's owner, so only ``release()`` ends it.
final class ReceivedClaim: Sendable {
    let key: String
    let inFlight: RevisionsInFlight

    init(_ key: String, in inFlight: RevisionsInFlight) {
        self.key = key
        self.inFlight = inFlight
        inFlight.take(key, owner: ObjectIdentifier(self))
    }

    /// Releases the claim, waking whoever waits for it.
    func release() {
        inFlight.release(key, owner: ObjectIdentifier(self))
    }
}
