import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// The pushing side of blobs (protocol notes §9): answers `getAttachment` by streaming the
/// stored blob (`compress: true` honoured) and `proveAttachment` by hashing the nonce and the
/// blob, but only for digests referenced by revisions this pusher has sent (or is sending);
/// others get `HTTP`/403, as servers should only serve digests referenced by revs they
/// recently sent. (The pulling side is in `Puller+Blobs.swift`.)
extension Pusher {
    /// Sends a `rev` and waits for its reply. Once this pusher has sent a revision with blobs,
    /// the peer may fetch them before it replies: the reply timeout then restarts while this
    /// pusher is serving blob content, so a large blob is not cut off, but a peer silent for a
    /// whole timeout still is.
    func sendRevRequest(_ message: BLIPMessage) async throws -> BLIPMessage {
        ReplicationCounters.add(ReplicationCounters.revsSent)
        ReplicationCounters.add(ReplicationCounters.revBytesSent, message.body.count)
        guard !sentBlobDigests.isEmpty else { return try await context.send(message, "rev") }
        let blip = context.blip, activity = blobActivity, limit = context.replyTimeout
        let request = Task { try await blip.sendRequest(message) }
        while true {
            do {
                return try await withTimeout(limit, "rev") { try await request.value }
            } catch let error as PeerSyncError where error.code == .timeout {
                guard activity.happened(within: limit) else { throw error }
            }
        }
    }

    /// Records the blobs `body` references before the revision is sent, so the peer's
    /// `getAttachment`/`proveAttachment` for them are served.
    func noteSentBlobs(_ body: [String: JSONValue]) {
        for ref in blobReferences(in: .object(body)) + LegacyAttachments.attachmentReferences(in: body) {
            if let digest = ref["digest"]?.stringValue { sentBlobDigests.insert(digest) }
        }
    }

    /// The stored blob for a digest this pusher has sent, or the error to answer with.
    private func servedBlob(_ request: BLIPRequest) async throws -> Blob {
        guard let digest = request.properties["digest"], digest.hasPrefix("sha1-") else {
            throw PeerSyncError.reply(.blip(400, "missing or invalid digest"))
        }
        guard sentBlobDigests.contains(digest) else {
            throw PeerSyncError.reply(.http(403, "attachment is not referenced by a revision sent to this peer"))
        }
        let blob: Blob?
        do {
            blob = try await context.database.getBlob(properties: ["@type": "blob", "digest": .string(digest), "length": 0])
        } catch let error as PeerSyncError where error.code == .invalidArgument {
            throw PeerSyncError.reply(.blip(400, "invalid digest"))
        }
        guard let blob else { throw PeerSyncError.reply(.http(404, "no such attachment")) }
        return blob
    }

    /// `getAttachment`: streams the blob's content (BLIP-compressed when the request says
    /// `compress: true`).
    func handleGetAttachment(_ request: BLIPRequest) async throws -> BLIPReply? {
        let blob = try await servedBlob(request)
        var flags: BLIPFlags = []
        if request.properties.bool("compress") { flags.insert(.compressed) }
        let chunks = BlobChunks(blob: blob, activity: blobActivity)
        return .streamed(BLIPMessage(type: .response, flags: flags), body: BLIPBodySource(chunks))
    }

    /// `proveAttachment`: proves this side has the blob: `"sha1-" + base64(SHA1(byte(len(nonce))
    /// ‖ nonce ‖ content))`, streaming the content through SHA-1. The nonce (the body) must be
    /// 16–255 bytes (else `BLIP`/400).
    func handleProveAttachment(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let nonce = request.body
        guard (16...255).contains(nonce.count) else {
            throw PeerSyncError.reply(.blip(400, "proveAttachment nonce must be 16 to 255 bytes"))
        }
        let blob = try await servedBlob(request)
        let proof = try await Self.attachmentProof(nonce: nonce, content: BlobChunks(blob: blob, activity: blobActivity))
        return BLIPMessage(type: .response, body: Array(proof.utf8))
    }

    /// `"sha1-" + base64(SHA1(byte(len(nonce)) ‖ nonce ‖ content))`.
    static func attachmentProof<S: AsyncSequence>(nonce: [UInt8], content: S) async throws -> String where S.Element == [UInt8] {
        var hasher = SHA1()
        hasher.update([UInt8(truncatingIfNeeded: nonce.count)])
        hasher.update(nonce)
        for try await chunk in content { hasher.update(chunk) }
        return "sha1-" + Data(hasher.finalize()).base64EncodedString()
    }
}

/// A blob's content as byte-array chunks, read on the blob I/O queue as they are asked for;
/// each chunk read marks `activity`.
struct BlobChunks: AsyncSequence, Sendable {
    typealias Element = [UInt8]
    let blob: Blob
    let activity: BlobActivity?

    func makeAsyncIterator() -> Iterator { Iterator(inner: blob.contentStream().makeAsyncIterator(), activity: activity) }

    struct Iterator: AsyncIteratorProtocol {
        var inner: BlobContentStream.Iterator
        let activity: BlobActivity?
        mutating func next() async throws -> [UInt8]? {
            guard let data = try await inner.next() else { return nil }
            activity?.touch()
            return Array(data)
        }
    }
}

/// The time blob content was last served.
final class BlobActivity: Sendable {
    private let last = LockedValue<ContinuousClock.Instant?>(nil)

    func touch() { last.withLock { $0 = .now } }

    /// Whether content was served within the last `interval`.
    func happened(within interval: Duration) -> Bool {
        last.withLock { $0.map { ContinuousClock.now - $0 <= interval } ?? false }
    }
}
