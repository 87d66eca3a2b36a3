import PeerSyncCore
internal import CSQLite

/// One prepared statement (`sqlite3_stmt`), finalized in `deinit`.
///
/// Thread safety: not synchronized. A statement belongs to one ``SQLiteConnection`` (it sits in
/// that connection's caches) and is only used by the thread that currently owns the connection,
/// under the same discipline as the connection itself.
final class SQLiteStatement {
    let handle: OpaquePointer
    let sql: String
    /// True while an enumeration is stepping it and calling user code; a re-entrant caller then
    /// prepares a temporary statement instead of resetting this one under its feet.
    var inUse = false

    init(db: OpaquePointer, sql: String, persistent: Bool = true) throws {
        var stmt: OpaquePointer?
        let flags: UInt32 = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        try sqliteCheck(sqlite3_prepare_v3(db, sql, -1, flags, &stmt, nil), db: db, sql: sql)
        guard let stmt else {
            throw PeerSyncError(.internalError, "SQL text holds no statement", context: ["sql": sql])
        }
        self.handle = stmt
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    var db: OpaquePointer? { sqlite3_db_handle(handle) }

    // MARK: Binding. Indexes are 1-based, as in SQLite.

    @inline(__always)
    func bind(_ index: Int32, _ value: Int64) throws {
        let rc = sqlite3_bind_int64(handle, index, value)
        if rc != SQLITE_OK { throw sqliteError(rc, db: db, sql: sql) }
    }

    /// Binds UTF-8 text WITHOUT copying it (`SQLITE_STATIC`): the caller keeps `bytes` alive
    /// until ``reset()`` (which clears the bindings) has run.
    @inline(__always)
    func bindTextNoCopy(_ index: Int32, _ bytes: UnsafeBufferPointer<UInt8>) throws {
        let rc: Int32
        if let base = bytes.baseAddress, bytes.count > 0 {
            rc = sqlite3_bind_text64(handle, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
                                     UInt64(bytes.count), peersync_sqlite_static(), UInt8(SQLITE_UTF8))
        } else {
            rc = sqlite3_bind_text64(handle, index, "", 0, peersync_sqlite_transient(), UInt8(SQLITE_UTF8))
        }
        if rc != SQLITE_OK { throw sqliteError(rc, db: db, sql: sql) }
    }

    /// Binds a string, copying it (`SQLITE_TRANSIENT`): for cold paths.
    func bindText(_ index: Int32, _ value: String) throws {
        var value = value
        try value.withUTF8 { bytes in
            let rc: Int32
            if let base = bytes.baseAddress, bytes.count > 0 {
                rc = sqlite3_bind_text64(handle, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self),
                                         UInt64(bytes.count), peersync_sqlite_transient(), UInt8(SQLITE_UTF8))
            } else {
                rc = sqlite3_bind_text64(handle, index, "", 0, peersync_sqlite_transient(), UInt8(SQLITE_UTF8))
            }
            if rc != SQLITE_OK { throw sqliteError(rc, db: db, sql: sql) }
        }
    }

    /// Binds a blob WITHOUT copying it (`SQLITE_STATIC`); an empty buffer binds an empty
    /// (non-NULL) blob. The caller keeps `bytes` alive until ``reset()`` has run.
    @inline(__always)
    func bindBlobNoCopy(_ index: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        let rc: Int32
        if let base = bytes.baseAddress, bytes.count > 0 {
            rc = sqlite3_bind_blob64(handle, index, base, UInt64(bytes.count), peersync_sqlite_static())
        } else {
            rc = sqlite3_bind_zeroblob(handle, index, 0)
        }
        if rc != SQLITE_OK { throw sqliteError(rc, db: db, sql: sql) }
    }

    // MARK: Stepping

    /// Runs one step: `true` when a row is available, `false` when done.
    @inline(__always)
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw sqliteError(rc, db: db, sql: sql)
    }

    /// Resets the statement and clears its bindings (so no pointer bound with
    /// `SQLITE_STATIC` outlives the caller's buffer). The result code of `sqlite3_reset`
    /// repeats the last step's error, which `step()` already reported, so it is ignored.
    @inline(__always)
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    // MARK: Columns (0-based). Values read from the file are never trusted: no traps.

    @inline(__always)
    func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

    @inline(__always)
    func uint64(_ column: Int32) -> UInt64 { UInt64(bitPattern: sqlite3_column_int64(handle, column)) }

    @inline(__always)
    func bytes(_ column: Int32) -> [UInt8] {
        guard let base = sqlite3_column_blob(handle, column) else { return [] }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0 else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: base, count: count))
    }

    @inline(__always)
    func text(_ column: Int32) -> String {
        guard let base = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0 else { return "" }
        return String(decoding: UnsafeBufferPointer(start: base, count: count), as: UTF8.self)
    }

    /// Number of body bytes of a blob column, without copying them.
    @inline(__always)
    func byteCount(_ column: Int32) -> Int {
        _ = sqlite3_column_blob(handle, column)
        return Int(sqlite3_column_bytes(handle, column))
    }
}

/// One `sqlite3` connection with its statement cache and its cache of keyspace tables.
///
/// Thread safety: NOT internally synchronized (opened with `SQLITE_OPEN_NOMUTEX`), hence
/// `@unchecked Sendable`. Exactly one thread uses a connection at a time: ``SQLiteStorage``'s
/// writer connection only while holding `SQLiteStorage.writeLock`; a reader connection only
/// while it is checked out of `SQLiteStorage.readerPool` (that mutex hands each idle connection
/// to one caller).
final class SQLiteConnection: @unchecked Sendable {
    let db: OpaquePointer
    private var isOpen = true
    private var statements: [String: SQLiteStatement] = [:]

    // Keyspace state, used by SQLiteTransaction (see there).
    /// Keyspace tables known to this connection, valid while `schemaVersion` is current.
    var tables: [KeyspaceName: KeyspaceTable] = [:]
    /// Ordered key sets' tables known to this connection, valid while `schemaVersion` is current.
    var keySets: [KeyspaceName: KeySetTable] = [:]
    /// Whether the store has the `peersync_keysets` catalog (nil: not looked up since the
    /// schema last changed).
    var hasKeySetCatalog: Bool?
    /// `PRAGMA schema_version` when `tables` was last validated; -1 = unknown.
    var schemaVersion: Int64 = -1
    /// Incremented at the start of every transaction on this connection.
    var transactionSerial: UInt64 = 0
    /// Enumerations currently calling user code on this connection.
    var activeEnumerations = 0

    /// Opens `path`. `flags` are `SQLITE_OPEN_*` flags; `SQLITE_OPEN_NOMUTEX` is always added.
    init(path: String, flags: Int32, busyTimeoutMilliseconds: Int32) throws {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let error = sqliteError(rc, db: handle, sql: nil).with("path", path)
            sqlite3_close_v2(handle)  // frees the handle SQLite allocates even on failure
            throw error
        }
        self.db = handle
        sqlite3_extended_result_codes(handle, 1)
        setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
    }

    deinit {
        if isOpen {
            statements.removeAll()
            forgetTables()
            sqlite3_close_v2(db)
        }
    }

    /// Finalizes every cached statement and closes the connection. Idempotent.
    func close() throws {
        guard isOpen else { return }
        statements.removeAll()
        forgetTables()
        isOpen = false
        // close_v2 never leaves the handle half-open: with a statement still alive (none is,
        // once the caches are cleared) it becomes a zombie freed with that statement.
        try sqliteCheck(sqlite3_close_v2(db), db: nil, sql: nil)
    }

    /// Forgets the cached keyspace and key set tables (the schema may have changed).
    func forgetTables() {
        tables.removeAll()
        keySets.removeAll()
        hasKeySetCatalog = nil
    }

    private func checkOpen() throws {
        guard isOpen else { throw PeerSyncError(.closed, "the SQLite connection is closed") }
    }

    func setBusyTimeout(milliseconds: Int32) {
        sqlite3_busy_timeout(db, milliseconds)  // always SQLITE_OK
    }

    /// Runs SQL text that returns no rows (may hold several statements).
    func execute(_ sql: String) throws {
        try checkOpen()
        try sqliteCheck(sqlite3_exec(db, sql, nil, nil, nil), db: db, sql: sql)
    }

    /// A prepared statement for `sql`, cached for the connection's lifetime. Use for statements
    /// that do not call user code while stepping.
    func cached(_ sql: String) throws -> SQLiteStatement {
        if let statement = statements[sql] { return statement }
        try checkOpen()
        let statement = try SQLiteStatement(db: db, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Runs a cached single-row query and returns column 0 of its first row as an integer.
    func queryInteger(_ sql: String) throws -> Int64? {
        let statement = try cached(sql)
        defer { statement.reset() }
        return try statement.step() ? statement.int64(0) : nil
    }

    /// The first column of every row, as text.
    func queryTexts(_ sql: String) throws -> [String] {
        let statement = try cached(sql)
        defer { statement.reset() }
        var result: [String] = []
        while try statement.step() { result.append(statement.text(0)) }
        return result
    }

    /// Runs a one-off query (not cached) and returns column 0 of its first row as text.
    func queryFirstText(_ sql: String) throws -> String? {
        try checkOpen()
        let statement = try SQLiteStatement(db: db, sql: sql, persistent: false)
        defer { statement.reset() }
        return try statement.step() ? statement.text(0) : nil
    }

    // MARK: Transactions

    /// Starts a transaction (`BEGIN IMMEDIATE` for a writer, `BEGIN` + a first read for a
    /// reader, which pins the snapshot now) and validates the cached keyspace tables against
    /// the schema this transaction sees.
    func beginTransaction(immediate: Bool) throws {
        let begin = try cached(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        defer { begin.reset() }
        _ = try begin.step()
        transactionSerial &+= 1
        // Keyspace create/drop runs CREATE/DROP TABLE, which bumps the schema version: if it
        // moved (another connection or process), the cached name -> table mapping may be stale.
        let version = try queryInteger("PRAGMA schema_version") ?? 0
        if version != schemaVersion {
            forgetTables()
            schemaVersion = version
        }
    }

    func commit() throws {
        let commit = try cached("COMMIT")
        defer { commit.reset() }
        _ = try commit.step()
    }

    /// Rolls back the open transaction, if any, after a failure. The caller is already
    /// throwing the original error, which wins; if the rollback fails too, the connection
    /// stays inside a transaction: `isAutocommit` is then false, and the storage discards
    /// (reader) or retries the rollback on (writer) such a connection before reusing it.
    func rollbackAfterFailure(forgetKeyspaces: Bool) {
        if !isAutocommit {
            do { try execute("ROLLBACK") } catch { /* the original error is reported */ }
        }
        if forgetKeyspaces {
            forgetTables()
            schemaVersion = -1
        }
    }

    var changes: Int { Int(sqlite3_changes(db)) }
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(db) }
    /// False while a transaction is open.
    var isAutocommit: Bool { sqlite3_get_autocommit(db) != 0 }
}
