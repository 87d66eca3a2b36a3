import Dispatch
import Foundation
import PeerSyncCore

/// Binary content referenced from a document (Couchbase Lite's `Blob`): content-addressed by
/// its SHA-1 digest, stored once per database, referenced from documents as
/// `{"@type":"blob","digest":"sha1-…","length":N,"content_type":"…"}`.
///
/// An immutable reference type, safe to share between tasks. Content is never held in memory
/// unless it came from memory (``init(contentType:data:)``) or is asked for whole
/// (``content``); ``contentStream(chunkSize:)`` reads it in chunks.
public final class Blob: Sendable, Equatable, Hashable, CustomStringConvertible {
    /// The MIME type, if known.
    public let contentType: String?
    /// `sha1-<base64 of the SHA-1 of the content>`.
    public let digest: String
    /// The content length in bytes.
    public let length: UInt64

    enum Source: Sendable {
        case data(Data)
        case file(URL)
        /// In a database's blob store (nil: a reference whose store is unknown).
        case stored(BlobStore?)
    }
    let source: Source
    /// Keeps the content from being compacted away while this object lives (blobs made by a
    /// ``BlobWriter``).
    let pin: BlobPin?

    /// A blob with in-memory content.
    public init(contentType: String?, data: Data) {
        self.contentType = contentType
        var hasher = SHA1()
        data.withUnsafeBytes { hasher.update(buffer: $0) }
        self.digest = Blob.digestString(hasher.finalize())
        self.length = UInt64(data.count)
        self.source = .data(data)
        self.pin = nil
    }

    /// A blob whose content is the file at `fileURL`. The file is read once now, in chunks on
    /// a background queue, to compute the digest, and streamed again into the database when a
    /// document referencing the blob is saved (the file must not change in between; the save
    /// fails with `.invalidArgument` if it did). Throws `.io` if the file cannot be read.
    public init(contentType: String?, fileURL: URL) async throws {
        let (digest, length) = try await BlobIO.run { () throws(PeerSyncError) in
            let reader = try BlobFileReader(url: fileURL)
            var hasher = SHA1()
            var length: UInt64 = 0
            while let chunk = try reader.read(maxBytes: BlobIO.chunkSize) {
                chunk.withUnsafeBytes { hasher.update(buffer: $0) }
                length += UInt64(chunk.count)
            }
            return (Blob.digestString(hasher.finalize()), length)
        }
        self.contentType = contentType
        self.digest = digest
        self.length = length
        self.source = .file(fileURL)
        self.pin = nil
    }

    /// A reference to a stored blob, from its properties; nil if they are not valid blob
    /// properties.
    init?(stored properties: [String: JSONValue], store: BlobStore?) {
        guard Blob.isBlob(properties: properties), let digest = properties["digest"]?.stringValue,
              BlobStore.digestBytes(digest) != nil,
              let length = properties["length"]?.intValue, length >= 0 else { return nil }
        self.contentType = properties["content_type"]?.stringValue
        self.digest = digest
        self.length = UInt64(length)
        self.source = .stored(store)
        self.pin = nil
    }

    init(digest: String, length: UInt64, contentType: String?, store: BlobStore, pin: BlobPin? = nil) {
        self.digest = digest
        self.length = length
        self.contentType = contentType
        self.source = .stored(store)
        self.pin = pin
    }

    /// Whether `properties` look like a blob reference: `"@type": "blob"` and a string
    /// `digest`.
    public static func isBlob(properties: [String: JSONValue]) -> Bool {
        properties["@type"]?.stringValue == "blob" && properties["digest"]?.stringValue != nil
    }

    /// The reference stored in documents: `@type`, `digest`, `length` and (if known)
    /// `content_type`.
    public var properties: [String: JSONValue] {
        var dict: [String: JSONValue] = ["@type": "blob", "digest": .string(digest), "length": .int(Int64(length))]
        if let contentType { dict["content_type"] = .string(contentType) }
        return dict
    }

    /// The whole content, read on a background queue. Throws `.notFound` when the blob is a
    /// reference to content that is not in the database, `.io` on read errors.
    public var content: Data {
        get async throws {
            if case .data(let data) = source { return data }
            let url = try contentURL()
            return try await BlobIO.run { () throws(PeerSyncError) in
                let reader = try BlobFileReader(url: url)
                var out = Data()
                while let chunk = try reader.read(maxBytes: 1 << 20) { out.append(chunk) }
                return out
            }
        }
    }

    /// The content as a sequence of chunks of at most `chunkSize` bytes (default 64 KiB), each
    /// read on a background queue when asked for: a large blob is never held in memory.
    public func contentStream(chunkSize: Int = 65_536) -> BlobContentStream {
        BlobContentStream(blob: self, chunkSize: max(1, chunkSize))
    }

    /// The file holding the content (external file or blob store file).
    func contentURL() throws(PeerSyncError) -> URL {
        switch source {
        case .data:
            throw PeerSyncError(.internalError, "in-memory blob has no file")
        case .file(let url):
            return url
        case .stored(let store):
            guard let store else {
                throw PeerSyncError(.notFound, "blob is not attached to a database", context: ["digest": digest])
            }
            let url = try store.fileURL(forDigest: digest)
            guard store.has(digest: digest) else {
                throw PeerSyncError(.notFound, "blob is not in the database", context: ["digest": digest])
            }
            return url
        }
    }

    static func digestString(_ sha1: [UInt8]) -> String { "sha1-" + Data(sha1).base64EncodedString() }

    public static func == (lhs: Blob, rhs: Blob) -> Bool { lhs.digest == rhs.digest }
    public func hash(into hasher: inout Hasher) { hasher.combine(digest) }
    public var description: String { "Blob(\(digest), \(length) bytes, \(contentType ?? "no type"))" }
}

/// The chunks of a blob's content (see ``Blob/contentStream(chunkSize:)``). Each iteration
/// opens the content anew; reads happen on a background queue, never on the caller's thread.
public struct BlobContentStream: AsyncSequence, Sendable {
    public typealias Element = Data
    let blob: Blob
    let chunkSize: Int

    public func makeAsyncIterator() -> Iterator { Iterator(blob: blob, chunkSize: chunkSize) }

    /// Reads the content chunk by chunk from the blob store; iterate on one task at a time.
    public struct Iterator: AsyncIteratorProtocol {
        let blob: Blob
        let chunkSize: Int
        var reader: BlobFileReader?
        var offset = 0
        var finished = false

        init(blob: Blob, chunkSize: Int) {
            self.blob = blob
            self.chunkSize = chunkSize
        }

        public mutating func next() async throws -> Data? {
            if finished { return nil }
            if case .data(let data) = blob.source {
                guard offset < data.count else { finished = true; return nil }
                let end = Swift.min(data.count, offset + chunkSize)
                defer { offset = end }
                return data.subdata(in: offset..<end)
            }
            if reader == nil {
                let url = try blob.contentURL()
                reader = try await BlobIO.run { () throws(PeerSyncError) in try BlobFileReader(url: url) }
            }
            guard let reader else { return nil }
            let size = chunkSize
            let chunk = try await BlobIO.run { () throws(PeerSyncError) in try reader.read(maxBytes: size) }
            if chunk == nil {
                finished = true
                reader.close()
                self.reader = nil
            }
            return chunk
        }
    }
}

/// Background execution of blocking blob file I/O.
enum BlobIO {
    static let chunkSize = 65_536
    static let queue = DispatchQueue(label: "peersync.blob-io", attributes: .concurrent)

    static func run<R: Sendable>(_ work: @escaping @Sendable () throws(PeerSyncError) -> R) async throws(PeerSyncError) -> R {
        try await awaitDelivery { deliver in
            queue.async { deliver(Result { () throws(PeerSyncError) in try work() }) }
        }.get()
    }
}

/// Reads a file in chunks. Owns its `FileHandle` (closed in `deinit`); not thread-safe:
/// `@unchecked Sendable` because its single user (an iterator or a queue task) calls it from
/// one thread at a time, awaiting each call before the next.
final class BlobFileReader: @unchecked Sendable {
    private var handle: FileHandle?
    let url: URL

    init(url: URL) throws(PeerSyncError) {
        self.url = url
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw PeerSyncError(.io, "cannot open blob file: \(error.localizedDescription)", context: ["path": url.path])
        }
    }

    /// The next chunk, or nil at the end of the file.
    func read(maxBytes: Int) throws(PeerSyncError) -> Data? {
        guard let handle else { return nil }
        do {
            guard let data = try handle.read(upToCount: maxBytes), !data.isEmpty else { return nil }
            return data
        } catch {
            throw PeerSyncError(.io, "cannot read blob file: \(error.localizedDescription)", context: ["path": url.path])
        }
    }

    func close() {
        try? handle?.close()
        handle = nil
    }

    deinit { try? handle?.close() }
}
