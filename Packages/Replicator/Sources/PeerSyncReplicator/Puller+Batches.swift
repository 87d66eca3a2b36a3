import PeerSyncBLIP
import PeerSyncCore

/// Receiving a `revs` batch (``RevisionBatch``, between PeerSync peers): each of its revisions
/// is handled as a `rev` carrying it would be — the same reading, checks, insertion, conflict
/// handling, answers and errors — and the reply, sent once every one is handled, answers each.
/// The common revision (a full body without blobs, of a document nobody else is resolving) is
/// read here and handed to the inserter with the others like it, in one call from this
/// handler's task; once their transaction committed they are finished one after another and
/// reported together (progress, one document event listing them). The rest take the way of a
/// `rev` (``receivePulled(_:)``, ``receivePushed(_:)``), each in a task of its own,
/// concurrently, and are reported each on its own. Every report is made before the handler
/// returns, so before the replicator can report `.stopped`. Why: a task per revision, each
/// waiting for the inserter and reporting on its own, cost about four more jobs on the
/// cooperative pool and one and a half more context switches per stored revision in a mesh (`Packages/Mesh/BENCHMARKS.md`, 5 December
/// 2026).
extension Puller {
    /// A `revs` request. `pushed`: the passive side receiving a push (else the active side's
    /// pull). A body that is not a JSON array, or one holding more revisions than
    /// ``RevisionBatch/maxRevisions`` (what this side offers), is answered `BLIP`/400 and — on
    /// the pulling side, where the revisions it asked for would never arrive — fails the
    /// session (``SessionContext/fail(_:)``) rather than leaving the pull waiting.
    func handleRevs(_ request: BLIPRequest, pushed: Bool) async throws -> BLIPMessage? {
        let entries: [(BLIPProperties, JSONValue)]
        do {
            entries = try RevisionBatch.entries(request.body)
            guard entries.count <= RevisionBatch.maxRevisions else {
                throw PeerSyncError.reply(.blip(400, "a revs message holds at most \(RevisionBatch.maxRevisions) revisions, "
                                                    + "this one \(entries.count)"))
            }
        } catch let error as PeerSyncError {
            if !pushed, context.failure == nil {
                context.fail(PeerSyncError(.protocolError, "the peer sent a malformed revs message: \(error.message)"))
            }
            throw error
        }
        // The revisions that can be inserted at once go to the inserter together, from this
        // task: one suspension for the batch. The others (a delta, blobs, a revocation, a
        // filter, an error to answer, a document whose conflict handling is busy) each take
        // the way of a `rev`, in a child task, concurrently.
        var ready: [(index: Int, revision: ReadyRevision)] = []
        var others: [Int] = []
        for (i, (properties, body)) in entries.enumerated() {
            if let revision = readyToInsert(ReceivedRevision(properties: properties, body: body), pushed: pushed) {
                ready.append((i, revision))
            } else {
                others.append(i)
            }
        }
        var results = [BLIPError?](repeating: nil, count: entries.count)
        await withTaskGroup(of: (Int, BLIPError?).self) { group in
            for i in others {
                let revision = ReceivedRevision(properties: entries[i].0, body: entries[i].1)
                group.addTask {
                    do {
                        if pushed { _ = try await self.receivePushed(revision) } else { _ = try await self.receivePulled(revision) }
                        return (i, nil)
                    } catch {
                        return (i, Self.entryError(error))
                    }
                }
            }
            // Finished (and their documents' conflict handling ended) before waiting for the
            // child tasks, which may wait for one of those documents.
            let outcomes = await inserter.insert(ready.map(\.revision.insert))
            // Their document events go together, in one event, as soon as they are handled.
            var handled: [ReplicatedDocument] = []
            for (k, (i, revision)) in ready.enumerated() {
                results[i] = pushed ? finishPushed(revision, outcomes[k], handled: &handled)
                                    : await finishPulled(revision, outcomes[k], handled: &handled)
            }
            if !handled.isEmpty {
                if !pushed { context.events.progress(handled.count, 0) }
                context.events.documents(DocumentReplication(isPush: false, documents: handled))
            }
            for await (i, error) in group { results[i] = error }
        }
        return RevisionBatch.reply(results)
    }

    /// An entry of a `revs` message read and checked, ready for the inserter, with what its
    /// handling holds until it is finished: the claim on the revision and, pulled, its
    /// document's conflict handling.
    struct ReadyRevision: Sendable {
        let incoming: IncomingRevision
        let insert: RevisionInsert
        /// The `sequence` property of a pulled revision (nil pushed).
        let sequence: String?
        let claim: ReceivedClaim
        let conflictHandling: ConflictHandlingHold?
    }

    /// The entry as a revision the inserter can take at once, read as a `rev` would be —
    /// or nil, having changed nothing, when it needs anything more: a delta to apply, blobs
    /// to look up, a revocation, a pull filter to ask, a refusal or error to answer, or a
    /// document whose conflict handling another handler holds. That entry then takes the
    /// way of a `rev` (``receivePulled(_:)``, ``receivePushed(_:)``), which repeats the reading
    /// and answers any error as a `rev`'s.
    private func readyToInsert(_ received: ReceivedRevision, pushed: Bool) -> ReadyRevision? {
        let c = collection.collection
        guard received.properties["deltaSrc"] == nil, collection.config.pullFilter == nil, !(pushed && readOnly),
              let (docID, revID) = try? Self.ids(of: received), (try? DocumentID.validate(docID)) != nil,
              let history = try? Self.history(of: received), let parsed = try? received.parsedBody(),
              var incoming = try? Self.incomingRevision(received, docID: docID, revID: revID, history: history, body: parsed),
              pushed || !Self.isRemovedBody(incoming.body),
              let body = try? Self.decodeAttachments(incoming.body) else { return nil }
        incoming.body = body
        guard blobReferences(in: .object(body)).isEmpty, LegacyAttachments.attachmentReferences(in: body).isEmpty else {
            return nil
        }
        var conflictHandling: ConflictHandlingHold?
        if !pushed {
            // Stored and resolved as the document's only conflict handling (see `receivePulledRev`).
            guard let hold = context.tryBeginConflictHandling(of: docID) else { return nil }
            conflictHandling = hold
        }
        ReplicationCounters.add(ReplicationCounters.revsReceived)
        return ReadyRevision(incoming: incoming, insert: incoming.insert(into: c, allowConflict: !pushed),
                             sequence: pushed ? nil : received.properties["sequence"], claim: holdClaim(docID, revID),
                             conflictHandling: conflictHandling)
    }

    /// A ready pulled revision after its insertion, as ``receivePulled(_:)`` finishes one:
    /// nil when handled (its document event appended to `handled`, for the caller to
    /// report), else the error its entry is answered with.
    private func finishPulled(_ revision: ReadyRevision, _ outcome: Result<RevisionInsertOutcome, any Error>,
                              handled: inout [ReplicatedDocument]) async -> BLIPError? {
        let docError: PeerSyncError?
        do {
            docError = try await storePulled(revision.incoming, sequence: revision.sequence, outcome)
        } catch {
            if let hold = revision.conflictHandling { context.endConflictHandling(hold) }
            revision.claim.release()
            finishRev(revision.sequence, failed: true)
            if let error = error as? PeerSyncError { notePulledFailure(error, docID: revision.incoming.docID) }
            return Self.entryError(error)
        }
        if let hold = revision.conflictHandling { context.endConflictHandling(hold) }
        handled.append(replicatedDocument(revision.incoming, docError))
        revision.claim.release()
        finishRev(revision.sequence, failed: false)
        return nil
    }

    /// A ready pushed revision after its insertion, as ``receivePushed(_:)`` finishes one
    /// (its document event appended to `handled`).
    private func finishPushed(_ revision: ReadyRevision, _ outcome: Result<RevisionInsertOutcome, any Error>,
                              handled: inout [ReplicatedDocument]) -> BLIPError? {
        defer { revision.claim.release() }
        do {
            try storePushed(revision.incoming, outcome)
            handled.append(replicatedDocument(revision.incoming, nil))
            return nil
        } catch {
            return Self.entryError(error)
        }
    }

    /// The answer to one entry that was not handled: the error a `rev` would have been
    /// answered with.
    private static func entryError(_ error: any Error) -> BLIPError {
        guard let error = error as? PeerSyncError else { return .blip(500, "\(error)") }
        return error.blipError ?? .blip(500, error.message)
    }
}
