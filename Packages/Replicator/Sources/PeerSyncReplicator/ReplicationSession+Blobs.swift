import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import Synchronization

/// Blobs over the replication protocol (see the protocol notes §9):
///
/// - Puller: for each blob a received `rev` references and the database lacks, sends
///   `getAttachment` and streams the reply body into a ``BlobWriter`` (never holding the blob
///   in memory); the digest is verified when the writer finishes. Any failure discards the
///   partial blob and fails the `rev` with `HTTP`/422.
/// - Pusher: answers `getAttachment` by streaming the stored blob (`compress: true` honoured)
///   and `proveAttachment` by hashing the nonce and the blob, but only for digests referenced
///   by revisions this session has sent (or is sending); others get `HTTP`/403, as servers
///   should only serve digests referenced by revs they recently sent.
extension ReplicationSession {
    /// Bytes of a streamed attachment gathered before one write to the blob writer.
    static let blobWriteBatch = 256 * 1024

    /// Registers the `getAttachment` and `proveAttachment` handlers.
    func registerBlobHandlers() async {
        await blip.setStreamingHandler(profile: "getAttachment", concurrent: true) { [weak self] request in
            guard let self else { throw blipError("BLIP", 503, "replication session ended") }
            return try await self.handleGetAttachment(request)
        }
        await blip.setHandler(profile: "proveAttachment", concurrent: true) { [weak self] request in
            guard let self else { throw blipError("BLIP", 503, "replication session ended") }
            return try await self.handleProveAttachment(request)
        }
    }

    /// Sends a `rev` and waits for its reply, which the peer sends only after fetching the
    /// revision's blobs: the reply timeout restarts while this session is serving blob
    /// content, so a large blob is not cut off, but a peer silent for a whole timeout still is.
    func sendRevAwaitingBlobs(_ message: BLIPMessage, _ what: String) async throws -> BLIPMessage {
        let blip = self.blip, activity = blobActivity, limit = replyTimeout
        let request = Task { try await blip.sendRequest(message) }
        while true {
            do {
                return try await withTimeout(limit, what) { try await request.value }
            } catch let error as PeerSyncError where error.code == .timeout {
                guard activity.happened(within: limit) else { throw error }
            }
        }
    }

    /// Pusher: records the blobs `body` references before the revision is sent, so the peer's
    /// `getAttachment`/`proveAttachment` for them are served.
    func noteSentBlobs(_ body: [String: JSONValue]) {
        for ref in blobReferences(in: .object(body)) + LegacyAttachments.attachmentReferences(in: body) {
            if let digest = ref["digest"]?.stringValue { sentBlobDigests.insert(digest) }
        }
    }

    /// Puller: fetches one blob the database lacks (a revision being received references it)
    /// and returns it (keep it alive until the revision is inserted: it pins its content
    /// against compaction). Throws `HTTP`/422 when the content fails verification.
    func fetchBlob(digest: String, reference ref: [String: JSONValue], index: Int, docID: String) async throws -> Blob {
        var props = collectionProperty(index)
        props["digest"] = digest
        props["docID"] = docID
        let contentType = ref["content_type"]?.stringValue
        if Self.isCompressible(contentType: contentType, encoding: ref["encoding"]?.stringValue) {
            props["compress"] = "true"
        }
        let blip = self.blip
        let request = BLIPMessage.request("getAttachment", properties: props)
        let response = try await withTimeout(replyTimeout, "getAttachment") {
            try await blip.sendRequestStreamingResponse(request)
        }
        if response.isError {
            _ = try await response.collected(maxBytes: 64 * 1024).checked("getAttachment")
        }
        let expectedLength = ref["length"]?.intValue.map { UInt64(max(0, $0)) }
        let writer = try await database.openBlobWriter()
        do {
            var batch: [UInt8] = []
            batch.reserveCapacity(Self.blobWriteBatch)
            var total: UInt64 = 0
            for try await chunk in response.body {
                total += UInt64(chunk.count)
                if let expectedLength, total > expectedLength {
                    throw PeerSyncError(.invalidArgument, "attachment is longer than its declared \(expectedLength) bytes")
                }
                batch.append(contentsOf: chunk)
                if batch.count >= Self.blobWriteBatch {
                    try await writer.write(Data(batch))
                    batch.removeAll(keepingCapacity: true)
                }
            }
            if !batch.isEmpty { try await writer.write(Data(batch)) }
            return try await writer.finish(expectedDigest: digest, contentType: contentType)
        } catch {
            await writer.cancel()
            throw blipError("HTTP", 422, "attachment \(digest) failed verification: \(error)")
        }
    }

    /// LiteCore's rule for asking `compress: true`: a content type that does not look
    /// already compressed, and no compressed `encoding`.
    static func isCompressible(contentType: String?, encoding: String?) -> Bool {
        if let encoding, !encoding.isEmpty { return false }
        guard let type = contentType?.lowercased(), !type.isEmpty else { return false }
        if type.hasPrefix("image/") || type.hasPrefix("audio/") || type.hasPrefix("video/") { return false }
        for marker in ["zip", "zlib", "mpeg", "mp4", "crypt", "rar"] where type.contains(marker) { return false }
        return true
    }

    /// The stored blob for a digest this session has sent, or the error to answer with.
    private func servedBlob(_ request: BLIPRequest) async throws -> Blob {
        guard let digest = request.properties["digest"], digest.hasPrefix("sha1-") else {
            throw blipError("BLIP", 400, "missing or invalid digest")
        }
        guard sentBlobDigests.contains(digest) else {
            throw blipError("HTTP", 403, "attachment is not referenced by a revision sent to this peer")
        }
        let blob: Blob?
        do {
            blob = try await database.getBlob(properties: ["@type": "blob", "digest": .string(digest), "length": 0])
        } catch let error as PeerSyncError where error.code == .invalidArgument {
            throw blipError("BLIP", 400, "invalid digest")
        }
        guard let blob else { throw blipError("HTTP", 404, "no such attachment") }
        return blob
    }

    /// Pusher: streams the blob's content (BLIP-compressed when the request says
    /// `compress: true`).
    func handleGetAttachment(_ request: BLIPRequest) async throws -> BLIPReply? {
        _ = try collection(of: request)
        let blob = try await servedBlob(request)
        var flags: BLIPFlags = []
        if request.properties.bool("compress") { flags.insert(.compressed) }
        let chunks = BlobChunks(blob: blob, activity: blobActivity)
        return .streamed(BLIPMessage(type: .response, flags: flags), body: BLIPBodySource(chunks))
    }

    /// Pusher: proves it has the blob: `"sha1-" + base64(SHA1(byte(len(nonce)) ‖ nonce ‖
    /// content))`, streaming the content through SHA-1. The nonce (the body) must be 16–255
    /// bytes (else `BLIP`/400).
    func handleProveAttachment(_ request: BLIPRequest) async throws -> BLIPMessage? {
        _ = try collection(of: request)
        let nonce = request.body
        guard (16...255).contains(nonce.count) else {
            throw blipError("BLIP", 400, "proveAttachment nonce must be 16 to 255 bytes")
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
    private let last = Mutex<ContinuousClock.Instant?>(nil)

    func touch() { last.withLock { $0 = .now } }

    /// Whether content was served within the last `interval`.
    func happened(within interval: Duration) -> Bool {
        last.withLock { $0.map { ContinuousClock.now - $0 <= interval } ?? false }
    }
}
