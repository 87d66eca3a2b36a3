import PeerSyncBLIP
import PeerSyncCore

/// Receiving a `revs` batch (``RevisionBatch``, between PeerSync peers): each of its revisions
/// is handled exactly as a `rev` carrying it would be (``receivePulled(_:)`` or
/// ``receivePushed(_:)``), all of them concurrently, so that they share the inserter's
/// transactions; each is reported (progress, document event) as soon as it is handled, as
/// its `rev` would be, and the reply, sent once every one is handled, answers each.
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
        let results = await withTaskGroup(of: (Int, BLIPError?).self, returning: [BLIPError?].self) { group in
            for (i, (properties, body)) in entries.enumerated() {
                group.addTask {
                    let revision = ReceivedRevision(properties: properties, body: body)
                    do {
                        if pushed { _ = try await self.receivePushed(revision) } else { _ = try await self.receivePulled(revision) }
                        return (i, nil)
                    } catch let error as PeerSyncError {
                        return (i, error.blipError ?? .blip(500, error.message))
                    } catch {
                        return (i, .blip(500, "\(error)"))
                    }
                }
            }
            var results = [BLIPError?](repeating: nil, count: entries.count)
            for await (i, error) in group { results[i] = error }
            return results
        }
        return RevisionBatch.reply(results)
    }
}
