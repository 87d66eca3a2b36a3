import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// Pushes one collection's changes to the peer (LiteCore's `Pusher`): reads the changes feed
/// in batches, offers each batch, sends the revisions the peer asks for (``Pusher+Revisions``)
/// and serves the blobs those revisions reference (``Pusher+Blobs``). Two ways to offer:
///
/// - ``push(since:continuous:docIDs:progress:)`` — the active side pushing to a passive peer:
///   `proposeChanges`; the peer answers each entry 0 (send it), 304 (has it) or 409 with its
///   current revision (a conflict: settled here, see ``settleRefusal(_:serverRev:)``, and
///   proposed again when it became a fast-forward);
/// - ``serveSubscription(_:)`` — the passive side answering the peer's `subChanges`: `changes`;
///   the peer answers with the revisions it knows of each document.
///
/// Only a document's current revision is ever offered (the feed's entry), never another leaf.
/// Batches are pipelined (up to ``pipelineDepth`` in flight); progress and the checkpoint
/// advance in batch order only and never pass a revision that failed.
///
/// Thread-safety: an actor; its loop runs in the caller's task (active) or in one task per
/// subscription (passive), concurrently with the ``Puller`` of the same session. State shared
/// with the Puller (revisions known to be on the peer, busy state) lives in the
/// ``SessionContext``.
actor Pusher {
    enum Mode: Sendable { case propose, changes }

    let context: SessionContext
    let index: Int
    let collection: SessionCollection
    /// Send a revision as a delta when the peer's reply offers `deltas: true` (the active side
    /// always does; a passive side only with `enableDeltaSync`).
    let sendsDeltas: Bool
    /// This session also pulls the collection (active push-and-pull): a proposal refused in
    /// favour of a revision that is new here is brought by the pull and resolved, so it is
    /// not a document error (see ``pushConflictError(_:serverRev:known:)``).
    let collectionIsPulled: Bool
    /// Batches of a push in flight at once (their `rev`s overlap on the connection).
    static let pipelineDepth = 4
    /// `rev`s of one batch sent and awaiting their reply at once, so a pusher has at most
    /// ``pipelineDepth`` × this in flight. Each holds a task until its reply, and on a busy
    /// connection the replies come late: without a window a mesh peer's pushers held
    /// hundreds of thousands of them (LiteCore similarly keeps 10 `rev`s transmitting and at
    /// most 2 MB awaiting replies).
    static let revisionsInFlightPerBatch = 50

    /// Passive: the tasks serving the peer's subscriptions (cancelled by ``stop()``).
    private var subscriptions: [Task<Void, Never>] = []
    /// Digests referenced by revisions sent by this pusher: the only blobs it serves.
    var sentBlobDigests: Set<String> = []
    /// When this pusher last served blob content (a `rev` reply waits while the peer fetches).
    let blobActivity = BlobActivity()

    init(context: SessionContext, index: Int, collection: SessionCollection, sendsDeltas: Bool, collectionIsPulled: Bool) {
        self.context = context
        self.index = index
        self.collection = collection
        self.sendsDeltas = sendsDeltas
        self.collectionIsPulled = collectionIsPulled
    }

    /// Cancels the subscriptions being served.
    func stop() {
        for task in subscriptions { task.cancel() }
        subscriptions = []
    }

    // MARK: - Entry points

    /// Active: pushes the changes after `since` with `proposeChanges`. Returns when caught up
    /// (one-shot) or throws when cancelled / the connection closes (continuous). `progress`
    /// gets the sequence up to which everything was handled (never past a failed revision).
    /// `docIDs`: only these documents. Throws transport errors and a peer's disk-full refusal.
    func push(since start: UInt64, continuous: Bool, docIDs: Set<String>?,
              progress: @escaping @Sendable (UInt64) async -> Void) async throws {
        try await run(since: start, continuous: continuous, mode: .propose, docIDs: docIDs, activeOnly: false, progress: progress)
    }

    /// Passive: answers the peer's `subChanges` (properties `since`, `continuous`,
    /// `activeOnly`; body `docIDs`) by pushing with `changes` in a task of its own; returns the
    /// (empty) reply at once. If this side cannot read its changes, the peer gets a `norev`
    /// with the error (no `sequence`: not about one revision) and the connection closes.
    func serveSubscription(_ request: BLIPRequest) throws -> BLIPMessage? {
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
                try await self.run(since: since, continuous: continuous, mode: .changes, docIDs: docIDs,
                                   activeOnly: activeOnly, progress: { _ in })
            } catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled
                && error.code != .connectionClosed {
                Logger(.replicator).error("serving the changes of \(self.collection.collection.fullName) failed: \(error.description)")
                var props = self.context.collectionProperty(self.index)
                props["error"] = "500"
                props["errorCode"] = error.code.rawValue
                props["reason"] = error.message
                try? await self.context.blip.sendNoReply(.request("norev", properties: props))
                // A PeerSync peer fails its run on that `norev` and closes; closing here at once
                // could overtake it (the peer would see a dropped connection and retry). A peer
                // that ignores it is closed after a grace period.
                try? await Task.sleep(for: .seconds(3))
                await self.context.blip.close(code: 1011, reason: "the changes feed failed")
            } catch {
                // The connection ended or the peer failed; the session ends with it.
            }
        }
        subscriptions.append(task)
        return nil
    }

    // MARK: - The push loop

    /// Pushes the changes after `start`. `activeOnly`: deleted documents are left out.
    private func run(since start: UInt64, continuous: Bool, mode: Mode, docIDs: Set<String>?, activeOnly: Bool,
                     progress: @escaping @Sendable (UInt64) async -> Void) async throws {
        let sc = collection, index = self.index
        let stream = continuous ? sc.collection.changeSignals() : nil
        var since = start
        var sentCaughtUp = false
        var pipeline = Pipeline()
        context.setBusy(.push(index), true)
        defer { context.setBusy(.push(index), false) }
        try await withThrowingTaskGroup(of: (Int, [UInt64]).self) { group in
            var iterator = stream?.makeAsyncIterator()
            while !context.isClosed, !Task.isCancelled {
                let changes = try await sc.collection.changes(since: since, limit: SessionContext.batchSize)
                if changes.isEmpty {
                    // Caught up: every batch in flight is answered before saying so.
                    while !pipeline.inFlight.isEmpty { try await collectBatch(&group, &pipeline, progress) }
                    if !sentCaughtUp {
                        sentCaughtUp = true
                        var props = context.collectionProperty(index)
                        props["Profile"] = nil
                        try await context.blip.sendNoReply(.request(mode == .propose ? "proposeChanges" : "changes",
                                                                    properties: props, body: Array("[]".utf8)))
                    }
                    guard continuous, iterator != nil else { return }
                    context.setBusy(.push(index), false)
                    guard await iterator?.next() != nil else { return }
                    continue
                }
                context.setBusy(.push(index), true)
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
                    if context.peerHas(index, change.docID, change.revID) { continue }
                    candidates.append(change)
                }
                since = changes.last?.sequence ?? since
                // Only the candidates are read: in a mesh most entries of the feed are
                // revisions the peer has (it sent them, or offered them), and a full batch read
                // of those was most of the push's read time.
                let prefetched: [String: Prefetched]
                do { prefetched = candidates.isEmpty ? [:] : try await prefetch(candidates.map(\.docID)) }
                catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled {
                    // A damaged record: each document is read on its own, so that only the
                    // damaged ones fail, each reported to the peer (see `sendRev`).
                    prefetched = [:]
                }
                context.events.progress(0, candidates.count)
                let ids = Set(candidates.map(\.docID))
                // A document already in flight (changed again meanwhile) waits until the
                // earlier batches are answered, so its proposal names the right server revision.
                if pipeline.inFlight.contains(where: { !$0.docIDs.isDisjoint(with: ids) }) {
                    while !pipeline.inFlight.isEmpty { try await collectBatch(&group, &pipeline, progress) }
                }
                while pipeline.inFlight.count >= Self.pipelineDepth { try await collectBatch(&group, &pipeline, progress) }
                let number = pipeline.next
                pipeline.next += 1
                pipeline.inFlight.append(Pipeline.Batch(number: number, lastSequence: since, count: candidates.count, docIDs: ids))
                if candidates.isEmpty {
                    pipeline.done[number] = []
                    await reportBatches(&pipeline, progress)
                } else {
                    group.addTask {
                        switch mode {
                        case .propose: (number, try await self.proposeBatch(candidates, prefetched: prefetched))
                        case .changes: (number, try await self.changesBatch(candidates, prefetched: prefetched))
                        }
                    }
                }
            }
        }
    }

    /// Batches of a push sent but not all answered yet. Up to ``pipelineDepth`` batches are in
    /// flight at once; progress and the checkpoint advance in batch order only.
    struct Pipeline {
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

    private func collectBatch(_ group: inout ThrowingTaskGroup<(Int, [UInt64]), any Error>, _ pipeline: inout Pipeline,
                              _ progress: @Sendable (UInt64) async -> Void) async throws {
        guard let (number, failed) = try await group.next() else { return }
        pipeline.done[number] = failed
        await reportBatches(&pipeline, progress)
    }

    /// Reports the answered batches at the head of the pipeline, in order.
    private func reportBatches(_ pipeline: inout Pipeline, _ progress: @Sendable (UInt64) async -> Void) async {
        while let first = pipeline.inFlight.first, let failed = pipeline.done.removeValue(forKey: first.number) {
            pipeline.inFlight.removeFirst()
            if let low = failed.min() { pipeline.firstFailure = min(pipeline.firstFailure ?? low, low) }
            context.events.progress(first.count, 0)
            // The checkpoint never passes a revision that failed (e.g. refused as a conflict):
            // the next run proposes it again.
            await progress(pipeline.firstFailure.map { min(first.lastSequence, $0 - 1) } ?? first.lastSequence)
        }
    }

    // MARK: - proposeChanges (active)

    struct Proposal: Sendable {
        var docID: String
        var revID: RevisionID
        var deleted: Bool
        var serverRev: RevisionID?
        var sequence: UInt64
    }

    /// Proposes one batch, sends the revisions the peer wants, settles refusals and proposes
    /// again what became a fast-forward (at most 4 rounds). Returns the sequences of the
    /// changes that failed.
    private func proposeBatch(_ changes: [ChangeEntry], prefetched: [String: Prefetched] = [:]) async throws -> [UInt64] {
        let sc = collection, index = self.index
        var failed: [UInt64] = []
        var round: [Proposal] = []
        for c in changes {
            var p = Proposal(docID: c.docID, revID: c.revID, deleted: c.deleted,
                             serverRev: context.peerRevision(index, c.docID), sequence: c.sequence)
            // The serverRevID must be an ancestor of what is proposed; a stale one is left
            // out (the peer then answers 409 with its current revision).
            if let known = p.serverRev, let revs = try await prefetchedOrRead(prefetched[c.docID], c.docID),
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
            var props = context.collectionProperty(index)
            props["conflictIncludesRev"] = "true"
            ReplicationCounters.add(ReplicationCounters.proposeMessages)
            ReplicationCounters.add(ReplicationCounters.proposeEntries, round.count)
            let reply = try await context.send(.request("proposeChanges", properties: props, body: body.json,
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
                    context.setPeerRevision(index, p.docID, p.revID)
                case 409:
                    let serverRev = (answer["rev"]?.stringValue).flatMap { try? RevisionID($0) }
                    if let serverRev { context.setPeerRevision(index, p.docID, serverRev) }
                    var known = false
                    if attempts < 4, let serverRev {
                        switch try await settleRefusal(p, serverRev: serverRev) {
                        case .peerHasCurrent: continue
                        case .propose(let fix): next.append(fix); continue
                        case .unresolved(let k): known = k
                        }
                    }
                    // The sequence is not checkpointed: the next run proposes it again.
                    failed.append(p.sequence)
                    if let error = pushConflictError(p, serverRev: serverRev, known: known) {
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
            let offer = RevisionOffer(reply: reply)
            let errors = try await sendRevisions(toSend.map { p in
                OutgoingRevision(docID: p.docID, revID: p.revID, sequence: String(p.sequence),
                                 known: p.serverRev.map { [$0] } ?? [], noConflicts: true, prefetched: prefetched[p.docID])
            }, offer: offer)
            for (p, error) in zip(toSend, errors) {
                if let error, error.code == .conflict, attempts < 4, let outcome = try await settleSupersedingRefusal(p) {
                    // Anything else than these two is reported below like any refusal.
                    if case .propose(let fix) = outcome { next.append(fix); continue }
                    if case .peerHasCurrent = outcome, let serverRev = p.serverRev {
                        context.setPeerRevision(index, p.docID, serverRev)
                        continue
                    }
                }
                if error == nil {
                    context.setPeerRevision(index, p.docID, p.revID)
                } else {
                    failed.append(p.sequence)
                }
                results.append(ReplicatedDocument(id: p.docID, collection: sc.collection.fullName,
                                                  flags: p.deleted ? .deleted : [], error: error))
            }
            round = next
        }
        if !results.isEmpty { context.events.documents(DocumentReplication(isPush: true, documents: results)) }
        return failed
    }

    /// What a proposal refused with 409 (naming the peer's current revision) comes to.
    private enum RefusalOutcome: Sendable {
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
    ///   resolved yet): resolve against it as if just pulled (``ConflictResolution``), then look again;
    /// - it is unknown here: only a pull (here or by the peer) can settle it.
    /// Only the current revision is ever proposed.
    private func settleRefusal(_ p: Proposal, serverRev: RevisionID) async throws -> RefusalOutcome {
        try await context.handlingConflicts(of: p.docID) { try await lookAgain(p, serverRev: serverRev) }
    }

    /// ``settleRefusal(_:serverRev:)`` as the document's only conflict handling meanwhile.
    private func lookAgain(_ p: Proposal, serverRev: RevisionID) async throws -> RefusalOutcome {
        let resolution = ConflictResolution(collection: collection)
        for _ in 0..<3 {
            guard let revs = try await collection.collection.revisions(of: p.docID), let remote = revs.revision(serverRev),
                  let local = revs.revision(revs.currentRevID) else { return .unresolved(known: false) }
            if serverRev == revs.currentRevID { return .peerHasCurrent }
            if (revs.history(of: revs.currentRevID) ?? []).contains(serverRev) {
                return .propose(Proposal(docID: p.docID, revID: revs.currentRevID, deleted: revs.isDeleted,
                                         serverRev: serverRev, sequence: p.sequence))
            }
            do {
                try await resolution.resolve(docID: p.docID, local: local, remote: remote, in: revs)
                if let superseding = try await proposalSupersedingPeer(p, serverRev: serverRev) { return .propose(superseding) }
            } catch let error as PeerSyncError where error.code == .invalidArgument {
                // Resolved meanwhile by the pull (or changed): look again.
            }
        }
        return .unresolved(known: true)
    }

    /// When the current revision has the same content as the peer's `serverRev` under a higher
    /// ID (how ``ConflictResolution`` settles equal-bodied branches), the proposal that replaces
    /// the peer's revision: the current one, naming `serverRev` as the revision it supersedes.
    /// A PeerSync passive peer takes it (same content, higher ID: no conflict is created); a
    /// peer that refuses it (Couchbase Lite) gets the remote branch continued instead
    /// (``settleSupersedingRefusal(_:)``).
    private func proposalSupersedingPeer(_ p: Proposal, serverRev: RevisionID) async throws -> Proposal? {
        guard let revs = try await collection.collection.revisions(of: p.docID), revs.currentRevID > serverRev,
              let current = revs.revision(revs.currentRevID), let remote = revs.revision(serverRev),
              try await ConflictResolution.sameContent(current, remote, docID: p.docID, in: collection.collection) else { return nil }
        return Proposal(docID: p.docID, revID: revs.currentRevID, deleted: revs.isDeleted, serverRev: serverRev, sequence: p.sequence)
    }

    /// After the peer refused (409 on the `rev`) a proposal that supersedes its revision
    /// without descending from it (``proposalSupersedingPeer(_:serverRev:)``): the conflict is
    /// resolved on the peer's branch instead, the Couchbase Lite way, and the outcome proposed
    /// again (or nothing is left to send). Nil when the proposal was not such a one.
    private func settleSupersedingRefusal(_ p: Proposal) async throws -> RefusalOutcome? {
        guard let serverRev = p.serverRev else { return nil }
        return try await context.handlingConflicts(of: p.docID) { () async throws -> RefusalOutcome? in
            guard let revs = try await collection.collection.revisions(of: p.docID), revs.currentRevID == p.revID,
                  !(revs.history(of: p.revID) ?? []).contains(serverRev),
                  let local = revs.revision(p.revID), let remote = revs.revision(serverRev) else { return nil }
            do {
                try await ConflictResolution(collection: collection).resolve(docID: p.docID, local: local, remote: remote,
                                                                           in: revs, continueRemoteBranch: true)
            } catch let error as PeerSyncError where error.code == .invalidArgument {
                return nil
            }
            guard let after = try await collection.collection.revisions(of: p.docID) else { return nil }
            if after.currentRevID == serverRev { return .peerHasCurrent }
            guard (after.history(of: after.currentRevID) ?? []).contains(serverRev) else { return nil }
            return .propose(Proposal(docID: p.docID, revID: after.currentRevID, deleted: after.isDeleted,
                                     serverRev: serverRev, sequence: p.sequence))
        }
    }

    /// The document error for a proposal the peer refused with 409, or nil when this session
    /// also pulls the collection (without a pull filter, which might drop the peer's revision)
    /// and the peer's revision is new here: the pull brings it, the resolver settles the
    /// conflict, and the resolution is pushed (in a one-shot run, by the push that follows the
    /// pull) — a transient refusal, not an error. A peer revision that is already known here
    /// lies on a branch this database resolved away: only a sync in which the peer pulls from
    /// here (or the peer's own resolution) can settle it, so that is reported.
    /// `known`: whether the peer's revision was in this database when the refusal was looked at.
    private func pushConflictError(_ p: Proposal, serverRev: RevisionID?, known: Bool) -> PeerSyncError? {
        if collectionIsPulled, !known, collection.config.pullFilter == nil { return nil }
        let reason = known
            ? "the peer's current revision \(serverRev?.description ?? "-") is on a branch this database resolved away; it converges when the peer pulls from this database"
            : "the peer has a conflicting revision \(serverRev?.description ?? "-"); pull to resolve it"
        return PeerSyncError(.conflict, reason, context: ["docID": p.docID, "status": "409"])
    }

    // MARK: - changes (passive, to a subscriber)

    /// Offers one batch with `changes` and sends every revision the peer asks for (the reply
    /// lists, per entry, the revisions it knows of the document). Returns the failed sequences.
    private func changesBatch(_ changes: [ChangeEntry], prefetched: [String: Prefetched] = [:]) async throws -> [UInt64] {
        let index = self.index
        let body: JSONValue = .array(changes.map { c in
            var entry: [JSONValue] = [.int(Int64(c.sequence)), .string(c.docID), .string(c.revID.description)]
            if c.deleted { entry.append(.int(1)) }
            return .array(entry)
        })
        ReplicationCounters.add(ReplicationCounters.changesMessages)
        ReplicationCounters.add(ReplicationCounters.changesEntries, changes.count)
        let reply = try await context.send(.request("changes", properties: context.collectionProperty(index), body: body.json,
                                                    flags: [.compressed]), "changes").checked("changes")
        let answers = try JSONValue.parse(reply.body, "changes reply").arrayValue ?? []
        let offer = RevisionOffer(reply: reply)
        // The entries the peer wants, with the revisions it knows of each.
        let wanted = changes.enumerated().compactMap { i, c -> (ChangeEntry, [RevisionID])? in
            guard i < answers.count, let known = answers[i].arrayValue else { return nil }
            return (c, known.compactMap { $0.stringValue.flatMap { try? RevisionID($0) } })
        }
        let errors = try await sendRevisions(wanted.map { c, knownRevs in
            OutgoingRevision(docID: c.docID, revID: c.revID, sequence: String(c.sequence), known: knownRevs,
                             noConflicts: false, prefetched: prefetched[c.docID])
        }, offer: offer)
        let outcomes = zip(wanted.map(\.0), errors)
        var docs: [ReplicatedDocument] = []
        for (c, error) in outcomes {
            if let error {
                // No local replicator reports what a subscriber refused (but a conflict): it is logged.
                if error.code == .replicationFailed {
                    Logger(.replicator).error("\(c.docID) \(c.revID) of \(collection.collection.fullName): \(error.message)")
                }
            } else {
                context.setPeerRevision(index, c.docID, c.revID)
            }
            docs.append(ReplicatedDocument(id: c.docID, collection: collection.collection.fullName,
                                           flags: c.deleted ? .deleted : [], error: error))
        }
        if !docs.isEmpty { context.events.documents(DocumentReplication(isPush: true, documents: docs)) }
        return outcomes.filter { $0.1 != nil }.map(\.0.sequence)
    }
}
