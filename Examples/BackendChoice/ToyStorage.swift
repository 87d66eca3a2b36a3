// A storage backend written outside the library, against the public `Storage` protocol only:
// a toy that keeps every store in memory as plain Swift dictionaries. It passes the storage
// conformance suite (`example-backendchoice --conformance`), so a `Database` runs on it like on
// SQLite or LMDB — and shows how small a backend is once the suite pins the semantics down.
//
// Why it is a toy: a write copies the whole keyspace dictionaries it changes (value
// semantics), and enumerations sort all keys; data lives in this process only (see
// `ToyStorageBackend`). A real in-memory backend would use a persistent sorted tree, as
// `MemoryStorageBackend` does.

import Dispatch
import Foundation
import PeerSync
import Synchronization

/// The backend named `"toy"`: stores in this process's memory, one per directory path.
///
/// - Stores opened with the same directory share their data through a process-wide registry,
///   so a store closed and opened again keeps its records until the process ends (or
///   ``removeStore(in:)``). Nothing is written to disk: there is no durability at all, and
///   another process opening the same directory sees a different, empty store (not
///   multi-process; the suite's multi-process cases do not apply).
/// - `busyTimeout` bounds the wait for the write lock (then `.busy`); `durable` and
///   `initialSize` are ignored. Opening with `create: false` where there is no store throws
///   `.notFound`.
struct ToyStorageBackend: StorageBackend {
    /// Every store of this process, by standardized directory path.
    private static let stores = Mutex<[String: ToyStore]>([:])

    var name: String { "toy" }

    func open(directory: String, options: StorageOptions) throws -> any Storage {
        let key = Self.key(for: directory)
        let store = Self.stores.withLock { stores -> ToyStore? in
            if let existing = stores[key] { return existing }
            guard options.create else { return nil }
            let created = ToyStore()
            stores[key] = created
            return created
        }
        guard let store else {
            throw PeerSyncError(.notFound, "no toy store in this directory and `create` is false", context: ["directory": directory])
        }
        return ToyStorage(store: store, directory: directory, busyTimeout: options.busyTimeout)
    }

    func hasStore(in directory: String) -> Bool {
        Self.stores.withLock { $0[Self.key(for: directory)] != nil }
    }

    /// Forgets the store of `directory` (what deleting its files would be); open handles keep
    /// the old data privately.
    func removeStore(in directory: String) {
        _ = Self.stores.withLock { $0.removeValue(forKey: Self.key(for: directory)) }
    }

    private static func key(for directory: String) -> String {
        URL(fileURLWithPath: directory).standardizedFileURL.path
    }
}

/// The data of one store, shared by its handles: the last committed snapshot, and the lock
/// that lets one write transaction run at a time.
final class ToyStore: Sendable {
    /// Swapped whole by each commit; a reader copies it (O(1), copy-on-write) and keeps its copy.
    let committed = Mutex(ToySnapshot())
    /// The write lock: a semaphore, because a writer waits for it with a timeout
    /// (`busyTimeout`) on a thread of the caller's (the `Storage` protocol is blocking).
    let writeLock = DispatchSemaphore(value: 1)
}

/// Every keyspace of a store at one moment.
struct ToySnapshot: Sendable {
    struct Keyspace: Sendable {
        var records: [ByteKey: Record] = [:]
        var lastSequence: UInt64 = 0
    }
    var keyspaces: [ByteKey: Keyspace] = [:]
}

/// A key or keyspace name as its UTF-8 bytes. Not `String`: two strings Swift calls equal
/// (`"é"` precomposed and `"e\u{301}"`, canonically equivalent) are two different keys in the
/// storage contract — the conformance suite's `keyspaceNames` and `utf8KeyOrdering` cases caught
/// exactly that in this toy's first version.
struct ByteKey: Hashable, Sendable, Comparable {
    let bytes: [UInt8]

    init(_ string: String) { bytes = Array(string.utf8) }

    var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Byte order, the order the storage contract sorts keys in.
    static func < (a: ByteKey, b: ByteKey) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
}

/// One handle on a toy store. Thread-safe: `read` runs its closure on a private copy of the
/// last commit, without any lock held; `write` holds the store's write lock for the whole
/// transaction and publishes its copy on return.
final class ToyStorage: Storage {
    let directory: String
    var backendName: String { "toy" }
    private let store: ToyStore
    private let busyTimeout: Duration
    private let isClosed = Mutex(false)

    init(store: ToyStore, directory: String, busyTimeout: Duration) {
        self.store = store
        self.directory = directory
        self.busyTimeout = busyTimeout
    }

    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try checkOpen()
        return try body(ToyTransaction(store.committed.withLock { $0 }))
    }

    @discardableResult
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try checkOpen()
        let seconds = Double(busyTimeout.components.seconds) + Double(busyTimeout.components.attoseconds) * 1e-18
        guard store.writeLock.wait(timeout: .now() + seconds) == .success else {
            throw PeerSyncError(.busy, "another write transaction held the toy store longer than busyTimeout",
                                context: ["directory": directory])
        }
        defer { store.writeLock.signal() }
        let transaction = ToyTransaction(store.committed.withLock { $0 })
        let result = try body(transaction)           // a throw leaves `committed` as it was: rollback
        let snapshot = transaction.snapshot
        store.committed.withLock { $0 = snapshot }  // commit
        return result
    }

    func close() throws {
        isClosed.withLock { $0 = true }
    }

    private func checkOpen() throws {
        if isClosed.withLock({ $0 }) { throw PeerSyncError(.closed, "the toy store is closed", context: ["directory": directory]) }
    }
}

/// A transaction's view: its own copy of the snapshot, changed in place by a writer.
/// Used by one thread at a time (the one running the transaction's closure).
final class ToyTransaction: StorageWriter {
    private(set) var snapshot: ToySnapshot

    init(_ snapshot: ToySnapshot) { self.snapshot = snapshot }

    // MARK: Reading

    func keyspaces() throws -> [String] {
        snapshot.keyspaces.keys.sorted().map(\.string)
    }

    func get(_ key: String, in keyspace: String) throws -> Record? {
        snapshot.keyspaces[ByteKey(keyspace)]?.records[ByteKey(key)]
    }

    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        guard let records = snapshot.keyspaces[ByteKey(keyspace)]?.records else { return }
        var keys = records.keys.filter { range.contains($0.string) }.sorted()
        if descending { keys.reverse() }
        for key in keys where try !body(records[key]!) { return }
    }

    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        guard let records = snapshot.keyspaces[ByteKey(keyspace)]?.records else { return }
        for record in records.values.filter({ $0.sequence > since }).sorted(by: { $0.sequence < $1.sequence }) {
            guard try body(record) else { return }
        }
    }

    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        guard let records = snapshot.keyspaces[ByteKey(keyspace)]?.records else { return 0 }
        return includeDeleted ? records.count : records.values.filter { !$0.flags.contains(.deleted) }.count
    }

    func lastSequence(in keyspace: String) throws -> UInt64 {
        snapshot.keyspaces[ByteKey(keyspace)]?.lastSequence ?? 0
    }

    // MARK: Writing

    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        let name = ByteKey(keyspace)
        var stored = record
        stored.sequence = (snapshot.keyspaces[name]?.lastSequence ?? 0) + 1
        snapshot.keyspaces[name, default: .init()].records[ByteKey(record.key)] = stored
        snapshot.keyspaces[name]!.lastSequence = stored.sequence
        return stored.sequence
    }

    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        guard var record = snapshot.keyspaces[ByteKey(keyspace)]?.records[ByteKey(key)] else { return nil }
        record.flags.insert(.deleted)
        record.body = []
        return try put(record, in: keyspace)
    }

    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool {
        snapshot.keyspaces[ByteKey(keyspace)]?.records.removeValue(forKey: ByteKey(key)) != nil
    }

    func dropKeyspace(_ keyspace: String) throws {
        snapshot.keyspaces[ByteKey(keyspace)] = nil
    }
}
