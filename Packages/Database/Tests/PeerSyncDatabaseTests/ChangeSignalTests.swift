import PeerSyncCore
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

/// Change signals (the replicator's pushers) need no document IDs: while they are a
/// collection's only listeners, the change poll after a commit does not read the changed
/// documents (in a mesh, every commit of a peer woke a poll that enumerated it once more for
/// nobody). A listener that needs the IDs still gets them, also beside signals.
@Suite struct ChangeSignalTests {
    @Test func signalsAloneDoNotEnumerateTheChanges() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let backend = EnumerationCountingBackend()
        let db = try await Database(name: "signals", config: DatabaseConfiguration(
            directory: dir.path, backend: backend, durable: false))
        let c = try db.defaultCollection()
        let signals = c.changeSignals()
        var iterator = signals.makeAsyncIterator()
        let before = backend.enumerations
        try await c.save(document: MutableDocument(id: "a", data: ["n": 1]))
        #expect(await iterator.next() != nil)
        #expect(backend.enumerations == before, "the poll read the changes for a signal")

        // A listener that needs the IDs, beside the signal: it gets them, and so does the signal.
        let seen = Collected<CollectionChange>()
        let token = c.addChangeListener { seen.append($0) }
        try await c.save(document: MutableDocument(id: "b", data: ["n": 2]))
        #expect(await seen.wait { $0.flatMap(\.documentIDs) == ["b"] }, "\(seen.all.map(\.documentIDs))")
        #expect(await iterator.next() != nil)
        #expect(backend.enumerations > before)
        token.remove()
        try await db.close()
    }
}

/// A memory store whose readers count `enumerate(in:since:)` calls.
private final class EnumerationCountingBackend: StorageBackend {
    let name = "memory"
    private let count = LockedValue(0)
    var enumerations: Int { count.withLock { $0 } }

    func open(directory: String, options: StorageOptions) throws -> any Storage {
        EnumerationCountingStorage(try MemoryStorageBackend().open(directory: directory, options: options), count)
    }
    func hasStore(in directory: String) -> Bool { MemoryStorageBackend().hasStore(in: directory) }
}

private final class EnumerationCountingStorage: Storage {
    let base: any Storage
    let count: LockedValue<Int>
    init(_ base: any Storage, _ count: LockedValue<Int>) {
        self.base = base
        self.count = count
    }
    var backendName: String { base.backendName }
    var directory: String { base.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try base.read { try body(CountingReader(base: $0, count: count)) }
    }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R { try base.write(body) }
    func close() throws { try base.close() }
}

private struct CountingReader: StorageReader {
    let base: any StorageReader
    let count: LockedValue<Int>
    func keyspaces() throws -> [String] { try base.keyspaces() }
    func get(_ key: String, in keyspace: String) throws -> Record? { try base.get(key, in: keyspace) }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        try base.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        count.withLock { $0 += 1 }
        try base.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try base.count(in: keyspace, includeDeleted: includeDeleted)
    }
    func lastSequence(in keyspace: String) throws -> UInt64 { try base.lastSequence(in: keyspace) }
}
