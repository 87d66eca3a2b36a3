import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// Sending the revisions of a batch of changes: many to a `revs` message when the peer offers
/// it (``RevisionBatch``, a PeerSync peer), each in a `rev` of its own otherwise.
extension Pusher {
    /// One revision to send, with what ``sendRev(docID:revID:sequence:known:offer:noConflicts:prefetched:)``
    /// takes.
    struct OutgoingRevision: Sendable {
        let docID: String
        let revID: RevisionID
        let sequence: String
        /// Revisions the peer has of the document.
        let known: [RevisionID]
        let noConflicts: Bool
        let prefetched: Prefetched?
    }

    /// Sends `revisions` and returns each one's error (nil: the peer took it), in the order
    /// given. With `offer.revisionsPerMessage` > 1 those that may travel in a `revs` message
    /// (prefetched full bodies without blobs, not sent as deltas; see ``RevisionBatch``) go
    /// up to that many per message; every other one goes in its own `rev`. At most
    /// ``revisionsInFlightPerBatch`` messages await their reply at once. Throws what
    /// ``sendRev(docID:revID:sequence:known:offer:noConflicts:prefetched:)`` throws (transport
    /// failures, the peer's disk-full refusal) and a protocol error for a `revs` reply that
    /// does not answer each revision.
    func sendRevisions(_ revisions: [OutgoingRevision], offer: RevisionOffer) async throws -> [PeerSyncError?] {
        var messages: [OutgoingMessage] = []
        if offer.revisionsPerMessage > 1 {
            var indices: [Int] = [], entries: [[UInt8]] = [], bytes = 0, bodyBytes = 0
            func closeMessage() {
                if indices.count == 1 { messages.append(.rev(indices[0])) }
                if indices.count > 1 {
                    // LiteCore's rule for a `rev`, on the bodies' average size.
                    let compressed = bodyBytes >= Self.minBodySizeToCompress * indices.count
                    messages.append(.revs(indices, RevisionBatch.body(entries), compressed: compressed))
                }
                indices = []
                entries = []
                bytes = 0
                bodyBytes = 0
            }
            for (i, revision) in revisions.enumerated() {
                guard let (entry, bodySize) = batchEntry(revision, offer: offer) else {
                    messages.append(.rev(i))
                    continue
                }
                if indices.count >= offer.revisionsPerMessage || bytes + entry.count > RevisionBatch.maxBytes { closeMessage() }
                indices.append(i)
                entries.append(entry)
                bytes += entry.count
                bodyBytes += bodySize
            }
            closeMessage()
        } else {
            messages = revisions.indices.map { .rev($0) }
        }
        let outcomes = try await mapConcurrently(messages, width: Self.revisionsInFlightPerBatch) { message in
            switch message {
            case .rev(let i):
                let r = revisions[i]
                return [(i, try await self.sendRev(docID: r.docID, revID: r.revID, sequence: r.sequence, known: r.known,
                                                   offer: offer, noConflicts: r.noConflicts, prefetched: r.prefetched))]
            case .revs(let indices, let body, let compressed):
                let errors = try await self.sendRevs(body, compressed: compressed, docIDs: indices.map { revisions[$0].docID })
                return Array(zip(indices, errors))
            }
        }
        var errors = [PeerSyncError?](repeating: nil, count: revisions.count)
        for (i, error) in outcomes.joined() { errors[i] = error }
        return errors
    }

    /// One message of ``sendRevisions(_:offer:)``: a revision's `rev`, or a `revs` body holding
    /// the revisions at `indices`, compressed when their bodies average at least
    /// ``minBodySizeToCompress`` bytes (LiteCore's rule for a `rev`, so that a revision is
    /// compressed in a `revs` when it would be in a `rev`, and not otherwise).
    private enum OutgoingMessage: Sendable {
        case rev(Int)
        case revs([Int], [UInt8], compressed: Bool)
    }

    /// The revision's entry in a `revs` message, or nil when it goes in a `rev` of its own: not
    /// prefetched as the current revision with its body, possibly referencing blobs, larger
    /// than ``RevisionBatch/maxEntryBytes``, or to be sent as a delta
    /// (``mayGoAsDelta(isDeleted:bodySize:known:in:offer:)``). Its properties are the ones its
    /// `rev` would carry. Also returns the body's size.
    private func batchEntry(_ r: OutgoingRevision, offer: RevisionOffer) -> ([UInt8], Int)? {
        guard (try? DocumentID.validate(r.docID)) != nil, let prefetched = r.prefetched,
              prefetched.revisions.currentRevID == r.revID, let current = prefetched.currentBody, current.revID == r.revID,
              !current.mayReferenceBlobs, current.data.count <= RevisionBatch.maxEntryBytes,
              let info = prefetched.revisions.revision(r.revID) else { return nil }
        let revs = prefetched.revisions
        if mayGoAsDelta(isDeleted: info.isDeleted, bodySize: current.data.count, known: r.known, in: revs, offer: offer) {
            return nil
        }
        var props: BLIPProperties = [("id", r.docID), ("rev", r.revID.description), ("sequence", r.sequence)]
        Self.addHistory(of: r.revID, in: revs, known: r.known, maxHistory: offer.maxHistory, to: &props)
        if info.isDeleted { props["deleted"] = "1" }
        if r.noConflicts { props["noconflicts"] = "1" }
        return (RevisionBatch.entry(props, body: current.data), current.data.count)
    }

    /// Sends one `revs` message with `body` (the entries of `docIDs`' revisions, in order) and
    /// returns each revision's error, as a `rev`'s reply would give it.
    private func sendRevs(_ body: [UInt8], compressed: Bool, docIDs: [String]) async throws -> [PeerSyncError?] {
        ReplicationCounters.add(ReplicationCounters.revsSent, docIDs.count)
        ReplicationCounters.add(ReplicationCounters.revBytesSent, body.count)
        ReplicationCounters.add(ReplicationCounters.revsMessagesSent)
        let flags: BLIPFlags = compressed ? [.compressed] : []
        let reply = try await context.send(.request(RevisionBatch.profile, properties: context.collectionProperty(index),
                                                    body: body, flags: flags), RevisionBatch.profile)
        let results = try RevisionBatch.results(of: reply, count: docIDs.count)
        return try zip(docIDs, results).map { docID, refusal in
            try refusal.map { try Self.refusalError($0, docID: docID) }
        }
    }
}
