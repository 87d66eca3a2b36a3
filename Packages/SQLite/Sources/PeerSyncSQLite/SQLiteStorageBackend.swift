import Foundation
import PeerSyncCore
import PeerSyncStorage
internal import CSQLite

/// The SQLite storage backend (name `"sqlite"`): one store is the file
/// `<directory>/db.sqlite3` (plus SQLite's `-wal` and `-shm` files while it is open), in WAL
/// mode, with one table per keyspace.
///
/// ```swift
/// let storage = try SQLiteStorageBackend().open(directory: "/tmp/mydb", options: StorageOptions())
/// try storage.write { try $0.put(Record(key: "doc1", body: Array("{}".utf8)), in: "docs") }
/// ```
///
/// Durability: `options.durable` selects `PRAGMA synchronous=FULL` (every commit is fsynced
/// before `write` returns) or `NORMAL` (a power loss may lose the last commits, never corrupt
/// the file). `options.busyTimeout` bounds every wait for a lock held by another thread or
/// process (`.busy` past it). `options.initialSize` is ignored.
///
/// Opening a file that is not a SQLite database, a truncated database or a SQLite database of
/// some other application throws `.corrupt`; so does any later read that hits a damaged page.
/// Open with `options.create == false` throws `.notFound` if there is no store.
public struct SQLiteStorageBackend: StorageBackend {
    /// The name of the database file inside the store's directory.
    public static let fileName = "db.sqlite3"

    public let name = "sqlite"

    /// The SQLite backend. It holds no state; each store is its own `db.sqlite3`.
    public init() {}

    /// Opens (creating it if needed and allowed) the store in `directory`. Blocks: call from a
    /// thread you own. Throws `.corrupt`, `.notFound`, `.io`, `.busy` or `.storage`.
    public func open(directory: String, options: StorageOptions) throws -> any Storage {
        try SQLiteStorage(directory: directory, options: options)
    }

    /// Whether `directory` holds `db.sqlite3`.
    public func hasStore(in directory: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: Self.databasePath(in: directory), isDirectory: &isDirectory)
            && !isDirectory.boolValue
    }

    static func databasePath(in directory: String) -> String {
        URL(fileURLWithPath: directory).appendingPathComponent(fileName).path
    }

    /// Checks the store in `directory` for damage, for `peersync check`: SQLite's
    /// `PRAGMA integrity_check` (or the faster `quick_check`, which skips index-content
    /// checks), then PeerSync's own invariants (the file is a PeerSync store, every keyspace
    /// has its table).
    ///
    /// Returns one line per problem found; an empty array means the store is healthy. Reads
    /// only (the store may be open elsewhere; it waits up to 10 s for locks). Throws `.notFound`
    /// when there is no store, and `.corrupt` when the file cannot be read as a database at all
    /// (not a database, damaged header or schema, truncated).
    /// Blocking; time proportional to the file size.
    public func checkIntegrity(directory: String, quick: Bool = false) throws -> [String] {
        let path = Self.databasePath(in: directory)
        guard hasStore(in: directory) else {
            throw PeerSyncError(.notFound, "no SQLite store in this directory", context: ["path": path])
        }
        let connection = try SQLiteConnection(path: path, flags: SQLITE_OPEN_READWRITE, busyTimeoutMilliseconds: 10_000)
        defer { do { try connection.close() } catch {} }
        try connection.execute("PRAGMA query_only=1")
        try connection.beginTransaction(immediate: false)
        defer { connection.rollbackAfterFailure(forgetKeyspaces: false) }  // ends the read transaction

        var problems: [String] = []
        let check = try connection.cached(quick ? "PRAGMA quick_check" : "PRAGMA integrity_check")
        do {
            defer { check.reset() }
            while try check.step() { problems.append(check.text(0)) }
            if problems == ["ok"] { problems = [] }
        } catch let error as PeerSyncError where error.code == .corrupt {
            // The check itself hit damage it cannot walk past: report it with what it found.
            problems.append("integrity check stopped: \(error.message)")
            return problems
        }

        let applicationID = try connection.queryInteger("PRAGMA application_id") ?? 0
        guard applicationID == SQLiteSchema.applicationID else {
            problems.append("not a PeerSync store: application_id is \(applicationID), expected \(SQLiteSchema.applicationID)")
            return problems
        }
        let hasMetadata = try connection.queryInteger(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'peersync_keyspaces'") ?? 0
        guard hasMetadata > 0 else {
            problems.append("the keyspace metadata table peersync_keyspaces is missing")
            return problems
        }
        let keyspaces = try connection.cached("SELECT id, name FROM peersync_keyspaces ORDER BY id")
        var entries: [(id: Int64, name: String)] = []
        do {
            defer { keyspaces.reset() }
            while try keyspaces.step() { entries.append((keyspaces.int64(0), keyspaces.text(1))) }
        }
        let tableExists = try connection.cached("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1")
        for entry in entries {
            let table = "kv_\(entry.id)"
            defer { tableExists.reset() }
            try tableExists.bindText(1, table)
            if !(try tableExists.step() && tableExists.int64(0) > 0) {
                problems.append("keyspace \"\(entry.name)\": its table \(table) is missing")
            }
        }
        return problems
    }
}

extension SQLiteStorageBackend: StorageBackendIntegrityChecking {
    /// The full check (`PRAGMA integrity_check` plus PeerSync's own), for `Database.checkIntegrity()`.
    public func checkIntegrity(directory: String) throws -> [String] {
        try checkIntegrity(directory: directory, quick: false)
    }
}
