import Foundation
import PeerSyncCore
import PeerSyncStorage
import Synchronization
internal import CSQLite
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An open SQLite store: one writer connection and a small pool of reader connections on
/// `<directory>/db.sqlite3`, in WAL mode.
///
/// - Reads: `BEGIN` + reads + `COMMIT` on a reader connection checked out of the pool, so a
///   read transaction sees one snapshot and never waits for the writer (WAL).
/// - Writes: `BEGIN IMMEDIATE` on the writer connection, serialized in this process by
///   `writeLock` (waited for at most `busyTimeout`) and across processes by SQLite's WAL write
///   lock (`sqlite3_busy_timeout` with what is left of `busyTimeout`). Either wait expiring
///   throws `.busy`. The closure throwing rolls everything back.
///
/// Thread safety (`@unchecked Sendable`): `writer` is only touched while holding `writeLock`;
/// idle reader connections live in the `readerPool` mutex, and a checked-out reader is used by
/// the one thread that checked it out; `closed` is an atomic.
final class SQLiteStorage: Storage, @unchecked Sendable {
    let backendName = "sqlite"
    let directory: String
    let path: String
    private let options: StorageOptions
    private let busyTimeoutMilliseconds: Int32

    /// Serializes write transactions (and close) within this process.
    /// A nested `write` (or `close` inside `write`) on one thread is an error, not a self-deadlock.
    private let writeLock = StorageWriterLock()
    /// Protected by `writeLock`; nil once closed.
    private var writer: SQLiteConnection?
    private let closed = Atomic<Bool>(false)

    private struct ReaderPool {
        var idle: [SQLiteConnection] = []
        var closed = false
    }
    private let readerPool = LockedValue(ReaderPool())
    /// Idle reader connections kept open; more are opened on demand (never blocks) and closed
    /// when they come back to a full pool.
    private static let maxIdleReaders = 4

    init(directory: String, options: StorageOptions) throws {
        self.directory = directory
        self.path = SQLiteStorageBackend.databasePath(in: directory)
        self.options = options
        self.busyTimeoutMilliseconds = milliseconds(options.busyTimeout)

        try Self.prepareDirectory(directory, databasePath: path, create: options.create)
        var flags = SQLITE_OPEN_READWRITE
        if options.create { flags |= SQLITE_OPEN_CREATE }
        let writer = try SQLiteConnection(path: path, flags: flags, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        // Setting the journal mode reads page 1: a file that is not a database (SQLITE_NOTADB)
        // or whose header claims more pages than the file holds (truncated: SQLITE_CORRUPT)
        // fails here. The schema check below catches a damaged schema and foreign databases.
        let mode = try Self.retryingBusy(within: options.busyTimeout) { try writer.queryFirstText("PRAGMA journal_mode=WAL") }
        guard mode?.lowercased() == "wal" else {
            throw PeerSyncError(.storage, "SQLite could not switch the database to WAL mode",
                                context: ["path": path, "journalMode": mode ?? "?"])
        }
        try writer.execute("PRAGMA synchronous=\(options.durable ? "FULL" : "NORMAL")")
        // After a checkpoint, shrink a WAL that grew past 64 MiB (e.g. by a bulk import).
        try writer.execute("PRAGMA journal_size_limit=67108864")
        try Self.prepareSchema(writer, path: path, create: options.create)
        self.writer = writer
    }

    // MARK: Opening

    /// `body`, tried again while it fails with `.busy` until `timeout` has passed. For steps
    /// that SQLite answers `SQLITE_BUSY` at once, without its busy handler: switching a new
    /// file to WAL while another process opens the same file (both want the exclusive lock;
    /// SQLite refuses one rather than deadlock).
    static func retryingBusy<T>(within timeout: Duration, _ body: () throws -> T) throws -> T {
        let deadline = ContinuousClock.now + timeout
        while true {
            do { return try body() } catch let error as PeerSyncError where error.code == .busy && ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.005)
            }
        }
    }

    private static func prepareDirectory(_ directory: String, databasePath: String, create: Bool) throws {
        guard !directory.isEmpty else {
            throw PeerSyncError(.invalidArgument, "the store directory must not be empty")
        }
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        if files.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw PeerSyncError(.io, "not a directory", context: ["path": directory])
            }
        } else {
            guard create else {
                throw PeerSyncError(.notFound, "no database directory", context: ["path": directory])
            }
            do {
                try files.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw PeerSyncError(.io, "cannot create the database directory: \(error.localizedDescription)",
                                    context: ["path": directory])
            }
        }
        if !create && !files.fileExists(atPath: databasePath) {
            throw PeerSyncError(.notFound, "no SQLite store in this directory", context: ["path": databasePath])
        }
    }

    /// Verifies an existing store (a cheap check: the header, the schema and the metadata
    /// table are read) or creates the schema in a new/empty file.
    static func prepareSchema(_ connection: SQLiteConnection, path: String, create: Bool) throws {
        let tableCount = try inTransaction(connection, immediate: false) { () -> Int64 in
            let tableCount = try connection.queryInteger("SELECT count(*) FROM sqlite_master") ?? 0
            if tableCount > 0 { try verifyExistingSchema(connection, path: path) }
            return tableCount
        }
        guard tableCount == 0 else { return }
        guard create else {
            throw PeerSyncError(.notFound, "the file holds no PeerSync store", context: ["path": path])
        }
        try inTransaction(connection, immediate: true) {
            // Another process may have created it between the two transactions.
            if (try connection.queryInteger("SELECT count(*) FROM sqlite_master") ?? 0) > 0 {
                try verifyExistingSchema(connection, path: path)
                return
            }
            try connection.execute("PRAGMA application_id=\(SQLiteSchema.applicationID)")
            try connection.execute("PRAGMA user_version=\(SQLiteSchema.version)")
            try connection.execute(SQLiteSchema.createMetadata)
        }
    }

    private static func verifyExistingSchema(_ connection: SQLiteConnection, path: String) throws {
        let applicationID = try connection.queryInteger("PRAGMA application_id") ?? 0
        guard applicationID == SQLiteSchema.applicationID else {
            throw PeerSyncError(.corrupt, "the file is a SQLite database but not a PeerSync store",
                                context: ["path": path, "applicationID": "\(applicationID)"])
        }
        let version = try connection.queryInteger("PRAGMA user_version") ?? 0
        guard version == SQLiteSchema.version else {
            throw PeerSyncError(.storage, "unsupported PeerSync SQLite schema version \(version) (this build reads \(SQLiteSchema.version))",
                                context: ["path": path])
        }
        _ = try connection.queryInteger("SELECT count(*) FROM peersync_keyspaces")
    }

    private static func inTransaction<R>(_ connection: SQLiteConnection, immediate: Bool,
                                         _ body: () throws -> R) throws -> R {
        try connection.execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let result = try body()
            try connection.execute("COMMIT")
            return result
        } catch {
            connection.rollbackAfterFailure(forgetKeyspaces: true)
            throw error
        }
    }

    private func openReader() throws -> SQLiteConnection {
        let reader = try SQLiteConnection(path: path, flags: SQLITE_OPEN_READWRITE,
                                          busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        // A reader never writes; query_only turns a bug that tried into an error.
        try reader.execute("PRAGMA query_only=1; PRAGMA synchronous=\(options.durable ? "FULL" : "NORMAL")")
        return reader
    }

    private func checkOpen() throws {
        if closed.load(ordering: .acquiring) {
            throw PeerSyncError(.closed, "the store is closed", context: ["path": path])
        }
    }

    // MARK: Storage

    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try checkOpen()
        let reader = try readerPool.withLock { $0.idle.popLast() } ?? openReader()
        defer { checkIn(reader) }
        do {
            try reader.beginTransaction(immediate: false)
        } catch {
            reader.rollbackAfterFailure(forgetKeyspaces: false)
            throw error
        }
        return try runBegunRead(on: reader, body)
    }

    /// Runs `body` in the read transaction just begun on `reader`, then ends it: commits, or
    /// rolls back and rethrows what `body` (or the commit) threw.
    private func runBegunRead<R>(on reader: SQLiteConnection, _ body: (any StorageReader) throws -> R) throws -> R {
        let transaction = SQLiteTransaction(connection: reader, writable: false)
        do {
            let result = try body(transaction)
            transaction.invalidate()
            try reader.commit()
            return result
        } catch {
            transaction.invalidate()
            reader.rollbackAfterFailure(forgetKeyspaces: false)
            throw error
        }
    }

    /// See ``Storage/readWithoutWaiting(_:)``: on an idle reader connection only (none is
    /// opened here: that is file I/O), whose busy handler is switched off while the
    /// transaction takes its snapshot (`BEGIN` and the first read, which takes the WAL read
    /// lock), so a lock held elsewhere — WAL recovery, a connection in exclusive locking mode —
    /// gives `SQLITE_BUSY` at once instead of a sleep: then nil, and `body` was not called.
    /// Once the snapshot is had, a WAL reader takes no further lock, so `body` never meets the
    /// busy handler.
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        try checkOpen()
        guard let reader = readerPool.withLock({ $0.idle.popLast() }) else { return nil }
        defer { checkIn(reader) }
        reader.setBusyTimeout(milliseconds: 0)
        do {
            try reader.beginTransaction(immediate: false)
        } catch let error as PeerSyncError where error.code == .busy {
            reader.rollbackAfterFailure(forgetKeyspaces: false)
            reader.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
            return nil
        } catch {
            reader.rollbackAfterFailure(forgetKeyspaces: false)
            reader.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
            throw error
        }
        reader.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        return try runBegunRead(on: reader, body)
    }

    private func checkIn(_ reader: SQLiteConnection) {
        let healthy = reader.isAutocommit
        let surplus: SQLiteConnection? = readerPool.withLock { pool in
            if pool.closed || !healthy || pool.idle.count >= Self.maxIdleReaders { return reader }
            pool.idle.append(reader)
            return nil
        }
        // Closed outside the mutex: closing the last connection checkpoints (I/O). An error
        // here (none is expected: every statement is finalized first) leaves nothing to undo.
        do { try surplus?.close() } catch {}
    }

    @discardableResult
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try checkOpen()
        let start = ContinuousClock.now
        try writeLock.acquire(timeout: options.busyTimeout, context: ["path": path])
        defer { writeLock.release() }
        guard let writer else {
            throw PeerSyncError(.closed, "the store is closed", context: ["path": path])
        }

        if !writer.isAutocommit { writer.rollbackAfterFailure(forgetKeyspaces: true) }
        // The in-process wait used part of the busy timeout; SQLite's lock gets the rest.
        let remaining = options.busyTimeout - (ContinuousClock.now - start)
        writer.setBusyTimeout(milliseconds: max(1, milliseconds(remaining)))
        let transaction = SQLiteTransaction(connection: writer, writable: true)
        do {
            try writer.beginTransaction(immediate: true)
            let result = try body(transaction)
            transaction.invalidate()
            try transaction.prepareCommit()
            try writer.commit()
            return result
        } catch {
            transaction.invalidate()
            writer.rollbackAfterFailure(forgetKeyspaces: true)
            throw error
        }
    }

    /// The writer connection's value of `PRAGMA <name>` (for tests).
    func writerPragma(_ name: String) throws -> String? {
        try writeLock.withLock(timeout: nil) {
            guard let writer else { throw PeerSyncError(.closed, "the store is closed", context: ["path": path]) }
            return try writer.queryFirstText("PRAGMA \(name)")
        }
    }

    func close() throws {
        guard !writeLock.isHeldByCurrentThread else {
            throw PeerSyncError(.storage, "close() called inside a write transaction", context: ["path": path])
        }
        try writeLock.acquire(timeout: nil, context: ["path": path])  // waits for a running write transaction to finish
        defer { writeLock.release() }
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let idle = readerPool.withLock { pool in
            pool.closed = true
            defer { pool.idle = [] }
            return pool.idle
        }
        var firstError: (any Error)?
        for reader in idle {
            do { try reader.close() } catch { firstError = firstError ?? error }
        }
        if let writer {
            self.writer = nil
            do { try writer.close() } catch { firstError = firstError ?? error }
        }
        if let firstError { throw firstError }
    }
}

// MARK: Helpers

/// A duration in whole milliseconds, clamped to `0...Int32.max` (SQLite's busy timeout).
func milliseconds(_ duration: Duration) -> Int32 {
    let (seconds, attoseconds) = duration.components
    if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
    let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    if overflow { return Int32.max }
    return Int32(clamping: ms + attoseconds / 1_000_000_000_000_000)
}

/// A duration in seconds as a `Double` (for `Date`-based waits), never negative.
func seconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return max(0, Double(seconds) + Double(attoseconds) / 1e18)
}
