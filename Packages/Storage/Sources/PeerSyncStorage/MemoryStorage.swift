import Foundation
import PeerSyncCore

/// The in-memory storage backend (name `"memory"`): for tests, caches and throw-away
/// databases.
///
/// - Data lives in this process only. Stores opened with the same `directory` string (after
///   standardizing the path) share their data through a process-wide registry, so a store
///   that is closed and opened again still holds its records until
///   ``removeStore(in:)`` is called or the process ends. Nothing is written to disk and the
///   directory is never created.
/// - It is **not** multi-process: another process opening the same directory sees a
///   different, empty store. The conformance suite skips its multi-process cases for it
///   (`StorageConformanceSuite.Capabilities(multiProcess: false)`).
/// - Snapshots are O(1): every keyspace is a persistent (structurally shared) sorted tree,
///   so a reader keeps the tree it started with while writers build new versions.
/// - ``StorageOptions/durable`` and ``StorageOptions/initialSize`` are ignored;
///   ``StorageOptions/busyTimeout`` bounds the wait for the write lock (then `.busy`).
/// - Opening with `create: false` a directory that has no store throws `.notFound`.
public struct MemoryStorageBackend: StorageBackend {
    /// The in-memory backend. Stores live in the process, one per directory path, until
    /// ``removeStore(in:)``.
    public init() {}

    public var name: String { "memory" }

    public func open(directory: String, options: StorageOptions = StorageOptions()) throws -> any Storage {
        try openMemory(directory: directory, options: options)
    }

    /// Like ``open(directory:options:)`` but returns the concrete type.
    public func openMemory(directory: String, options: StorageOptions = StorageOptions()) throws -> MemoryStorage {
        let key = try MemoryStoreRegistry.key(for: directory)
        let shared: SharedMemoryStore? = MemoryStoreRegistry.stores.withLock { stores in
            if let existing = stores[key] { return existing }
            guard options.create else { return nil }
            let created = SharedMemoryStore()
            stores[key] = created
            return created
        }
        guard let shared else {
            throw PeerSyncError(.notFound, "no in-memory store in this directory and `create` is false",
                                context: ["directory": directory, "backend": name])
        }
        return MemoryStorage(shared: shared, directory: directory, options: options)
    }

    public func hasStore(in directory: String) -> Bool {
        guard let key = try? MemoryStoreRegistry.key(for: directory) else { return false }
        return MemoryStoreRegistry.stores.withLock { $0[key] != nil }
    }

    /// Forgets the data of the store in `directory` (the in-memory equivalent of deleting
    /// its files). Handles that are still open keep working on the old data privately; the
    /// next ``open(directory:options:)`` starts empty. Does nothing if there is no store.
    public func removeStore(in directory: String) {
        guard let key = try? MemoryStoreRegistry.key(for: directory) else { return }
        _ = MemoryStoreRegistry.stores.withLock { $0.removeValue(forKey: key) }
    }
}

/// Process-wide map from standardized directory path to shared store data.
enum MemoryStoreRegistry {
    static let stores = LockedValue<[String: SharedMemoryStore]>([:])

    static func key(for directory: String) throws -> String {
        guard !directory.isEmpty else {
            throw PeerSyncError(.invalidArgument, "the store directory must not be empty")
        }
        return URL(fileURLWithPath: directory).standardizedFileURL.path
    }
}

/// The data shared by every handle opened on one directory.
final class SharedMemoryStore: Sendable {
    /// The last committed state. Readers copy it (O(1)); the one writer replaces it on commit.
    let committed = LockedValue(StoreData())
    /// Serializes writers.
    let writeLock = StorageWriterLock()
}

/// An open in-memory store. Thread-safe; every method runs on the calling thread and only
/// blocks to wait for another writer (bounded by ``StorageOptions/busyTimeout``).
public final class MemoryStorage: Storage {
    public var backendName: String { "memory" }
    public let directory: String
    /// The options the store was opened with (only ``StorageOptions/busyTimeout`` matters here).
    public let options: StorageOptions
    private let shared: SharedMemoryStore
    private let isClosed = LockedValue(false)

    init(shared: SharedMemoryStore, directory: String, options: StorageOptions) {
        self.shared = shared
        self.directory = directory
        self.options = options
    }

    private func checkOpen() throws {
        if isClosed.withLock({ $0 }) {
            throw PeerSyncError(.closed, "the store is closed", context: ["directory": directory])
        }
    }

    /// See ``Storage/read(_:)``: `body` sees the tree committed when it started. Throws `.closed`
    /// after ``close()``.
    public func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try checkOpen()
        let snapshot = shared.committed.withLock { $0 }
        return try body(MemoryReader(data: snapshot))
    }

    /// See ``Storage/readWithoutWaiting(_:)``: always runs `body` (a read takes the committed
    /// tree's root under a mutex held only for that copy, and never waits for a writer).
    public func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        try read(body)
    }

    /// See ``Storage/write(_:)``: waits up to ``StorageOptions/busyTimeout`` for the write lock
    /// (then `.busy`). Throws `.closed` after ``close()``.
    @discardableResult
    public func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try checkOpen()
        try shared.writeLock.acquire(timeout: options.busyTimeout)
        defer { shared.writeLock.release() }
        try checkOpen()
        let writer = MemoryWriter(data: shared.committed.withLock { $0 })
        defer { writer.isFinished = true }
        let result = try body(writer)
        let newData = writer.data
        shared.committed.withLock { $0 = newData }
        return result
    }

    public func close() throws {
        isClosed.withLock { $0 = true }
    }
}

// MARK: - Data

/// A record in the sequence index (immutable, shared by snapshots as the trees' nodes are).
final class RecordBox: Sendable {
    let record: Record
    init(_ record: Record) { self.record = record }
}

/// One keyspace: records by key, the sequence index, the sequence counter.
struct KeyspaceData: Sendable {
    var records = PersistentSortedMap<ByteKey, Record>()
    /// Latest sequence of every record → the record. Replaced and purged sequences are
    /// removed. The record itself (boxed: one reference to copy when a path of the tree is
    /// copied), not its key, so that a walk by sequence (the changes feeds, the change
    /// notifier) does not look every key up again in `records` (~1.5 % of a replication's CPU).
    var bySequence = PersistentSortedMap<UInt64, RecordBox>()
    var lastSequence: UInt64 = 0
    var deletedCount = 0
}

/// A whole store: keyspaces by name (byte order, so `keyspaces()` comes out sorted).
struct StoreData: Sendable {
    var keyspaces = PersistentSortedMap<ByteKey, KeyspaceData>()
    /// Ordered key sets (``OrderedKeySets``): name → key → value, apart from the keyspaces.
    var keySets = PersistentSortedMap<ByteKey, PersistentSortedMap<ByteKey, [UInt8]>>()

    // MARK: Reading

    func keyspaceNames() -> [String] {
        var names: [String] = []
        names.reserveCapacity(keyspaces.count)
        keyspaces.forEach(from: nil, to: nil, upperInclusive: false, descending: false) { key, _ in
            names.append(key.string)
            return true
        }
        return names
    }

    func get(_ key: String, in keyspace: String) -> Record? {
        keyspaces.entry(keyspace)?.value.records.entry(key)?.value
    }

    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) rethrows {
        guard let ks = keyspaces.entry(keyspace)?.value else { return }
        let lower = range.lowerBound.map(ByteKey.init)
        let upper = range.upperBound.map(ByteKey.init)
        if let lower, let upper, upper < lower { return }
        try ks.records.forEach(from: lower, to: upper, upperInclusive: range.includesUpperBound,
                               descending: descending) { _, record in try body(record) }
    }

    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) rethrows {
        guard let ks = keyspaces.entry(keyspace)?.value, since < UInt64.max else { return }
        try ks.bySequence.forEach(from: since + 1, to: nil, upperInclusive: false, descending: false) { _, box in
            try body(box.record)
        }
    }

    func count(in keyspace: String, includeDeleted: Bool) -> Int {
        guard let ks = keyspaces.entry(keyspace)?.value else { return 0 }
        return includeDeleted ? ks.records.count : ks.records.count - ks.deletedCount
    }

    func lastSequence(in keyspace: String) -> UInt64 {
        keyspaces.entry(keyspace)?.value.lastSequence ?? 0
    }

    // MARK: Writing

    mutating func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        let existing = keyspaces.entry(keyspace)
        let name = existing?.key ?? ByteKey(keyspace)
        var ks = existing?.value ?? KeyspaceData()
        guard ks.lastSequence < UInt64.max else {
            throw PeerSyncError(.storage, "sequence numbers exhausted", context: ["keyspace": keyspace])
        }
        let key = ByteKey(record.key)
        var stored = record
        stored.sequence = ks.lastSequence + 1
        ks.lastSequence = stored.sequence
        if let old = ks.records.set(stored, for: key) {
            ks.bySequence.remove(old.sequence)
            if old.flags.contains(.deleted) { ks.deletedCount -= 1 }
        }
        if stored.flags.contains(.deleted) { ks.deletedCount += 1 }
        ks.bySequence.set(RecordBox(stored), for: stored.sequence)
        keyspaces.set(ks, for: name)
        return stored.sequence
    }

    mutating func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        guard var record = get(key, in: keyspace) else { return nil }
        record.flags.insert(.deleted)
        record.body = []
        return try put(record, in: keyspace)
    }

    mutating func purge(_ key: String, in keyspace: String) -> Bool {
        let name = ByteKey(keyspace)
        guard var ks = keyspaces[name], let old = ks.records.remove(ByteKey(key)) else { return false }
        ks.bySequence.remove(old.sequence)
        if old.flags.contains(.deleted) { ks.deletedCount -= 1 }
        keyspaces.set(ks, for: name)
        return true
    }

    mutating func dropKeyspace(_ keyspace: String) {
        keyspaces.remove(ByteKey(keyspace))
    }

    // MARK: Ordered key sets

    func entry(_ key: String, inKeySet keySet: String) -> [UInt8]? {
        keySets.entry(keySet)?.value.entry(key)?.value
    }

    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (String, [UInt8]) throws -> Bool) rethrows {
        guard let set = keySets[ByteKey(keySet)] else { return }
        let lower = range.lowerBound.map(ByteKey.init)
        let upper = range.upperBound.map(ByteKey.init)
        if let lower, let upper, upper < lower { return }
        try set.forEach(from: lower, to: upper, upperInclusive: range.includesUpperBound,
                        descending: descending) { key, value in try body(key.string, value) }
    }

    mutating func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) {
        let name = ByteKey(keySet)
        var set = keySets[name] ?? PersistentSortedMap()
        set.set(value, for: ByteKey(key))
        keySets.set(set, for: name)
    }

    mutating func removeEntry(_ key: String, inKeySet keySet: String) -> Bool {
        let name = ByteKey(keySet)
        guard var set = keySets[name], set.remove(ByteKey(key)) != nil else { return false }
        keySets.set(set, for: name)
        return true
    }

    mutating func dropKeySet(_ keySet: String) {
        keySets.remove(ByteKey(keySet))
    }
}

// MARK: - Reader and writer

struct MemoryReader: StorageReader {
    let data: StoreData

    func keyspaces() throws -> [String] { data.keyspaceNames() }
    func get(_ key: String, in keyspace: String) throws -> Record? { data.get(key, in: keyspace) }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws {
        try data.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try data.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        data.count(in: keyspace, includeDeleted: includeDeleted)
    }
    func lastSequence(in keyspace: String) throws -> UInt64 { data.lastSequence(in: keyspace) }
    func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]? { data.entry(key, inKeySet: keySet) }
    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws {
        try data.enumerateEntries(inKeySet: keySet, range: range, descending: descending, body)
    }
}

/// The writer of one transaction: works on a private copy of the store, which becomes the
/// committed state when the transaction's closure returns, and is dropped when it throws.
final class MemoryWriter: StorageWriter {
    var data: StoreData
    /// Set when the transaction ended; a writer that escaped its closure then throws.
    var isFinished = false

    init(data: StoreData) { self.data = data }

    private func checkActive() throws {
        if isFinished {
            throw PeerSyncError(.closed, "the write transaction has ended; a writer must not escape its closure")
        }
    }

    func keyspaces() throws -> [String] { try checkActive(); return data.keyspaceNames() }
    func get(_ key: String, in keyspace: String) throws -> Record? {
        try checkActive()
        return data.get(key, in: keyspace)
    }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws {
        try checkActive()
        // Iterate over a copy (O(1)), so that `body` may write without disturbing the walk.
        let snapshot = data
        try snapshot.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try checkActive()
        let snapshot = data
        try snapshot.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try checkActive()
        return data.count(in: keyspace, includeDeleted: includeDeleted)
    }
    func lastSequence(in keyspace: String) throws -> UInt64 {
        try checkActive()
        return data.lastSequence(in: keyspace)
    }

    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        try checkActive()
        return try data.put(record, in: keyspace)
    }
    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        try checkActive()
        return try data.delete(key, in: keyspace)
    }
    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool {
        try checkActive()
        return data.purge(key, in: keyspace)
    }
    func dropKeyspace(_ keyspace: String) throws {
        try checkActive()
        data.dropKeyspace(keyspace)
    }

    func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]? {
        try checkActive()
        return data.entry(key, inKeySet: keySet)
    }
    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws {
        try checkActive()
        let snapshot = data   // O(1) copy: `body` may write
        try snapshot.enumerateEntries(inKeySet: keySet, range: range, descending: descending, body)
    }
    func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) throws {
        try checkActive()
        data.putEntry(key, value: value, inKeySet: keySet)
    }
    @discardableResult
    func removeEntry(_ key: String, inKeySet keySet: String) throws -> Bool {
        try checkActive()
        return data.removeEntry(key, inKeySet: keySet)
    }
    func dropKeySet(_ keySet: String) throws {
        try checkActive()
        data.dropKeySet(keySet)
    }
}
