import PeerSyncCore
import PeerSyncStorage

/// A memory store that counts its read transactions (``reads``) and its readers'
/// `enumerate(in:since:)` calls (``sinceEnumerations``): what the change notifier reads.
final class CountingBackend: StorageBackend {
    let name = "memory"
    fileprivate let readCount = LockedValue(0)
    fileprivate let sinceCount = LockedValue(0)
    /// Read transactions opened so far.
    var reads: Int { readCount.withLock { $0 } }
    /// `enumerate(in:since:)` calls so far, in read and write transactions.
    var sinceEnumerations: Int { sinceCount.withLock { $0 } }

    func open(directory: String, options: StorageOptions) throws -> any Storage {
        CountingStorage(try MemoryStorageBackend().open(directory: directory, options: options), self)
    }
    func hasStore(in directory: String) -> Bool { MemoryStorageBackend().hasStore(in: directory) }
}

private final class CountingStorage: Storage {
    let base: any Storage
    let counts: CountingBackend
    init(_ base: any Storage, _ counts: CountingBackend) {
        self.base = base
        self.counts = counts
    }
    var backendName: String { base.backendName }
    var directory: String { base.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        counts.readCount.withLock { $0 += 1 }
        return try base.read { try body(CountingReader(base: $0, counts: counts)) }
    }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R { try base.write(body) }
    func close() throws { try base.close() }
}

private struct CountingReader: StorageReader {
    let base: any StorageReader
    let counts: CountingBackend
    func keyspaces() throws -> [String] { try base.keyspaces() }
    func get(_ key: String, in keyspace: String) throws -> Record? { try base.get(key, in: keyspace) }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        try base.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        counts.sinceCount.withLock { $0 += 1 }
        try base.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try base.count(in: keyspace, includeDeleted: includeDeleted)
    }
    func lastSequence(in keyspace: String) throws -> UInt64 { try base.lastSequence(in: keyspace) }
}
