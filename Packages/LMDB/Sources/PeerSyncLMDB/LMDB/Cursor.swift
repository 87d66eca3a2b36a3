internal import CLMDB
import PeerSyncCore

/// The entry a ``Cursor`` sits on. Both buffers point into the map: valid until the next write
/// in the transaction or its end.
struct CursorEntry {
    let key: UnsafeRawBufferPointer
    let value: UnsafeRawBufferPointer
}

/// Where ``Cursor/move(_:)`` goes.
enum CursorMove {
    case first, last, next, previous
    /// Stays on the current entry (and reads it again).
    case current
}

/// What ``Cursor/reserveNew(key:size:context:)`` found.
enum CursorInsertion {
    /// The key was new: room for the value, to fill before the next write.
    case reserved(UnsafeMutableRawBufferPointer)
    /// The key exists (nothing was written): its stored value; the cursor sits on it.
    case exists(UnsafeRawBufferPointer)
}

/// Owns one `MDB_cursor*` on one database of one transaction, closed in `deinit` (or by
/// ``close()``) unless its write transaction already freed it.
///
/// Errors: every method throws the ``PeerSyncError`` that ``lmdbError(_:_:_:)`` builds
/// (operation `"mdb_cursor_<call>(<database>)"`, the directory and the caller's `context`); a
/// cursor that is not ``isUsable`` any more throws `.internalError` (`MDB_BAD_TXN`). Positioning
/// returns nil past either end (`MDB_NOTFOUND`).
///
/// Not thread-safe: used by the thread that uses its transaction.
final class Cursor {
    private var pointer: OpaquePointer?
    private let transaction: TxnHandle
    private let database: DatabaseHandle

    /// `mdb_cursor_open` on `database` in `transaction`.
    init(_ transaction: TxnHandle, _ database: DatabaseHandle) throws(PeerSyncError) {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(try transaction.live("mdb_cursor_open", [:]), database.dbi, &cursor),
                  "mdb_cursor_open", transaction.context([:]))
        self.pointer = cursor
        self.transaction = transaction
        self.database = database
    }

    deinit { close() }

    /// Whether the cursor is open and its transaction alive.
    var isUsable: Bool { pointer != nil && transaction.isLive }

    /// `mdb_cursor_close`, unless the cursor's write transaction ended (LMDB freed it then; a
    /// read-only transaction's cursor must be closed even after the transaction ended).
    /// Idempotent.
    func close() {
        if let p = pointer {
            if transaction.isLive || !transaction.isWrite { mdb_cursor_close(p) }
            pointer = nil
        }
    }

    @inline(__always)
    private func usable(_ operation: @autoclosure () -> String,
                        _ context: @autoclosure () -> [String: String]) throws(PeerSyncError) -> OpaquePointer {
        guard let p = pointer, transaction.isLive else {
            throw lmdbError(MDB_BAD_TXN, operation(), transaction.context(context()))
        }
        return p
    }

    // MARK: Positioning

    /// `mdb_cursor_get` with `op` (and `key` as input for the operations that take one).
    @inline(__always)
    private func get(_ op: MDB_cursor_op, _ key: inout MDB_val, _ data: inout MDB_val,
                     _ context: @autoclosure () -> [String: String]) throws(PeerSyncError) -> Bool {
        let rc = mdb_cursor_get(try usable("mdb_cursor_get(\(database.name))", context()), &key, &data, op)
        if rc == MDB_NOTFOUND { return false }
        try check(rc, "mdb_cursor_get(\(database.name))", transaction.context(context()))
        return true
    }

    /// Moves the cursor (`mdb_cursor_get`); nil when there is no such entry.
    @inline(__always)
    func move(_ move: CursorMove) throws(PeerSyncError) -> CursorEntry? {
        let op: MDB_cursor_op
        switch move {
        case .first: op = MDB_FIRST
        case .last: op = MDB_LAST
        case .next: op = MDB_NEXT
        case .previous: op = MDB_PREV
        case .current: op = MDB_GET_CURRENT
        }
        var key = MDB_val()
        var data = MDB_val()
        guard try get(op, &key, &data, [:]) else { return nil }
        return CursorEntry(key: key.bytes, value: data.bytes)
    }

    /// Positions the cursor on the first key at or after `key` (`MDB_SET_RANGE`; LMDB accepts
    /// keys up to its key size only); nil when there is none.
    @inline(__always)
    func seek(atOrAfter key: UnsafeRawBufferPointer) throws(PeerSyncError) -> CursorEntry? {
        var keyVal = MDB_val(key)
        var data = MDB_val()
        guard try get(MDB_SET_RANGE, &keyVal, &data, [:]) else { return nil }
        return CursorEntry(key: keyVal.bytes, value: data.bytes)
    }

    /// Positions the cursor on `key` (`MDB_SET`) and returns its value; nil when it does not exist.
    @inline(__always)
    func find(_ key: UnsafeRawBufferPointer,
              context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> UnsafeRawBufferPointer? {
        var keyVal = MDB_val(key)
        var data = MDB_val()
        guard try get(MDB_SET, &keyVal, &data, context()) else { return nil }
        return data.bytes
    }

    // MARK: Writing

    @inline(__always)
    private func put(_ key: UnsafeRawBufferPointer, _ data: inout MDB_val, _ flags: Int32,
                     _ context: @autoclosure () -> [String: String]) throws(PeerSyncError) -> Int32 {
        var keyVal = MDB_val(key)
        return mdb_cursor_put(try usable("mdb_cursor_put(\(database.name))", context()), &keyVal, &data,
                              UInt32(flags))
    }

    /// Makes room for `size` bytes under `key` if the key is new (`MDB_NOOVERWRITE |
    /// MDB_RESERVE`), or returns the value the key already has.
    @inline(__always)
    func reserveNew(key: UnsafeRawBufferPointer, size: Int,
                    context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> CursorInsertion {
        var data = MDB_val(mv_size: size, mv_data: nil)
        let rc = try put(key, &data, MDB_NOOVERWRITE | MDB_RESERVE, context())
        if rc == MDB_KEYEXIST { return .exists(data.bytes) }
        try check(rc, "mdb_cursor_put(\(database.name))", transaction.context(context()))
        return .reserved(UnsafeMutableRawBufferPointer(start: data.mv_data, count: size))
    }

    /// Replaces the value of the entry the cursor sits on (which must be `key`) by room for
    /// `size` bytes (`MDB_CURRENT | MDB_RESERVE`).
    @inline(__always)
    func reserveCurrent(key: UnsafeRawBufferPointer, size: Int,
                        context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError)
        -> UnsafeMutableRawBufferPointer {
        var data = MDB_val(mv_size: size, mv_data: nil)
        try check(try put(key, &data, MDB_CURRENT | MDB_RESERVE, context()), "mdb_cursor_put(\(database.name))",
                  transaction.context(context()))
        return UnsafeMutableRawBufferPointer(start: data.mv_data, count: size)
    }

    /// Makes room for `size` bytes under `key`, appending at the end of the database when `key`
    /// sorts after every key in it (`MDB_APPEND`, which packs pages full), else inserting (or
    /// replacing) it in place.
    @inline(__always)
    func reserveAppending(key: UnsafeRawBufferPointer, size: Int,
                          context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError)
        -> UnsafeMutableRawBufferPointer {
        var data = MDB_val(mv_size: size, mv_data: nil)
        var rc = try put(key, &data, MDB_APPEND | MDB_RESERVE, context())
        if rc == MDB_KEYEXIST {
            data = MDB_val(mv_size: size, mv_data: nil)
            rc = try put(key, &data, MDB_RESERVE, context())
        }
        try check(rc, "mdb_cursor_put(\(database.name))", transaction.context(context()))
        return UnsafeMutableRawBufferPointer(start: data.mv_data, count: size)
    }

    /// Deletes the entry the cursor sits on (`mdb_cursor_del`).
    @inline(__always)
    func deleteCurrent(context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) {
        try check(mdb_cursor_del(try usable("mdb_cursor_del(\(database.name))", context()), 0),
                  "mdb_cursor_del(\(database.name))", transaction.context(context()))
    }
}
