import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// How a ``Database`` is opened (Couchbase Lite's `DatabaseConfiguration`).
public struct DatabaseConfiguration: Sendable {
    /// The parent folder of the database folder `<name>.peersync` (default: the current
    /// directory). Ignored by ``Database/init(path:config:)``.
    public var directory: String
    /// The storage engine. Required: the `PeerSync` umbrella module supplies SQLite by default.
    public var backend: any StorageBackend
    /// How many generations of history each document keeps (default 20); older revisions are
    /// pruned. Leaves are always kept.
    public var maxRevTreeDepth: Int
    /// The largest document body accepted, in bytes of canonical JSON (default 20 MiB).
    /// Larger bodies fail with `.tooLarge`.
    public var maxBodySize: Int
    /// Whether every commit (and every stored blob) is flushed to stable storage before it
    /// returns (default true).
    public var durable: Bool
    /// How often the database looks for changes committed by other processes (or other
    /// `Database` instances) that have the same database open, and for expired documents
    /// (default 50 ms).
    public var changePollInterval: Duration
    /// How long a write waits for another process's transaction (default 10 s) before
    /// failing with `.busy`.
    public var busyTimeout: Duration
    /// The most read transactions that run at once (default 4, at least 1); more reads wait
    /// for one of them to finish. Each runs on a thread of its own (see "Isolation" on
    /// ``Database``). The default matches the reader connections the SQLite backend keeps
    /// open.
    public var maximumReaderCount: Int

    /// A configuration with every setting given; the defaults are the properties' (the current
    /// directory, 20 revisions of tree depth, 20 MiB bodies, durable commits, a 50 ms poll, a
    /// 10 s busy timeout, 4 readers).
    public init(directory: String = FileManager.default.currentDirectoryPath, backend: any StorageBackend,
                maxRevTreeDepth: Int = 20, maxBodySize: Int = 20 * 1024 * 1024, durable: Bool = true,
                changePollInterval: Duration = .milliseconds(50), busyTimeout: Duration = .seconds(10),
                maximumReaderCount: Int = 4) {
        self.directory = directory
        self.backend = backend
        self.maxRevTreeDepth = maxRevTreeDepth
        self.maxBodySize = maxBodySize
        self.durable = durable
        self.changePollInterval = changePollInterval
        self.busyTimeout = busyTimeout
        self.maximumReaderCount = maximumReaderCount
    }
}

/// Maintenance operations (Couchbase Lite's `MaintenanceType`).
public enum MaintenanceType: Sendable, Hashable {
    /// Deletes blobs that no stored revision references (and stale temporary files).
    case compact
    /// Runs ``Database/checkIntegrity()`` and throws `.corrupt` listing the problems found.
    case integrityCheck
}

/// An open database (Couchbase Lite's `Database`): a folder `<name>.peersync/` holding the
/// storage backend's files and `blobs/`, with scopes and collections of JSON documents.
///
/// Isolation — one writer, concurrent readers (GRDB's `DatabasePool`). The database may be
/// used from any task; its `async` methods suspend the caller and never block Swift's
/// cooperative pool, because every storage call runs on threads the database owns:
/// - **Writes** (saves, deletes, purges, ``inBatch(_:)``, revision inserts, collection
///   changes, local-document puts, ``compact()``, expiration sweeps and change polls) run one
///   at a time, in the order they were submitted, on the database's **writer queue**. A write
///   has committed, and listeners have been handed its changes, when its method returns.
/// - **Reads** (document and revision reads, enumerations, the changes feed, counts,
///   ``inReadBatch(_:)``, ``checkIntegrity()``) run on a pool of up to
///   ``DatabaseConfiguration/maximumReaderCount`` reader threads, concurrently with each
///   other and with the writer. Each read sees one **snapshot** of the committed database,
///   taken when it starts: it includes every write whose method returned before the read was
///   called, never a write still in progress, and never blocks the writer nor waits for it.
///   Two reads issued concurrently with a write may each see it or not.
/// - **Short query reads** (the SPI `inShortReadBatch(_:)`, used by a query's runs) run on
///   the calling task's thread instead when the storage can begin them without waiting
///   (`Storage.readWithoutWaiting`): same snapshot rule, no storage call that sleeps or waits
///   for a lock, then a `Task.yield()` (at most one a millisecond per thread); otherwise they
///   run on the reader pool as above.
/// - Methods documented as "no storage access" (e.g. ``defaultCollection()``) return at once.
///
/// Several processes (or several `Database` instances) may open the same folder at once when
/// the backend supports it (SQLite, LMDB); each sees the others' commits and gets change
/// notifications for them. Writes are serialized across them by the storage.
///
/// Cancelling a task that awaits a database operation does not interrupt it: once submitted,
/// an operation runs to completion (or rolls back on error).
///
/// Errors: `PeerSyncError` — `.closed` after ``close()``, `.notFound` for missing
/// documents/collections, `.invalidArgument` / `.invalidDocumentID` / `.tooLarge` for bad
/// input (nothing is changed), plus the backend's `.storage`, `.io`, `.busy`, `.corrupt`.
public final class Database: Sendable, CustomStringConvertible {
    /// The database name (the folder name without `.peersync`).
    public let name: String
    /// The database folder.
    public let path: String
    /// The configuration it was opened with.
    public let config: DatabaseConfiguration

    /// Runs every write transaction, one at a time in submission order, and everything that
    /// must not race one: the timer's change polls and expiration sweeps, ``compact()``,
    /// ``close()``. See "Isolation" above.
    let writerQueue: DispatchQueue
    /// Runs read transactions, several at once.
    let readers: ReaderPool
    /// Reads submitted and not finished yet: entered (under `state`'s lock, while the storage
    /// is open) when a read is submitted, left when it has finished. ``close()`` waits for it.
    let readsInFlight = DispatchGroup()
    /// Runs listener callbacks that were registered without a queue of their own.
    let notificationQueue: DispatchQueue
    let blobStore: BlobStore
    let notifier: ChangeNotifier
    /// Index definitions prepared once per write transaction (see ``IndexUpkeepCache``).
    let indexUpkeep = IndexUpkeepCache()
    let state: LockedValue<OpenState>
    /// State only touched on `writerQueue`.
    private let housekeeping = QueueConfined(Housekeeping())
    /// The revisions this database's replication sessions are fetching (see ``RevisionsInFlight``).
    @_spi(Replication) public let revisionsInFlight = RevisionsInFlight()
    let closedConflicts = LockedValue(0)
    /// How many conflicts this `Database` object has closed (``Collection/closeConflict(docID:winningRevisionID:losingRevisionID:mergedBody:mergedDeleted:)``)
    /// since it was opened. The mesh compares a link again from scratch only after this grew
    /// (two peers can end a burst of concurrent edits with one conflict resolved two ways).
    @_spi(Replication) public var closedConflictCount: Int { closedConflicts.withLock { $0 } }

    struct OpenState {
        // The timer (not `Sendable`) is only created, scheduled and cancelled while holding
        // `state`'s lock or on `writerQueue`.
        var storage: (any Storage)?
        var timer: (any DispatchSourceTimer)?
        /// Set when ``close()`` begins: no new ``ActiveStoppable`` may register.
        var closing = false
        /// Replicators and listeners using the database (see ``addActiveStoppable(_:stop:)``).
        var stoppables: [ObjectIdentifier: ActiveStoppable] = [:]
    }

    struct Housekeeping {
        var nextExpiration: Date?
        var lastExpiryRefresh = Date.distantPast
        var lastPurgeLogTrim = Date.distantPast
    }

    static let log = Logger(.database)
    /// How long purge-log entries are kept for other processes to notice.
    static let purgeLogRetention: TimeInterval = 600

    // MARK: Opening

    /// Opens (creating if needed) the database `name` in `config.directory`, i.e. the folder
    /// `<directory>/<name>.peersync/`. Throws `.invalidArgument` for an invalid name
    /// (empty, containing `/`, longer than 240 bytes).
    public convenience init(name: String, config: DatabaseConfiguration) async throws {
        try Names.validateDatabaseName(name)
        let path = URL(fileURLWithPath: config.directory, isDirectory: true)
            .appendingPathComponent(name + ".peersync", isDirectory: true).path
        try await self.init(opening: path, name: name, config: config)
    }

    /// Opens (creating if needed) the database in exactly the folder `path` (the CLI's
    /// `--db DIR`); `config.directory` is ignored.
    public convenience init(path: String, config: DatabaseConfiguration) async throws {
        let url = URL(fileURLWithPath: path, isDirectory: true).standardizedFileURL
        var name = url.lastPathComponent
        if name.hasSuffix(".peersync") { name = String(name.dropLast(".peersync".count)) }
        if name.isEmpty { name = "database" }
        try await self.init(opening: url.path, name: name, config: config)
    }

    private init(opening path: String, name: String, config: DatabaseConfiguration) async throws {
        let queue = DispatchQueue(label: "peersync.database.\(name).writer")
        let blobStore = BlobStore(directory: URL(fileURLWithPath: path, isDirectory: true)
            .appendingPathComponent("blobs", isDirectory: true), durable: config.durable)
        let storage: any Storage = try await awaitDelivery { deliver in
            queue.async {
                deliver(Result {
                    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                    try blobStore.createDirectories()
                    let options = StorageOptions(create: true, durable: config.durable, busyTimeout: config.busyTimeout)
                    return try config.backend.open(directory: path, options: options)
                }.mapError { error in
                    (error as? PeerSyncError)?.with("path", path)
                        ?? PeerSyncError(.io, "cannot open database: \(error.localizedDescription)", context: ["path": path])
                })
            }
        }.get()
        self.name = name
        self.path = path
        self.config = config
        self.writerQueue = queue
        self.readers = ReaderPool(label: "peersync.database.\(name).readers", width: config.maximumReaderCount)
        self.notificationQueue = DispatchQueue(label: "peersync.database.\(name).notifications")
        self.blobStore = blobStore
        self.notifier = ChangeNotifier()
        self.state = LockedValue(OpenState(storage: storage))
        do {
            try await onWriterQueue { storage in try self.bootstrap(storage) }
        } catch {
            try? await close()
            throw error
        }
        startTimer()
        Database.log.info("opened database \(name) (\(config.backend.name)) at \(path)")
    }

    deinit {
        let (storage, timer) = state.withLock { ($0.storage, $0.timer) }
        timer?.cancel()
        // No read is in flight: every submitted read holds a reference to the database.
        if let storage { writerQueue.async { try? storage.close() } }
    }

    /// Creates the metadata and the default collection on first open, then purges documents
    /// that expired while the database was closed.
    private func bootstrap(_ storage: any Storage) throws {
        let (info, hasDefault) = try storage.read { reader in
            (try reader.get(Meta.infoKey, in: Meta.keyspace),
             try reader.get(CollectionSpec.default.metaKey, in: Meta.keyspace) != nil)
        }
        if let info {
            let version = (try? JSONValue(parsing: info.body))?["format"]?.intValue ?? 0
            guard version >= 1, version <= Meta.formatVersion else {
                throw PeerSyncError(.corrupt, "database format \(version) is not supported (this version reads \(Meta.formatVersion))",
                                    context: ["path": path])
            }
        }
        if info == nil || !hasDefault {
            try storage.write { writer in
                if try writer.get(Meta.infoKey, in: Meta.keyspace) == nil {
                    let body: JSONValue = ["format": .int(Meta.formatVersion)]
                    try writer.put(Record(key: Meta.infoKey, body: body.canonicalData), in: Meta.keyspace)
                }
                if try writer.get(CollectionSpec.default.metaKey, in: Meta.keyspace) == nil {
                    try writer.put(Record(key: CollectionSpec.default.metaKey, body: Array("{}".utf8)), in: Meta.keyspace)
                }
            }
        }
        try sweepExpired(storage, now: Date())
    }

    private func startTimer() {
        let timer = DispatchSource.makeTimerSource(queue: writerQueue)
        let (seconds, attoseconds) = config.changePollInterval.components
        let nanos = max(1_000_000, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
        timer.schedule(deadline: .now() + .nanoseconds(nanos), repeating: .nanoseconds(nanos),
                       leeway: .nanoseconds(max(1_000_000, nanos / 10)))
        timer.setEventHandler { [weak self] in self?.tick() }
        let started = state.withLock { state -> Bool in
            guard state.storage != nil else { return false }
            state.timer = timer
            return true
        }
        if started { timer.resume() }
    }

    public var description: String { "Database(\(name) at \(path))" }

    /// Timer tick on `writerQueue`: deliver changes made elsewhere, purge expired documents.
    private func tick() {
        guard let storage = try? openStorage() else { return }
        notifier.poll(storage, database: self)
        let now = Date()
        do {
            var refresh = false
            var trim = false
            var due = false
            housekeeping.modify { h in
                refresh = now.timeIntervalSince(h.lastExpiryRefresh) >= 1
                trim = now.timeIntervalSince(h.lastPurgeLogTrim) >= 60
                if trim { h.lastPurgeLogTrim = now }
                due = h.nextExpiration.map { $0 <= now } ?? false
            }
            if refresh && !due { try refreshNextExpiration(storage, now: now) }
            if housekeeping.value.nextExpiration.map({ $0 <= now }) ?? false {
                try sweepExpired(storage, now: now)
            }
            if trim {
                let stale = try storage.read { reader in
                    try Database.collectionSpecs(reader).map { spec in
                        (spec, try self.engine(spec).stalePurgeLogEntries(olderThan: Database.purgeLogRetention, reader))
                    }.filter { !$0.1.isEmpty }
                }
                if !stale.isEmpty {
                    try storage.write { writer in
                        for (spec, keys) in stale {
                            for key in keys { try writer.purge(key, in: spec.purgeLogKeyspace) }
                        }
                    }
                }
            }
        } catch {
            Database.log.warning("database \(name): housekeeping failed: \(error)")
        }
    }

    private func refreshNextExpiration(_ storage: any Storage, now: Date) throws {
        let next = try storage.read { reader -> Date? in
            try Database.collectionSpecs(reader).compactMap { try self.engine($0).nextExpiration(reader) }.min()
        }
        housekeeping.modify { h in
            h.nextExpiration = next
            h.lastExpiryRefresh = now
        }
    }

    /// Purges expired documents of every collection, then notifies listeners.
    private func sweepExpired(_ storage: any Storage, now: Date) throws {
        let specs = try storage.read { try Database.collectionSpecs($0) }
        let hasExpired = try storage.read { reader in
            try specs.contains { spec in try self.engine(spec).nextExpiration(reader).map { $0 <= now } ?? false }
        }
        if hasExpired {
            let purged = try storage.write { writer in
                try self.indexUpkeep.transaction {
                    try specs.reduce(0) { count, spec in count + (try self.engine(spec).purgeExpired(now: now, writer)).count }
                }
            }
            Database.log.info("database \(name): purged \(purged) expired document(s)")
            notifier.poll(storage, database: self)
        }
        try refreshNextExpiration(storage, now: now)
    }

    /// Called on `writerQueue` after an expiration was set in this process.
    func noteExpiration(_ date: Date?) {
        guard let date else { return }
        housekeeping.modify { h in
            if h.nextExpiration.map({ date < $0 }) ?? true { h.nextExpiration = date }
        }
    }

    // MARK: Closing and deleting

    /// Closes the database. First, as Couchbase Lite does, it stops the replicators and
    /// listeners using it (everything registered with `addActiveStoppable(_:stop:)`) and
    /// waits until they have stopped — a replicator stopped this way ends `.stopped` without an
    /// error; from then on none can start on it (`.closed`). Then it finishes change streams,
    /// stops timers, waits for the reads and writes submitted before it (they complete
    /// normally) and closes the storage. Reads and writes submitted once it has begun closing
    /// the storage, and every later call on the database or its collections, throw `.closed`.
    /// Idempotent; a concurrent second call also waits for the users to stop, then for the
    /// first call's close of the storage.
    ///
    /// Isolation: runs on the writer queue after the writes submitted before it.
    public func close() async throws {
        await stopActiveStoppables()
        try await awaitDelivery { (deliver: @escaping @Sendable (Result<Void, any Error>) -> Void) in
            writerQueue.async {
                let (storage, timer) = self.state.withLock { state in
                    defer { state.storage = nil; state.timer = nil }
                    return (state.storage, state.timer)
                }
                timer?.cancel()
                self.notifier.finishAll()
                // No read can start any more (the storage is gone from `state`); those in
                // flight finish on their snapshots first. They never need this queue.
                self.readsInFlight.wait()
                deliver(Result { try storage?.close() })
            }
        }.get()
    }

    /// Closes the database (see ``close()``) and deletes its folder with everything in it.
    public func delete() async throws {
        try await close()
        try await Database.removeFolder(path)
        // The in-memory backend keeps its data per directory until told to forget it.
        (config.backend as? MemoryStorageBackend)?.removeStore(in: path)
    }

    /// Whether a database `name` exists in `directory` (its folder exists).
    public static func exists(name: String, directory: String) -> Bool {
        let path = URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent(name + ".peersync").path
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// Deletes the database `name` in `directory` (which must not be open). Does nothing if
    /// it does not exist.
    public static func delete(name: String, directory: String) async throws {
        try Names.validateDatabaseName(name)
        let path = URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent(name + ".peersync").path
        try await removeFolder(path)
    }

    private static func removeFolder(_ path: String) async throws {
        try await BlobIO.run { () throws(PeerSyncError) in
            guard FileManager.default.fileExists(atPath: path) else { return }
            do {
                try FileManager.default.removeItem(atPath: path)
            } catch {
                throw PeerSyncError(.io, "cannot delete database folder: \(error.localizedDescription)", context: ["path": path])
            }
        }
    }

    // MARK: Scopes and collections

    func engine(_ spec: CollectionSpec) -> DocumentEngine {
        DocumentEngine(spec: spec, maxRevTreeDepth: config.maxRevTreeDepth, maxBodySize: config.maxBodySize,
                       blobStore: blobStore, indexUpkeep: indexUpkeep)
    }

    static func collectionSpecs(_ reader: any StorageReader) throws -> [CollectionSpec] {
        var specs: [CollectionSpec] = []
        try reader.enumerate(in: Meta.keyspace, range: .prefix(Meta.collectionPrefix), descending: false) { record in
            let full = record.key.dropFirst(Meta.collectionPrefix.count)
            if let dot = full.firstIndex(of: ".") {
                specs.append(CollectionSpec(scope: String(full[..<dot]), name: String(full[full.index(after: dot)...])))
            }
            return true
        }
        return specs
    }

    func makeCollection(_ spec: CollectionSpec) -> Collection {
        Collection(spec: spec, database: self)
    }

    /// The default collection `_default._default`, which always exists. Throws `.closed` on
    /// a closed database.
    ///
    /// Isolation: no storage access; returns at once.
    public func defaultCollection() throws -> Collection {
        _ = try openStorage()
        return makeCollection(.default)
    }

    /// The default scope `_default`, which always exists. Throws `.closed` on a closed
    /// database.
    ///
    /// Isolation: no storage access; returns at once.
    public func defaultScope() throws -> Scope {
        _ = try openStorage()
        return Scope(name: CollectionSpec.defaultName, database: self)
    }

    /// The collection `name` in `scope` (default `_default`), or nil if it does not exist.
    /// Throws `.invalidArgument` for invalid names.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func collection(name: String, scope: String? = nil) async throws -> Collection? {
        let spec = try Database.spec(name: name, scope: scope)
        let exists = try await read { reader in try reader.get(spec.metaKey, in: Meta.keyspace) != nil }
        return exists ? makeCollection(spec) : nil
    }

    /// Creates the collection (and its scope) if needed and returns it.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func createCollection(name: String, scope: String? = nil) async throws -> Collection {
        let spec = try Database.spec(name: name, scope: scope)
        try await write { writer in
            if try writer.get(spec.metaKey, in: Meta.keyspace) == nil {
                try writer.put(Record(key: spec.metaKey, body: Array("{}".utf8)), in: Meta.keyspace)
            }
        }
        return makeCollection(spec)
    }

    /// The collections of `scope` (default `_default`), sorted by name.
    ///
    /// Isolation: a read.
    public func collections(scope: String? = nil) async throws -> [Collection] {
        let scopeName = scope ?? CollectionSpec.defaultName
        try Names.validate(scopeName, kind: "scope")
        let specs = try await read { try Database.collectionSpecs($0) }
        return specs.filter { $0.scope == scopeName }.sorted { $0.name < $1.name }.map(makeCollection)
    }

    /// Every scope that has at least one collection (always including `_default`), sorted.
    ///
    /// Isolation: a read.
    public func scopes() async throws -> [Scope] {
        let specs = try await read { try Database.collectionSpecs($0) }
        let names = Set(specs.map(\.scope)).union([CollectionSpec.defaultName]).sorted()
        return names.map { Scope(name: $0, database: self) }
    }

    /// The scope `name` if it has collections (`_default` always exists), else nil.
    ///
    /// Isolation: a read.
    public func scope(name: String) async throws -> Scope? {
        try Names.validate(name, kind: "scope")
        if name == CollectionSpec.defaultName { return Scope(name: name, database: self) }
        let specs = try await read { try Database.collectionSpecs($0) }
        return specs.contains { $0.scope == name } ? Scope(name: name, database: self) : nil
    }

    /// Deletes a collection with all its documents. The default collection cannot be deleted
    /// (`.invalidArgument`); a missing one throws `.notFound`.
    ///
    /// Isolation: a write.
    public func deleteCollection(name: String, scope: String? = nil) async throws {
        let spec = try Database.spec(name: name, scope: scope)
        guard spec != .default else {
            throw PeerSyncError(.invalidArgument, "the default collection cannot be deleted")
        }
        try await write { writer in
            guard try writer.purge(spec.metaKey, in: Meta.keyspace) else {
                throw PeerSyncError(.notFound, "collection does not exist").with(spec)
            }
            try IndexMaintenance.dropAll(spec, writer)
            self.indexUpkeep.definitionsChanged()
            for keyspace in spec.allKeyspaces { try writer.dropKeyspace(keyspace) }
        }
    }

    static func spec(name: String, scope: String?) throws(PeerSyncError) -> CollectionSpec {
        let scopeName = scope ?? CollectionSpec.defaultName
        try Names.validate(name, kind: "collection")
        try Names.validate(scopeName, kind: "scope")
        return CollectionSpec(scope: scopeName, name: name)
    }

    // MARK: Batches

    /// Runs `body` in one storage write transaction: the synchronous operations of the
    /// ``DatabaseTransaction`` it receives are committed together when it returns, or all
    /// rolled back when it throws (the error is rethrown). Listeners are notified once, after
    /// the commit.
    ///
    /// Isolation: a write — `body` runs on the writer queue, so every other write waits for
    /// it: keep it short and do not await in it. Reads running meanwhile do not see its
    /// changes; reads issued after it returned do.
    public func inBatch<R: Sendable>(_ body: sending @escaping (DatabaseTransaction) throws -> R) async throws -> R {
        let box = UncheckedBox(body)
        return try await write { writer in
            let transaction = DatabaseTransaction(writer: writer, database: self)
            defer { transaction.invalidate() }
            return try box.value(transaction)
        }
    }

    // MARK: Blobs

    /// Stores a blob's content in the database (streamed in chunks, stored once per digest).
    /// A blob that no document references is deleted by the next ``compact()``.
    ///
    /// Isolation: file I/O on the blob I/O threads, not ordered with reads or writes.
    public func saveBlob(_ blob: Blob) async throws {
        _ = try openStorage()
        let store = blobStore
        try await BlobIO.run { () throws(PeerSyncError) in try store.install(blob) }
    }

    /// The stored blob referenced by `properties` (a `{"@type":"blob","digest":…}`
    /// dictionary), or nil if its content is not in this database. Throws `.invalidArgument`
    /// when `properties` are not a blob reference.
    ///
    /// Isolation: file I/O on the blob I/O threads, not ordered with reads or writes.
    public func getBlob(properties: [String: JSONValue]) async throws -> Blob? {
        _ = try openStorage()
        guard let reference = Blob(stored: properties, store: blobStore) else {
            throw PeerSyncError(.invalidArgument, "not a blob reference (needs @type blob, a sha1 digest and a length)")
        }
        let store = blobStore
        let digest = reference.digest
        let length = try await BlobIO.run { () throws(PeerSyncError) in store.length(ofDigest: digest) }
        guard let length else { return nil }
        return Blob(digest: digest, length: length, contentType: reference.contentType, store: store)
    }

    /// A writer that streams new blob content into the database (e.g. a blob arriving from a
    /// peer). The blob it produces stays in the store, even if unreferenced, while the
    /// returned ``Blob`` object is alive (so a compaction cannot remove it before the
    /// revision that references it is inserted).
    ///
    /// Isolation: file I/O on the blob I/O threads, not ordered with reads or writes.
    public func openBlobWriter() async throws -> BlobWriter {
        _ = try openStorage()
        let store = blobStore
        return try await BlobIO.run { () throws(PeerSyncError) in try BlobWriter(store: store) }
    }

    // MARK: Local documents

    /// A database-wide local (non-replicated) document, or nil.
    ///
    /// Isolation: a read.
    @_spi(Replication)
    public func getLocal(id: String) async throws -> LocalDocument? {
        try await read { try LocalStore(keyspace: Meta.localKeyspace).get(id: id, $0) }
    }

    /// Creates or replaces a local document. With `ifRevision`, throws `.conflict` unless the
    /// stored revision is `ifRevision` (`""` = must not exist yet).
    ///
    /// Isolation: a write.
    @_spi(Replication)
    @discardableResult
    public func putLocal(id: String, json: [String: JSONValue], ifRevision: String? = nil) async throws -> LocalDocument {
        let max = config.maxBodySize
        return try await write { try LocalStore(keyspace: Meta.localKeyspace).put(id: id, properties: json, ifRevision: ifRevision, maxBodySize: max, $0) }
    }

    /// Deletes a local document; `.notFound` if missing, `.conflict` if `ifRevision` differs.
    ///
    /// Isolation: a write.
    @_spi(Replication)
    public func deleteLocal(id: String, ifRevision: String? = nil) async throws {
        try await write { try LocalStore(keyspace: Meta.localKeyspace).delete(id: id, ifRevision: ifRevision, $0) }
    }

    // MARK: Maintenance

    /// Runs a maintenance operation: ``compact()`` (a write) or ``checkIntegrity()`` (a read).
    public func performMaintenance(_ type: MaintenanceType) async throws {
        switch type {
        case .compact:
            try await compact()
        case .integrityCheck:
            let problems = try await checkIntegrity()
            if !problems.isEmpty {
                throw PeerSyncError(.corrupt, "integrity check found \(problems.count) problem(s): "
                                    + problems.prefix(5).joined(separator: "; "), context: ["database": name])
            }
        }
    }

    /// Deletes every stored blob that no kept revision body of any document references
    /// (except blobs pinned by a live ``Blob`` from ``openBlobWriter()``), and temporary blob
    /// files older than an hour.
    ///
    /// Isolation: runs on the writer queue (like a write), so it cannot race this database's
    /// own saves; writes wait for it.
    public func compact() async throws {
        let store = blobStore
        try await onWriterQueue { storage in
            let referenced = try storage.read { reader in try self.referencedBlobDigests(reader) }
            var removed = 0
            for digest in try store.allDigests() where !referenced.contains(digest) && !store.isPinned(digest) {
                try store.delete(digest: digest)
                removed += 1
            }
            store.removeStaleTemporaryFiles(olderThan: 3600)
            Database.log.info("database \(self.name): compaction removed \(removed) blob(s)")
        }
    }

    /// Digests referenced by any kept body of any revision of any document.
    func referencedBlobDigests(_ reader: any StorageReader) throws -> Set<String> {
        var digests = Set<String>()
        for spec in try Database.collectionSpecs(reader) {
            let engine = engine(spec)
            try reader.enumerate(in: spec.documentsKeyspace) { record in
                guard let tree = try? engine.loadTree(record) else {
                    // Unreadable record: keep everything it might reference.
                    if let value = try? JSONValue(parsing: record.body) {
                        DocumentEngine.collectBlobDigests(value, into: &digests)
                    }
                    return true
                }
                for node in tree.nodes {
                    guard let body = node.body, let value = try? JSONValue(parsing: body) else { continue }
                    DocumentEngine.collectBlobDigests(value, into: &digests)
                }
                return true
            }
        }
        return digests
    }
}

/// A value only ever touched on one serial queue (the database's writer queue): `@unchecked
/// Sendable` because that queue, not a lock, serializes every access.
final class QueueConfined<Value>: @unchecked Sendable {
    private var storedValue: Value
    init(_ value: Value) { storedValue = value }
    var value: Value { storedValue }
    func modify<R>(_ body: (inout Value) throws -> R) rethrows -> R { try body(&storedValue) }
}

/// Carries a value whose ownership was transferred (`sending`) across an API that requires
/// `Sendable`: `@unchecked` because the sender gave up every other reference to it.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
