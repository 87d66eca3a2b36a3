import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// What the peer's reply to `proposeChanges`/`changes` says about the revisions to send.
struct RevisionOffer: Sendable {
    /// The longest history the peer wants with a revision (``SessionContext/maxHistory`` when
    /// the reply does not say).
    var maxHistory: Int
    /// The peer accepts deltas (`deltas: true`).
    var deltas: Bool
    /// The peer lacks `blobs: true`: bodies with blobs go in legacy `_attachments` form.
    var legacyAttachments: Bool
    /// The most revisions to send in one `revs` message (``RevisionBatch``); 1 — one `rev`
    /// each — unless the peer offers `revs` (a PeerSync peer; Couchbase Lite never does).
    var revisionsPerMessage: Int

    init(reply: BLIPMessage) {
        maxHistory = reply.properties.int("maxHistory") ?? SessionContext.maxHistory
        deltas = reply.properties.bool("deltas")
        legacyAttachments = !reply.properties.bool("blobs")
        revisionsPerMessage = min(max(reply.properties.int(RevisionBatch.capabilityProperty) ?? 1, 1), RevisionBatch.maxRevisions)
    }
}

/// Sending one revision (`rev`), with its history, as a delta when that pays, and the reads
/// it needs, batched.
extension Pusher {
    /// Delta sync tuning (LiteCore's): only bodies of at least this many bytes are sent as
    /// deltas, and only when the delta is at most `maxDeltaRatio` × the body.
    static let minDeltaBodySize = 200
    static let maxDeltaRatio = 1.2
    /// LiteCore's threshold for compressing a `rev`: a body (full or delta) of fewer bytes goes
    /// uncompressed. Deflating a small body saves few bytes and costs a pass of the
    /// connection's deflate stream on both ends: with documents of ~130 bytes, a 64-peer
    /// in-process mesh used ~1.3× the CPU per stored revision (`Packages/Mesh/BENCHMARKS.md`).
    static let minBodySizeToCompress = 500

    /// A `rev` request with `properties` and `body`, compressed only from
    /// ``minBodySizeToCompress`` bytes of body on.
    static func revRequest(_ properties: BLIPProperties, _ body: [UInt8]) -> BLIPMessage {
        .request("rev", properties: properties, body: body,
                 flags: body.count >= minBodySizeToCompress ? [.compressed] : [])
    }

    /// What ``sendRev(docID:revID:sequence:known:offer:noConflicts:prefetched:)`` needs of a
    /// document, read for a whole batch of changes at once.
    struct Prefetched: Sendable {
        let revisions: DocumentRevisions
        /// The current revision's stored body (tombstones included), not parsed; nil when
        /// it is not stored.
        let currentBody: RevisionBodyData?
    }

    /// The revision trees and stored current bodies of `docIDs`, read in ONE read transaction
    /// (a snapshot; `inReadBatch`) rather than two database round trips per document, and one
    /// record read per document. Documents that no longer exist are absent from the result.
    func prefetch(_ docIDs: [String]) async throws -> [String: Prefetched] {
        let collection = self.collection.collection
        let ids = Array(Set(docIDs))
        return try await context.database.inReadBatch { txn in
            var out: [String: Prefetched] = [:]
            out.reserveCapacity(ids.count)
            for id in ids {
                guard let (revs, body) = try txn.revisionsAndBody(of: id, in: collection) else { continue }
                out[id] = Prefetched(revisions: revs, currentBody: body)
            }
            return out
        }
    }

    /// The revision tree read with the batch, or read now when the batch did not have it.
    func prefetchedOrRead(_ prefetched: Prefetched?, _ docID: String) async throws -> DocumentRevisions? {
        if let prefetched { return prefetched.revisions }
        return try await collection.collection.revisions(of: docID)
    }

    /// Sends one `rev`; returns the per-document error (nil on success). Transport failures,
    /// and the peer's `HTTP`/507 (disk full: the push stops there), throw.
    ///
    /// The history goes back to the first of `known` (revisions the peer has), at most
    /// `offer.maxHistory` entries. A revision that cannot be read is never skipped: the peer
    /// gets a `norev` (404: replaced since; 500 with the error: unreadable or damaged).
    /// With `offer.deltas` (and ``sendsDeltas``), a live revision whose body is at least
    /// ``minDeltaBodySize`` bytes goes as a delta against the first of `known` whose live body
    /// is still stored here, when the delta is at most ``maxDeltaRatio`` × the body; if the
    /// peer answers `HTTP`/422 (unknown base, bad delta) the full body is sent. With
    /// `offer.legacyAttachments` a body with blobs, and a delta base, go in legacy form
    /// (``LegacyAttachments/encode(_:revpos:)``, `revpos` = generation); see
    /// ``LegacyAttachments/sendsLegacyForm(_:peerSupportsBlobs:)``.
    func sendRev(docID: String, revID: RevisionID, sequence: String, known: [RevisionID], offer: RevisionOffer,
                 noConflicts: Bool, prefetched: Prefetched? = nil) async throws -> PeerSyncError? {
        // A document stored before IDs were validated may hold one that cannot travel (NUL
        // separates BLIP properties): that document fails, the session goes on.
        do { try DocumentID.validate(docID) } catch { return error }
        let sc = collection
        var props = context.collectionProperty(index)
        props["id"] = docID
        props["rev"] = revID.description
        props["sequence"] = sequence
        var revs: DocumentRevisions?, stored: RevisionBodyData?
        if let prefetched, prefetched.revisions.currentRevID == revID, let current = prefetched.currentBody,
           current.revID == revID {
            revs = prefetched.revisions
            stored = current
        } else {
            let collection = sc.collection
            do {
                (revs, stored) = try await context.database.inReadBatch { txn in
                    let read = try txn.revisionsAndBody(of: docID, revID: revID, in: collection)
                    return (read?.revisions, read?.body)
                }
            } catch let error as PeerSyncError where error.code != .closed && error.code != .cancelled {
                // Never skipped, never left unanswered: the peer is told, and this side logs it.
                return try await sendNoRev(props, PeerSyncError(error.code, error.message, context: ["docID": docID]))
            }
        }
        guard let revs, let info = revs.revision(revID), let stored else {
            if let revs, String(revs.sequence) == sequence {
                // The document has not changed since this change was announced, yet the revision
                // it named cannot be read: the stored record is damaged (its version and its
                // revision tree disagree). Never a 404 ("replaced since"), which the peer skips.
                return try await sendNoRev(props, PeerSyncError(
                    .corrupt, "the stored document \(docID) is damaged: revision \(revID) of its "
                    + "current record is not in its revision tree with a body", context: ["docID": docID]))
            }
            props["error"] = "404"
            props["reason"] = "revision no longer available"
            ReplicationCounters.add(ReplicationCounters.noRevsSent)
            try await context.blip.sendNoReply(.request("norev", properties: props))
            return PeerSyncError(.notFound, "revision no longer available", context: ["docID": docID])
        }
        Self.addHistory(of: revID, in: revs, known: known, maxHistory: offer.maxHistory, to: &props)
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
            legacy = LegacyAttachments.sendsLegacyForm(body, peerSupportsBlobs: !offer.legacyAttachments)
            if legacy {
                body = LegacyAttachments.encode(body, revpos: revID.generation)
                full = JSONValue.object(body).json
            }
            parsed = body
        }
        var reply: BLIPMessage
        if mayGoAsDelta(isDeleted: info.isDeleted, bodySize: full.count, known: known, in: revs, offer: offer),
           let (base, delta) = try await deltaBody(docID: docID, revs: revs, body: parsed ?? stored.properties(),
                                                  bodySize: full.count, known: known, legacyAttachments: legacy) {
            var deltaProps = props
            deltaProps["deltaSrc"] = base.description
            reply = try await sendRevRequest(Self.revRequest(deltaProps, delta))
            if reply.blipError?.isHTTP(422) == true {
                reply = try await sendRevRequest(Self.revRequest(props, full))
            }
        } else {
            reply = try await sendRevRequest(Self.revRequest(props, full))
        }
        guard let refusal = reply.blipError else { return nil }
        return try Self.refusalError(refusal, docID: docID)
    }

    /// Whether a revision may be sent as a delta: the peer accepts deltas (and this side sends
    /// them), it is live, its body has at least ``minDeltaBodySize`` bytes, and one of `known`
    /// is a live revision whose body is stored here (a possible base).
    func mayGoAsDelta(isDeleted: Bool, bodySize: Int, known: [RevisionID], in revs: DocumentRevisions,
                      offer: RevisionOffer) -> Bool {
        offer.deltas && sendsDeltas && !isDeleted && bodySize >= Self.minDeltaBodySize
            && known.contains(where: { revs.revision($0).map { !$0.isDeleted && $0.hasBody } ?? false })
    }

    /// The `history` property of a revision sent to a peer that has `known`: its ancestors
    /// back to the first of `known`, at most `maxHistory` entries.
    static func addHistory(of revID: RevisionID, in revs: DocumentRevisions, known: [RevisionID], maxHistory: Int,
                           to props: inout BLIPProperties) {
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
    }

    /// The document error for a revision the peer refused with `refusal`; a disk-full refusal
    /// (`HTTP`/507) throws instead.
    static func refusalError(_ refusal: BLIPError, docID: String) throws -> PeerSyncError {
        if refusal.isHTTP(507) {
            // The peer could not store it (disk full): not a per-document refusal; the push
            // stops here and its checkpoint stays before this revision.
            throw PeerSyncError(.diskFull, "disk full on the peer: \(refusal.message)", context: ["docID": docID],
                                detail: refusal)
        }
        return PeerSyncError(refusal.code == 409 ? .conflict : .replicationFailed, "the peer refused the revision: \(refusal)",
                             context: ["docID": docID], detail: refusal)
    }

    /// Tells the peer that the revision in `props` cannot be sent because of `error` (a `norev`
    /// with `error` 500 and the error's code and message), logs it, and returns `error`.
    private func sendNoRev(_ props: BLIPProperties, _ error: PeerSyncError) async throws -> PeerSyncError {
        Logger(.replicator).error("could not read \(props["id"] ?? "-") \(props["rev"] ?? "-") of \(collection.collection.fullName): \(error.message)")
        var props = props
        props["error"] = "500"
        props["errorCode"] = error.code.rawValue
        props["reason"] = error.message
        ReplicationCounters.add(ReplicationCounters.noRevsSent)
        try await context.blip.sendNoReply(.request("norev", properties: props))
        return error
    }

    /// The base revision and encoded delta for sending `body` to a peer that has `known`, or
    /// nil when no known live revision's body is stored or the delta is too large.
    private func deltaBody(docID: String, revs: DocumentRevisions, body: [String: JSONValue],
                           bodySize: Int, known: [RevisionID], legacyAttachments: Bool) async throws -> (RevisionID, [UInt8])? {
        for base in known {
            guard let info = revs.revision(base), !info.isDeleted,
                  var baseBody = try await collection.collection.revisionBody(docID: docID, revID: base) else { continue }
            if legacyAttachments { baseBody = LegacyAttachments.encode(baseBody, revpos: base.generation) }
            let delta = JSONDelta.create(old: .object(baseBody), new: .object(body)) ?? .object([:])
            let bytes = delta.json
            guard Double(bytes.count) <= Self.maxDeltaRatio * Double(bodySize) else { return nil }
            return (base, bytes)
        }
        return nil
    }
}
