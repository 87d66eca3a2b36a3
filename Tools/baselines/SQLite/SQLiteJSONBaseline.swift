// Benchmark and test code, not library code (see SQLiteRawBaseline.swift): JSON documents in a
// plain SQLite table, queried with SQLite's own JSON functions. The query differential test
// (Packages/Query/Tests) uses it as its oracle; `peersync bench query` is meant to time the
// hand-written SQLite side of each query with it.

internal import CSQLite
import PeerSyncCore

/// A value SQLite returned.
public enum SQLiteValue: Sendable, Hashable {
    /// SQL NULL.
    case null
    /// An INTEGER.
    case integer(Int64)
    /// A REAL.
    case real(Double)
    /// TEXT.
    case text(String)
    /// A BLOB.
    case blob([UInt8])
}

/// JSON documents in one plain SQLite table, queried with hand-written SQL:
/// `docs(id TEXT PRIMARY KEY, seq INTEGER, rev TEXT, deleted INTEGER, expiration INTEGER,
/// body TEXT)`, `body` holding the document's JSON text.
///
/// Errors: a failed SQLite call throws `.storage` with SQLite's message and the SQL; calls after
/// ``close()`` throw `.closed`. Not thread-safe: use one instance from one thread. Every
/// method blocks.
///
/// ```swift
/// let docs = try SQLiteJSONDocuments(path: ":memory:")
/// try docs.insert([.init(id: "a", sequence: 1, revisionID: "1-x", body: #"{"n":1}"#)])
/// let rows = try docs.query("SELECT id FROM docs WHERE json_extract(body, '$.n') = 1")  // [[.text("a")]]
/// ```
public final class SQLiteJSONDocuments {
    /// One row of the `docs` table.
    public struct Row: Sendable {
        /// The document ID.
        public var id: String
        /// The document's sequence.
        public var sequence: Int64
        /// The current revision ID.
        public var revisionID: String
        /// Whether the document is deleted.
        public var deleted: Bool
        /// Expiration in milliseconds since 1970, nil when none.
        public var expiration: Int64?
        /// The body as JSON text.
        public var body: String

        /// A row; not deleted and without expiration unless given.
        public init(id: String, sequence: Int64, revisionID: String, deleted: Bool = false, expiration: Int64? = nil, body: String) {
            self.id = id
            self.sequence = sequence
            self.revisionID = revisionID
            self.deleted = deleted
            self.expiration = expiration
            self.body = body
        }
    }

    /// The database file (`:memory:` for none).
    public let path: String
    private var db: OpaquePointer?

    /// Opens or creates the database at `path` and its `docs` table. `LIKE` is made
    /// case-sensitive (`PRAGMA case_sensitive_like`), as SQL++'s is.
    public init(path: String) throws {
        self.path = path
        let rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK else {
            let error = failure(rc, "sqlite3_open_v2")
            try? close()
            throw error
        }
        try execute("PRAGMA case_sensitive_like = ON")
        try execute("""
            CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, rev TEXT NOT NULL,
                deleted INTEGER NOT NULL, expiration INTEGER, body TEXT NOT NULL)
            """)
    }

    deinit { try? close() }

    /// SQLite's version string (`sqlite3_libversion`).
    public static var version: String { String(cString: sqlite3_libversion()) }

    /// Runs SQL that returns no rows.
    public func execute(_ sql: String) throws {
        let rc = sqlite3_exec(try connection(), sql, nil, nil, nil)
        if rc != SQLITE_OK { throw failure(rc, sql) }
    }

    /// Inserts (or replaces) rows, in one transaction.
    public func insert(_ rows: [Row]) throws {
        try execute("BEGIN IMMEDIATE")
        do {
            var statement: OpaquePointer?
            let sql = "INSERT OR REPLACE INTO docs (id, seq, rev, deleted, expiration, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            let rc = sqlite3_prepare_v2(try connection(), sql, -1, &statement, nil)
            guard rc == SQLITE_OK, let statement else { throw failure(rc, sql) }
            defer { sqlite3_finalize(statement) }
            for row in rows {
                sqlite3_reset(statement)
                var rc = bind(statement, 1, row.id)
                if rc == SQLITE_OK { rc = sqlite3_bind_int64(statement, 2, row.sequence) }
                if rc == SQLITE_OK { rc = bind(statement, 3, row.revisionID) }
                if rc == SQLITE_OK { rc = sqlite3_bind_int64(statement, 4, row.deleted ? 1 : 0) }
                if rc == SQLITE_OK { rc = row.expiration.map { sqlite3_bind_int64(statement, 5, $0) } ?? sqlite3_bind_null(statement, 5) }
                if rc == SQLITE_OK { rc = bind(statement, 6, row.body) }
                if rc == SQLITE_OK { rc = sqlite3_step(statement) }
                guard rc == SQLITE_DONE else { throw failure(rc, sql) }
            }
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Runs a query and returns every row, each column as SQLite typed it.
    public func query(_ sql: String) throws -> [[SQLiteValue]] {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v2(try connection(), sql, -1, &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw failure(rc, sql) }
        defer { sqlite3_finalize(statement) }
        var rows: [[SQLiteValue]] = []
        let columns = sqlite3_column_count(statement)
        var step = sqlite3_step(statement)
        while step == SQLITE_ROW {
            var row: [SQLiteValue] = []
            for c in 0..<columns {
                switch sqlite3_column_type(statement, c) {
                case SQLITE_INTEGER: row.append(.integer(sqlite3_column_int64(statement, c)))
                case SQLITE_FLOAT: row.append(.real(sqlite3_column_double(statement, c)))
                case SQLITE_TEXT:
                    let count = Int(sqlite3_column_bytes(statement, c))
                    let text = sqlite3_column_text(statement, c).map {
                        String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
                    } ?? ""
                    row.append(.text(text))
                case SQLITE_BLOB:
                    let count = Int(sqlite3_column_bytes(statement, c))
                    let bytes = sqlite3_column_blob(statement, c).map {
                        Array(UnsafeRawBufferPointer(start: $0, count: count))
                    } ?? []
                    row.append(.blob(bytes))
                default: row.append(.null)
                }
            }
            rows.append(row)
            step = sqlite3_step(statement)
        }
        guard step == SQLITE_DONE else { throw failure(step, sql) }
        return rows
    }

    /// Closes the database. Later calls throw `.closed`. Idempotent.
    public func close() throws {
        guard let open = db else { return }
        db = nil
        let rc = sqlite3_close_v2(open)
        if rc != SQLITE_OK { throw failure(rc, "sqlite3_close_v2") }
    }

    private func connection() throws -> OpaquePointer {
        guard let db else { throw PeerSyncError(.closed, "the baseline database is closed", context: ["path": path]) }
        return db
    }

    private func bind(_ statement: OpaquePointer, _ index: Int32, _ text: String) -> Int32 {
        text.withCString { sqlite3_bind_text64(statement, index, $0, UInt64(text.utf8.count), peersync_sqlite_transient(), UInt8(SQLITE_UTF8)) }
    }

    private func failure(_ rc: Int32, _ what: String) -> PeerSyncError {
        let message = db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "SQLite error \(rc)"
        return PeerSyncError(.storage, "\(message)", context: ["path": path, "sqliteCode": "\(rc)", "sql": what])
    }
}
