import PeerSyncCore
internal import CSQLite

// The one place where SQLite result codes become `PeerSyncError`s. Every sqlite3_* call whose
// result code can signal failure goes through `sqliteCheck` (or `sqliteError` when the caller
// already knows the call failed).

/// Returns `rc` when it is `SQLITE_OK`, `SQLITE_ROW` or `SQLITE_DONE`; otherwise throws the
/// matching ``PeerSyncError`` (see ``sqliteError(_:db:sql:)``).
@discardableResult
@inline(__always)
func sqliteCheck(_ rc: Int32, db: OpaquePointer?, sql: @autoclosure () -> String? = nil) throws -> Int32 {
    if rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE { return rc }
    throw sqliteError(rc, db: db, sql: sql())
}

/// Builds the error for a failed SQLite call: the code is mapped from the primary result code,
/// the message comes from `sqlite3_errmsg` (or `sqlite3_errstr` without a connection) and the
/// context names the SQLite code, the SQL statement and the database file.
///
/// - `SQLITE_BUSY` → `.busy` (a lock held by another connection/process past the busy timeout)
/// - `SQLITE_CORRUPT`, `SQLITE_NOTADB` → `.corrupt`
/// - `SQLITE_FULL` → `.diskFull` ("disk full: …")
/// - `SQLITE_IOERR`, `SQLITE_CANTOPEN`, `SQLITE_PERM`, `SQLITE_READONLY`,
///   `SQLITE_NOLFS`, `SQLITE_PROTOCOL` → `.io`
/// - `SQLITE_TOOBIG` → `.tooLarge`
/// - `SQLITE_INTERRUPT` → `.cancelled`
/// - `SQLITE_MISUSE`, `SQLITE_RANGE` → `.internalError` (a bug in this module)
/// - anything else → `.storage`
func sqliteError(_ rc: Int32, db: OpaquePointer?, sql: String?) -> PeerSyncError {
    let primary = rc & 0xFF
    let detail: String
    if let db, let cMessage = sqlite3_errmsg(db), sqlite3_errcode(db) != SQLITE_OK {
        detail = String(cString: cMessage)
    } else if let cMessage = sqlite3_errstr(rc) {
        detail = String(cString: cMessage)
    } else {
        detail = "SQLite error \(rc)"
    }
    let code: PeerSyncError.Code
    let message: String
    switch primary {
    case SQLITE_BUSY:
        code = .busy
        message = "the database is locked by another connection or process (busy timeout expired): \(detail)"
    case SQLITE_CORRUPT:
        code = .corrupt
        message = "the database file is corrupt or truncated: \(detail)"
    case SQLITE_NOTADB:
        code = .corrupt
        message = "the file is not a SQLite database (or its header is damaged): \(detail)"
    case SQLITE_FULL:
        code = .diskFull
        message = "disk full: \(detail)"
    case SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_READONLY, SQLITE_NOLFS,
         SQLITE_PROTOCOL:
        code = .io
        message = detail
    case SQLITE_TOOBIG:
        code = .tooLarge
        message = "a key or value is larger than SQLite allows: \(detail)"
    case SQLITE_INTERRUPT:
        code = .cancelled
        message = detail
    case SQLITE_MISUSE, SQLITE_RANGE:
        code = .internalError
        message = "SQLite API misuse (a PeerSync bug): \(detail)"
    default:
        code = .storage
        message = detail
    }
    var context = ["sqliteCode": "\(rc)"]
    if let sql { context["sql"] = sql }
    if let db, let file = sqlite3_db_filename(db, "main") {
        let path = String(cString: file)
        if !path.isEmpty { context["path"] = path }
    }
    return PeerSyncError(code, message, context: context)
}
