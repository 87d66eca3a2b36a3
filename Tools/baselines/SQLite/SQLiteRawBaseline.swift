// Benchmark code, not library code: this target (`PeerSyncSQLiteBaseline`) is no library
// product; `peersync bench` and the SQLite tests use it. By design it is the one place besides
// the `PeerSyncSQLite` wrapper (`SQLiteConnection.swift`, `SQLiteCheck.swift`) that calls
// libsqlite3: it measures SQLite raw, so it makes plain C calls of its own and uses nothing of
// PeerSyncSQLite.

internal import CSQLite
import PeerSyncCore

/// The same work as a storage benchmark, done with plain sqlite3 calls and nothing else, so
/// `peersync bench storage` can print PeerSync's rate beside raw SQLite's.
///
/// It uses one table `kv(key TEXT PRIMARY KEY, body BLOB)` (a rowid table plus a unique key
/// index: the same two b-trees a PeerSync keyspace has), the same pragmas as
/// `SQLiteStorageBackend` (WAL, `synchronous` FULL or NORMAL), one prepared statement per
/// operation and `SQLITE_STATIC` bindings.
///
/// Errors: a failed SQLite call throws `.storage` with SQLite's message and the file's path;
/// calls after ``close()`` throw `.closed`. Not thread-safe: use one instance from one thread.
/// Every method blocks.
///
/// ```swift
/// let raw = try SQLiteRawBaseline(path: "/tmp/bench/raw.sqlite3")
/// let body = [UInt8](repeating: 0x61, count: 1000)
/// try raw.insert(count: 100_000) { i in ("key-\(i)", body) }   // one transaction
/// let found = try raw.pointReads(["key-7", "key-42"])           // 2
/// let (records, bytes) = try raw.scan()                         // in key order
/// ```
public final class SQLiteRawBaseline {
    /// The database file.
    public let path: String
    /// The connection, nil once closed.
    private var db: OpaquePointer?

    /// Opens or creates the database file at `path` and its `kv` table.
    public init(path: String, durable: Bool = true) throws {
        self.path = path
        let rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK else {
            let error = failure(rc, "sqlite3_open_v2")
            try? close()  // SQLite allocates a handle even when opening fails
            throw error
        }
        sqlite3_busy_timeout(db, 10_000)
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA synchronous=\(durable ? "FULL" : "NORMAL")")
        try execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, body BLOB NOT NULL)")
    }

    deinit { try? close() }

    /// Inserts (or replaces) `count` records made by `record(i)` for `i` in `0..<count`, in
    /// one transaction.
    public func insert(count: Int, _ record: (Int) throws -> (key: String, body: [UInt8])) throws {
        try execute("BEGIN IMMEDIATE")
        do {
            try withStatement("INSERT OR REPLACE INTO kv (key, body) VALUES (?1, ?2)") { insert in
                for i in 0..<max(0, count) {
                    var (key, body) = try record(i)
                    let rc = key.withUTF8 { keyBytes in
                        body.withUnsafeBytes { bodyBytes in
                            defer { sqlite3_reset(insert) }
                            var rc = bindText(insert, 1, keyBytes)
                            if rc == SQLITE_OK { rc = bindBlob(insert, 2, bodyBytes) }
                            return rc == SQLITE_OK ? sqlite3_step(insert) : rc
                        }
                    }
                    guard rc == SQLITE_DONE else { throw failure(rc, "INSERT") }
                }
            }
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Looks up every key (in one read transaction), copying each body found as the storage
    /// does. Returns how many keys were found.
    public func pointReads(_ keys: [String]) throws -> Int {
        try readTransaction("SELECT body FROM kv WHERE key = ?1") { select in
            var found = 0
            for var key in keys {
                let rc = key.withUTF8 { keyBytes in
                    let rc = bindText(select, 1, keyBytes)
                    return rc == SQLITE_OK ? sqlite3_step(select) : rc
                }
                defer { sqlite3_reset(select) }
                if rc == SQLITE_ROW {
                    withExtendedLifetime(blob(select, 0)) { found += 1 }
                } else if rc != SQLITE_DONE {
                    throw failure(rc, "SELECT")
                }
            }
            return found
        }
    }

    /// Reads every record in key order (in one read transaction), copying keys and bodies as
    /// the storage does. Returns the number of records and the total body size.
    public func scan() throws -> (records: Int, bytes: Int) {
        try readTransaction("SELECT key, body FROM kv ORDER BY key") { select in
            var records = 0
            var bytes = 0
            var rc = sqlite3_step(select)
            while rc == SQLITE_ROW {
                let key = String(decoding: UnsafeBufferPointer(start: sqlite3_column_text(select, 0),
                                                               count: Int(sqlite3_column_bytes(select, 0))), as: UTF8.self)
                let body = blob(select, 1)
                withExtendedLifetime(key) { records += 1 }
                bytes += body.count
                rc = sqlite3_step(select)
            }
            guard rc == SQLITE_DONE else { throw failure(rc, "SELECT") }
            return (records, bytes)
        }
    }

    /// Closes the database. Later calls throw `.closed`. Idempotent.
    public func close() throws {
        guard let open = db else { return }
        db = nil
        let rc = sqlite3_close_v2(open)
        if rc != SQLITE_OK { throw failure(rc, "sqlite3_close_v2") }
    }

    // MARK: Plain sqlite3 calls

    private func connection() throws -> OpaquePointer {
        guard let db else { throw PeerSyncError(.closed, "the baseline database is closed", context: ["path": path]) }
        return db
    }

    private func execute(_ sql: String) throws {
        let rc = sqlite3_exec(try connection(), sql, nil, nil, nil)
        if rc != SQLITE_OK { throw failure(rc, sql) }
    }

    /// Runs `body` with `sql` prepared, finalizing it afterwards.
    private func withStatement<R>(_ sql: String, _ body: (OpaquePointer) throws -> R) throws -> R {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v2(try connection(), sql, -1, &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw failure(rc, sql) }
        defer { sqlite3_finalize(statement) }
        return try body(statement)
    }

    /// Runs `body` with `sql` prepared inside a read transaction, rolled back afterwards.
    private func readTransaction<R>(_ sql: String, _ body: (OpaquePointer) throws -> R) throws -> R {
        try execute("BEGIN")
        defer { try? execute("ROLLBACK") }
        return try withStatement(sql, body)
    }

    private func failure(_ rc: Int32, _ what: String) -> PeerSyncError {
        let message = db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "SQLite error \(rc)"
        return PeerSyncError(.storage, "\(what): \(message)", context: ["path": path, "sqliteCode": "\(rc)"])
    }
}

/// Binds `bytes` as text without copying them (`SQLITE_STATIC`: the caller keeps them alive
/// until the statement is reset).
private func bindText(_ statement: OpaquePointer, _ index: Int32, _ bytes: UnsafeBufferPointer<UInt8>) -> Int32 {
    guard let base = bytes.baseAddress, bytes.count > 0 else {
        return sqlite3_bind_text64(statement, index, "", 0, peersync_sqlite_transient(), UInt8(SQLITE_UTF8))
    }
    return sqlite3_bind_text64(statement, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
                               UInt64(bytes.count), peersync_sqlite_static(), UInt8(SQLITE_UTF8))
}

/// Binds `bytes` as a blob without copying them (`SQLITE_STATIC`); empty is an empty blob.
private func bindBlob(_ statement: OpaquePointer, _ index: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32 {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return sqlite3_bind_zeroblob(statement, index, 0) }
    return sqlite3_bind_blob64(statement, index, base, UInt64(bytes.count), peersync_sqlite_static())
}

/// A copy of column `column`'s bytes.
private func blob(_ statement: OpaquePointer, _ column: Int32) -> [UInt8] {
    guard let base = sqlite3_column_blob(statement, column) else { return [] }
    return Array(UnsafeRawBufferPointer(start: base, count: Int(sqlite3_column_bytes(statement, column))))
}
