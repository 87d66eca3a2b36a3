import PeerSyncCore
import PeerSyncStorage

/// The in-memory backend seen through wrappers that implement only the required `Storage`
/// methods, as a custom backend written before ordered key sets would: its key sets are the
/// protocols' default implementations over ordinary keyspaces (`OrderedKeySets`), and the
/// conformance suite must pass with them too.
struct WithoutKeySetsBackend: StorageBackend {
    let inner = MemoryStorageBackend()
    var name: String { "memory-without-key-sets" }
    func open(directory: String, options: StorageOptions) throws -> any Storage {
        WithoutKeySetsStorage(inner: try inner.open(directory: directory, options: options))
    }
    func hasStore(in directory: String) -> Bool { inner.hasStore(in: directory) }
    func removeStore(in directory: String) { inner.removeStore(in: directory) }
}

final class WithoutKeySetsStorage: Storage {
    let inner: any Storage
    init(inner: any Storage) { self.inner = inner }
    var backendName: String { "memory-without-key-sets" }
    var directory: String { inner.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try inner.read { try body(WithoutKeySetsWriter(inner: $0, writer: nil)) }
    }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try inner.write { try body(WithoutKeySetsWriter(inner: $0, writer: $0)) }
    }
    func close() throws { try inner.close() }
}

/// Forwards the required methods only (a reader is a writer whose writes are never called).
struct WithoutKeySetsWriter: StorageWriter {
    let inner: any StorageReader
    let writer: (any StorageWriter)?

    private func requireWriter() throws -> any StorageWriter {
        guard let writer else { throw PeerSyncError(.storage, "write operation on a read-only transaction") }
        return writer
    }

    func keyspaces() throws -> [String] { try inner.keyspaces() }
    func get(_ key: String, in keyspace: String) throws -> Record? { try inner.get(key, in: keyspace) }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int { try inner.count(in: keyspace, includeDeleted: includeDeleted) }
    func lastSequence(in keyspace: String) throws -> UInt64 { try inner.lastSequence(in: keyspace) }
    func put(_ record: Record, in keyspace: String) throws -> UInt64 { try requireWriter().put(record, in: keyspace) }
    func delete(_ key: String, in keyspace: String) throws -> UInt64? { try requireWriter().delete(key, in: keyspace) }
    func purge(_ key: String, in keyspace: String) throws -> Bool { try requireWriter().purge(key, in: keyspace) }
    func dropKeyspace(_ keyspace: String) throws { try requireWriter().dropKeyspace(keyspace) }
}
