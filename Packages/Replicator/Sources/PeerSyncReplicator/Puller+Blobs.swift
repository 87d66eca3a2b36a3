import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// The receiving side of blobs (protocol notes §9): for each blob a received `rev` references
/// and the database lacks, sends `getAttachment` and streams the reply body into a
/// ``BlobWriter`` (never holding the blob in memory); the digest is verified when the writer
/// finishes. Any failure discards the partial blob and fails the `rev` with `HTTP`/422. (The
/// serving side is in `Pusher+Blobs.swift`.)
extension Puller {
    /// Bytes of a streamed attachment gathered before one write to the blob writer.
    static let blobWriteBatch = 256 * 1024

    /// Fetches every blob `revision` references that the database lacks and returns them
    /// (keep them alive until the revision is inserted: they pin their content against
    /// compaction).
    func fetchMissingBlobs(of revision: IncomingRevision) async throws -> [Blob] {
        var pins: [Blob] = []
        let body = revision.body
        for ref in blobReferences(in: .object(body)) + LegacyAttachments.attachmentReferences(in: body) {
            if try await context.database.getBlob(properties: ref) != nil { continue }
            guard let digest = ref["digest"]?.stringValue else { continue }
            pins.append(try await fetchBlob(digest: digest, reference: ref, docID: revision.docID))
        }
        return pins
    }

    /// Fetches one blob the database lacks and returns it. Throws `HTTP`/422 when the content
    /// fails verification, the peer's error when it refuses.
    func fetchBlob(digest: String, reference ref: [String: JSONValue], docID: String) async throws -> Blob {
        var props = context.collectionProperty(index)
        props["digest"] = digest
        props["docID"] = docID
        let contentType = ref["content_type"]?.stringValue
        if Self.isCompressible(contentType: contentType, encoding: ref["encoding"]?.stringValue) {
            props["compress"] = "true"
        }
        let blip = context.blip
        let request = BLIPMessage.request("getAttachment", properties: props)
        let response = try await withTimeout(context.replyTimeout, "getAttachment") {
            try await blip.sendRequestStreamingResponse(request)
        }
        if response.isError {
            _ = try await response.collected(maxBytes: 64 * 1024).checked("getAttachment")
        }
        let expectedLength = ref["length"]?.intValue.map { UInt64(max(0, $0)) }
        let writer = try await context.database.openBlobWriter()
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
            throw PeerSyncError.reply(.http(422, "attachment \(digest) failed verification: \(error)"))
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
}
