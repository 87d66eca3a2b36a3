import PeerSyncCore
internal import CSQLite

/// The same work as a storage benchmark, done with plain sqlite3 calls and nothing else, so
/// `peersync bench storage` can print PeerSync's rate beside raw SQLite's.
///
/// It uses one table `kv(key TEXT PRIMARY KEY, body BLOB)` (a rowid table plus a unique key
/// index: the same two b-trees a PeerSync keyspace has), the same pragmas as
/// ``SQLiteStorageBackend`` (WAL, `synchronous` FULL or NORMAL), one prepared statement per
/// operation and `SQLITE_STATIC` bindings.
///
/// Not thread-safe: use one instance from one thread. Every method blocks.
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
    private let connection: SQLiteConnection

    /// Opens or creates the database file at `path` and its `kv` table.
    public init(path: String, durable: Bool = true) throws {
        self.path = path
        connection = try SQLiteConnection(path: path, flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                          busyTimeoutMilliseconds: 10_000)
        _ = try connection.queryFirstText("PRAGMA journal_mode=WAL")
        try connection.execute("PRAGMA synchronous=\(durable ? "FULL" : "NORMAL")")
        try connection.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, body BLOB NOT NULL)")
    }

    /// Inserts (or replaces) `count` records made by `record(i)` for `i` in `0..<count`, in
    /// one transaction.
    public func insert(count: Int, _ record: (Int) throws -> (key: String, body: [UInt8])) throws {
        let insert = try connection.cached("INSERT OR REPLACE INTO kv (key, body) VALUES (?1, ?2)")
        try connection.execute("BEGIN IMMEDIATE")
        do {
            for i in 0..<max(0, count) {
                var (key, body) = try record(i)
                try key.withUTF8 { keyBytes in
                    try body.withUnsafeBytes { bodyBytes in
                        defer { insert.reset() }
                        try insert.bindTextNoCopy(1, keyBytes)
                        try insert.bindBlobNoCopy(2, bodyBytes)
                        _ = try insert.step()
                    }
                }
            }
            try connection.execute("COMMIT")
        } catch {
            connection.rollbackAfterFailure(forgetKeyspaces: false)
            throw error
        }
    }

    /// Looks up every key (in one read transaction), copying each body found as the storage
    /// does. Returns how many keys were found.
    public func pointReads(_ keys: [String]) throws -> Int {
        let select = try connection.cached("SELECT body FROM kv WHERE key = ?1")
        try connection.execute("BEGIN")
        defer { connection.rollbackAfterFailure(forgetKeyspaces: false) }
        var found = 0
        for key in keys {
            var key = key
            try key.withUTF8 { keyBytes in
                defer { select.reset() }
                try select.bindTextNoCopy(1, keyBytes)
                if try select.step() {
                    withExtendedLifetime(select.bytes(0)) { found += 1 }
                }
            }
        }
        return found
    }

    /// Reads every record in key order (in one read transaction), copying keys and bodies as
    /// the storage does. Returns the number of records and the total body size.
    public func scan() throws -> (records: Int, bytes: Int) {
        let select = try connection.cached("SELECT key, body FROM kv ORDER BY key")
        try connection.execute("BEGIN")
        defer { connection.rollbackAfterFailure(forgetKeyspaces: false) }
        defer { select.reset() }
        var records = 0
        var bytes = 0
        while try select.step() {
            let key = select.text(0)
            let body = select.bytes(1)
            withExtendedLifetime(key) { records += 1 }
            bytes += body.count
        }
        return (records, bytes)
    }

    /// Closes the database. Later calls throw. Idempotent.
    public func close() throws {
        try connection.close()
    }
}
