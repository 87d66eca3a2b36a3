import Foundation
import PeerSyncCore

/// The content-addressed blob files of one database: `<db>/blobs/<40 hex digits>.blob`.
///
/// New content is streamed into a temporary file under `blobs/tmp/` while it is hashed, then
/// renamed into place, so a blob file is either absent or complete, and identical content is
/// stored once. Stateless apart from its directory, so safe to use from any thread; several
/// processes may install blobs at once (a rename onto an existing identical file is fine).
final class BlobStore: Sendable {
    let directory: URL
    let durable: Bool
    /// Digests that compaction must keep (in this process), with reference counts.
    private let pins = LockedValue<[String: Int]>([:])

    init(directory: URL, durable: Bool) {
        self.directory = directory
        self.durable = durable
    }

    /// Keeps `digest` from being compacted away until the returned pin is released.
    func pin(_ digest: String) -> BlobPin {
        pins.withLock { $0[digest, default: 0] += 1 }
        return BlobPin(store: self, digest: digest)
    }

    fileprivate func unpin(_ digest: String) {
        pins.withLock { pins in
            let count = (pins[digest] ?? 1) - 1
            pins[digest] = count > 0 ? count : nil
        }
    }

    func isPinned(_ digest: String) -> Bool { pins.withLock { $0[digest] != nil } }

    var tempDirectory: URL { directory.appendingPathComponent("tmp", isDirectory: true) }

    func createDirectories() throws(PeerSyncError) {
        do {
            try FileManager.default.createDirectory(at: tempDirectory, withIntermediateDirectories: true)
        } catch {
            throw PeerSyncError(.io, "cannot create the blob directory: \(error.localizedDescription)",
                                context: ["path": directory.path])
        }
    }

    /// The 20 SHA-1 bytes of a `sha1-<base64>` digest, or nil if it is not one.
    static func digestBytes(_ digest: String) -> [UInt8]? {
        guard digest.hasPrefix("sha1-"), let data = Data(base64Encoded: String(digest.dropFirst(5))),
              data.count == 20 else { return nil }
        return Array(data)
    }

    /// The file a digest's content lives in. Throws `.invalidArgument` for a digest that is
    /// not `sha1-<base64 of 20 bytes>`.
    func fileURL(forDigest digest: String) throws(PeerSyncError) -> URL {
        guard let bytes = BlobStore.digestBytes(digest) else {
            throw PeerSyncError(.invalidArgument, "not a blob digest (expected sha1-<base64>)",
                                context: ["digest": String(digest.prefix(80))])
        }
        return directory.appendingPathComponent(bytes.hexString + ".blob")
    }

    func has(digest: String) -> Bool {
        guard let url = try? fileURL(forDigest: digest) else { return false }
        return FileManager.default.fileExists(atPath: url.path)
    }

    /// The size of a stored blob, or nil if it is not stored.
    func length(ofDigest digest: String) -> UInt64? {
        guard let url = try? fileURL(forDigest: digest),
              let attributes = try? FileManager.default.attributesOfItem(atPath: url.path),
              let size = attributes[.size] as? NSNumber else { return nil }
        return size.uint64Value
    }

    /// Digests of every stored blob.
    func allDigests() throws(PeerSyncError) -> [String] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw PeerSyncError(.io, "cannot list blobs: \(error.localizedDescription)", context: ["path": directory.path])
        }
        return names.compactMap { name in
            guard name.hasSuffix(".blob") else { return nil }
            let hex = String(name.dropLast(5))
            guard hex.utf8.count == 40 else { return nil }
            return Blob.digestString(RevTree.hexDecode(hex))
        }
    }

    func delete(digest: String) throws(PeerSyncError) {
        let url = try fileURL(forDigest: digest)
        do {
            try FileManager.default.removeItem(at: url)
        } catch {
            if FileManager.default.fileExists(atPath: url.path) {
                throw PeerSyncError(.io, "cannot delete blob: \(error.localizedDescription)", context: ["digest": digest])
            }
        }
    }

    /// Removes temporary files older than `age` (left behind by a crash).
    func removeStaleTemporaryFiles(olderThan age: TimeInterval) {
        let fm = FileManager.default
        guard let names = try? fm.contentsOfDirectory(atPath: tempDirectory.path) else { return }
        let limit = Date().addingTimeInterval(-age)
        for name in names {
            let url = tempDirectory.appendingPathComponent(name)
            if let modified = (try? fm.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date, modified < limit {
                try? fm.removeItem(at: url)
            }
        }
    }

    /// Stores in-memory content; returns its digest.
    @discardableResult
    func install(data: Data, expectedDigest: String? = nil) throws(PeerSyncError) -> String {
        let writer = try BlobStagingFile(store: self)
        try writer.append(data)
        return try writer.install(expectedDigest: expectedDigest).digest
    }

    /// Streams a file's content into the store in 64 KiB chunks; returns digest and length.
    /// With `expectedDigest`, throws `.invalidArgument` (and stores nothing) if the content
    /// does not match it.
    @discardableResult
    func install(fileURL: URL, expectedDigest: String?) throws(PeerSyncError) -> (digest: String, length: UInt64) {
        let reader = try BlobFileReader(url: fileURL)
        defer { reader.close() }
        let writer = try BlobStagingFile(store: self)
        while let chunk = try reader.read(maxBytes: BlobIO.chunkSize) { try writer.append(chunk) }
        return try writer.install(expectedDigest: expectedDigest)
    }

    /// Makes sure `blob`'s content is in this store (streaming it from its file or another
    /// store if needed).
    func install(_ blob: Blob) throws(PeerSyncError) {
        if has(digest: blob.digest) { return }
        switch blob.source {
        case .data(let data):
            try install(data: data, expectedDigest: blob.digest)
        case .file(let url):
            try install(fileURL: url, expectedDigest: blob.digest)
        case .stored(let other):
            guard let other, other.directory != directory, other.has(digest: blob.digest) else {
                throw PeerSyncError(.notFound, "blob content is not available", context: ["digest": blob.digest])
            }
            try install(fileURL: other.fileURL(forDigest: blob.digest), expectedDigest: blob.digest)
        }
    }
}

/// Keeps one blob from being compacted away while it is alive.
final class BlobPin: Sendable {
    let store: BlobStore
    let digest: String
    init(store: BlobStore, digest: String) {
        self.store = store
        self.digest = digest
    }
    deinit { store.unpin(digest) }
}

/// A blob being written: a temporary file plus a running SHA-1. Owns its `FileHandle`
/// (closed in `deinit`, which also deletes an uninstalled temporary file). Not thread-safe:
/// `@unchecked Sendable` because ``BlobWriter`` serializes all calls on its own queue and
/// internal users call it from the one thread they run on.
final class BlobStagingFile: @unchecked Sendable {
    let store: BlobStore
    let tempURL: URL
    private var handle: FileHandle?
    private var hasher = SHA1()
    private(set) var length: UInt64 = 0
    private var done = false

    init(store: BlobStore) throws(PeerSyncError) {
        self.store = store
        tempURL = store.tempDirectory.appendingPathComponent("\(UUID().uuidString).tmp")
        let fm = FileManager.default
        if !fm.fileExists(atPath: store.tempDirectory.path) { try store.createDirectories() }
        guard fm.createFile(atPath: tempURL.path, contents: nil) else {
            throw PeerSyncError(.io, "cannot create a temporary blob file", context: ["path": tempURL.path])
        }
        do {
            handle = try FileHandle(forWritingTo: tempURL)
        } catch {
            try? fm.removeItem(at: tempURL)
            throw PeerSyncError(.io, "cannot open a temporary blob file: \(error.localizedDescription)",
                                context: ["path": tempURL.path])
        }
    }

    func append(_ data: Data) throws(PeerSyncError) {
        guard let handle, !done else { throw PeerSyncError(.closed, "blob writer is finished") }
        data.withUnsafeBytes { hasher.update(buffer: $0) }
        length += UInt64(data.count)
        do {
            try handle.write(contentsOf: data)
        } catch {
            throw PeerSyncError(.io, "cannot write blob: \(error.localizedDescription)", context: ["path": tempURL.path])
        }
    }

    /// Finishes the file and moves it into place. Throws `.invalidArgument` if the content
    /// does not match `expectedDigest` (the temporary file is deleted).
    func install(expectedDigest: String?) throws(PeerSyncError) -> (digest: String, length: UInt64) {
        guard let handle, !done else { throw PeerSyncError(.closed, "blob writer is finished") }
        done = true
        self.handle = nil
        let fm = FileManager.default
        defer { try? fm.removeItem(at: tempURL) }
        do {
            if store.durable { try handle.synchronize() }
            try handle.close()
        } catch {
            throw PeerSyncError(.io, "cannot finish blob: \(error.localizedDescription)", context: ["path": tempURL.path])
        }
        let digest = Blob.digestString(hasher.finalize())
        if let expectedDigest, expectedDigest != digest {
            throw PeerSyncError(.invalidArgument, "blob content does not match its digest",
                                context: ["expected": expectedDigest, "actual": digest])
        }
        let destination = try store.fileURL(forDigest: digest)
        if !fm.fileExists(atPath: destination.path) {
            do {
                try fm.moveItem(at: tempURL, to: destination)
            } catch {
                // Another writer may have installed the same content meanwhile.
                if !fm.fileExists(atPath: destination.path) {
                    throw PeerSyncError(.io, "cannot install blob: \(error.localizedDescription)",
                                        context: ["digest": digest])
                }
            }
        }
        return (digest, length)
    }

    func abort() {
        guard !done else { return }
        done = true
        try? handle?.close()
        handle = nil
        try? FileManager.default.removeItem(at: tempURL)
    }

    deinit { abort() }
}

/// Streams content into a database's blob store chunk by chunk, e.g. a blob arriving over the
/// network; obtain one from ``Database/openBlobWriter()``. Writes happen on the writer's own
/// serial queue. Call ``finish(expectedDigest:contentType:)`` to install the blob or
/// ``cancel()`` to discard it (dropping the writer also discards it).
public final class BlobWriter: Sendable {
    private let staging: BlobStagingFile
    private let queue = DispatchQueue(label: "peersync.blob-writer")

    init(store: BlobStore) throws(PeerSyncError) {
        staging = try BlobStagingFile(store: store)
    }

    /// Appends a chunk.
    public func write(_ data: Data) async throws {
        try await run { [staging] () throws(PeerSyncError) in try staging.append(data) }
    }

    /// Installs the content and returns a blob referencing it. Throws `.invalidArgument` if
    /// the content does not match `expectedDigest` (nothing is stored).
    public func finish(expectedDigest: String? = nil, contentType: String? = nil) async throws -> Blob {
        let staging = self.staging
        let (digest, length) = try await run { () throws(PeerSyncError) in try staging.install(expectedDigest: expectedDigest) }
        return Blob(digest: digest, length: length, contentType: contentType, store: staging.store,
                    pin: staging.store.pin(digest))
    }

    /// Discards what was written.
    public func cancel() async {
        let staging = self.staging
        _ = try? await run { () throws(PeerSyncError) in staging.abort() }
    }

    private func run<R: Sendable>(_ work: @escaping @Sendable () throws(PeerSyncError) -> R) async throws(PeerSyncError) -> R {
        try await awaitDelivery { deliver in
            queue.async { deliver(Result { () throws(PeerSyncError) in try work() }) }
        }.get()
    }
}
