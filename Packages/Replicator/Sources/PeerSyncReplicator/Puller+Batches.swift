import PeerSyncBLIP
import PeerSyncCore

/// Receiving a `revs` batch (``RevisionBatch``, between PeerSync peers): each of its revisions
/// is handled exactly as a `rev` carrying it would be (``receivePulled(_:)`` or
/// ``receivePushed(_:)``), all of them concurrently, so that they share the inserter's
/// transactions; their progress and document events are reported in one go, and the reply,
/// sent once every one is handled, answers each.
extension Puller {
    /// A `revs` request. `pushed`: the passive side receiving a push (else the active side's
    /// pull). A body that is not a JSON array, or one holding more revisions than
    /// ``RevisionBatch/maxRevisions`` (what this side offers), is answered `BLIP`/400 and — on
    /// the pulling side, where the revisions it asked for would never arrive — fails the
    /// session (``SessionContext/fail(_:)``) rather than leaving the pull waiting.
    /// What became of one revision of a batch: handled (with its document event, if any), or
    /// refused with the error its `rev` would have been answered with.
    private enum Outcome: Sendable {
        case handled(ReplicatedDocument?)
        case refused(BLIPError)
    }

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
        let ends = entries.map { _ in PulledRevisionEnd() }
        // Applied once the batch is reported (the checkpoint never overtakes its events).
        defer { for end in ends { finishRev(end) } }
        let outcomes = await withTaskGroup(of: (Int, Outcome).self, returning: [Outcome].self) { group in
            for (i, (properties, body)) in entries.enumerated() {
                group.addTask {
                    let revision = ReceivedRevision(properties: properties, body: body)
                    do {
                        return (i, .handled(pushed ? try await self.receivePushed(revision)
                                                   : try await self.receivePulled(revision, end: ends[i])))
                    } catch let error as PeerSyncError {
                        return (i, .refused(error.blipError ?? .blip(500, error.message)))
                    } catch {
                        return (i, .refused(.blip(500, "\(error)")))
                    }
                }
            }
            var outcomes = [Outcome](repeating: .handled(nil), count: entries.count)
            for await (i, outcome) in group { outcomes[i] = outcome }
            return outcomes
        }
        // Reported together, as each `rev` would have been (progress only when pulled).
        var documents: [ReplicatedDocument] = []
        var handled = 0
        for case .handled(let document) in outcomes {
            handled += 1
            if let document { documents.append(document) }
        }
        if !pushed, handled > 0 { context.events.progress(handled, 0) }
        if !documents.isEmpty { context.events.documents(DocumentReplication(isPush: false, documents: documents)) }
        return RevisionBatch.reply(outcomes.map { outcome in
            if case .refused(let error) = outcome { return error }
            return nil
        })
    }
}
