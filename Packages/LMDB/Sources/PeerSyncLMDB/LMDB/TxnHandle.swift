internal import CLMDB
import PeerSyncCore

/// One named (or the unnamed main) database of an environment: an `MDB_dbi`, valid for the
/// environment's life once the transaction that opened it committed. Its name labels errors.
struct DatabaseHandle: Sendable {
    let dbi: MDB_dbi
    /// The database's name, `"main"` for the unnamed one.
    let name: String
}

/// Owns one `MDB_txn*`, begun by ``EnvHandle/beginTransaction(readOnly:)``; aborted in `deinit`
/// unless it ended before (``commit(pendingBytes:)``, ``abort()``). Its cursors ask it whether
/// it is still alive: LMDB frees a write transaction's cursors when the transaction ends.
///
/// Bytes returned by ``get(_:key:context:)`` point into the map and stay valid until the next
/// write in this transaction or its end; bytes given as keys or values are only read during the
/// call. Errors: every method throws the ``PeerSyncError`` that ``lmdbError(_:_:_:)`` builds
/// (operation `"mdb_<call>(<database>)"`, the directory and the caller's `context`); a call
/// after the transaction ended throws `.internalError`.
///
/// Not thread-safe: used by one thread at a time, like the ``LMDBTransaction`` that owns it.
final class TxnHandle {
    let isWrite: Bool
    private let directory: String
    private var pointer: OpaquePointer?

    init(_ pointer: OpaquePointer, isWrite: Bool, directory: String) {
        self.pointer = pointer
        self.isWrite = isWrite
        self.directory = directory
    }

    deinit { abort() }

    /// Whether the transaction has not ended yet.
    var isLive: Bool { pointer != nil }

    /// `mdb_txn_abort`. Idempotent; a no-op after ``commit(pendingBytes:)``.
    func abort() {
        if let txn = pointer {
            pointer = nil
            mdb_txn_abort(txn)
        }
    }

    /// `mdb_txn_commit`, which ends the transaction whatever the outcome. A write transaction's
    /// failure is built by ``lmdbWriteError(_:_:directory:pendingBytes:_:)`` with `pendingBytes`
    /// (`MDB_MAP_FULL` throws the internal code `.lmdbMapFull`); committing a read-only
    /// transaction keeps the database handles it opened for the environment.
    func commit(pendingBytes: Int = 0) throws(PeerSyncError) {
        let txn = try live("mdb_txn_commit", [:])
        pointer = nil
        let rc = mdb_txn_commit(txn)
        if rc == MDB_SUCCESS { return }
        if isWrite {
            throw lmdbWriteError(rc, "mdb_txn_commit", directory: directory, pendingBytes: pendingBytes,
                                 ["directory": directory])
        }
        throw lmdbError(rc, "mdb_txn_commit (read)", ["directory": directory])
    }

    /// The C handle, for the wrapper's calls; throws `.internalError` once the transaction ended.
    @inline(__always)
    func live(_ operation: @autoclosure () -> String,
              _ context: @autoclosure () -> [String: String]) throws(PeerSyncError) -> OpaquePointer {
        guard let pointer else { throw lmdbError(MDB_BAD_TXN, operation(), self.context(context())) }
        return pointer
    }

    /// The error context: the directory plus the caller's keys.
    func context(_ extra: [String: String]) -> [String: String] {
        var context = extra
        context["directory"] = directory
        return context
    }

    // MARK: Databases

    /// Opens database `name` (`nil`: the unnamed main database) with `mdb_dbi_open`; nil when
    /// it does not exist.
    func openDatabase(_ name: String?) throws(PeerSyncError) -> DatabaseHandle? {
        try openDatabase(name, flags: 0)
    }

    /// Opens database `name`, creating it if it does not exist (`mdb_dbi_open` with
    /// `MDB_CREATE`; write transactions only).
    func createDatabase(_ name: String) throws(PeerSyncError) -> DatabaseHandle {
        guard let database = try openDatabase(name, flags: UInt32(MDB_CREATE)) else {
            throw lmdbError(MDB_NOTFOUND, "mdb_dbi_open(\(name))", context([:]))
        }
        return database
    }

    private func openDatabase(_ name: String?, flags: UInt32) throws(PeerSyncError) -> DatabaseHandle? {
        let label = name ?? "main"
        var dbi: MDB_dbi = 0
        let rc = mdb_dbi_open(try live("mdb_dbi_open(\(label))", [:]), name, flags, &dbi)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_dbi_open(\(label))", context([:]))
        return DatabaseHandle(dbi: dbi, name: label)
    }

    /// The number of entries of `database` (`mdb_stat`).
    func entryCount(_ database: DatabaseHandle) throws(PeerSyncError) -> Int {
        var stat = MDB_stat()
        try check(mdb_stat(try live("mdb_stat(\(database.name))", [:]), database.dbi, &stat),
                  "mdb_stat(\(database.name))", context([:]))
        return stat.ms_entries
    }

    // MARK: Reading and writing by key

    /// The value stored under `key` (`mdb_get`), nil when there is none.
    @inline(__always)
    func get(_ database: DatabaseHandle, key: UnsafeRawBufferPointer,
             context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> UnsafeRawBufferPointer? {
        var keyVal = MDB_val(key)
        var dataVal = MDB_val()
        let rc = mdb_get(try live("mdb_get(\(database.name))", context()), database.dbi, &keyVal, &dataVal)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_get(\(database.name))", self.context(context()))
        return dataVal.bytes
    }

    /// ``get(_:key:context:)`` for a key held in an array (cold paths).
    func get(_ database: DatabaseHandle, key: [UInt8],
             context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> UnsafeRawBufferPointer? {
        let found = key.withUnsafeBytes { bytes in
            Result { () throws(PeerSyncError) in try get(database, key: bytes, context: context()) }
        }
        return try found.get()
    }

    /// Stores a copy of `value` under `key` (`mdb_put`, replacing what was there).
    func put(_ database: DatabaseHandle, key: [UInt8], value: [UInt8],
             context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) {
        let txn = try live("mdb_put(\(database.name))", context())
        let rc = key.withUnsafeBytes { keyBytes in
            value.withUnsafeBytes { valueBytes in
                var keyVal = MDB_val(keyBytes)
                var dataVal = MDB_val(valueBytes)
                return mdb_put(txn, database.dbi, &keyVal, &dataVal, 0)
            }
        }
        try check(rc, "mdb_put(\(database.name))", self.context(context()))
    }

    /// Makes room for `size` bytes under `key` (`mdb_put` with `MDB_RESERVE`) and returns it for
    /// the caller to fill before the next write in this transaction.
    func reserve(_ database: DatabaseHandle, key: UnsafeRawBufferPointer, size: Int,
                 context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> UnsafeMutableRawBufferPointer {
        var keyVal = MDB_val(key)
        var dataVal = MDB_val(mv_size: size, mv_data: nil)
        try check(mdb_put(try live("mdb_put(\(database.name))", context()), database.dbi, &keyVal, &dataVal,
                          UInt32(MDB_RESERVE)),
                  "mdb_put(\(database.name))", self.context(context()))
        return UnsafeMutableRawBufferPointer(start: dataVal.mv_data, count: size)
    }

    /// Deletes `key` (`mdb_del`); false when it was not there.
    func delete(_ database: DatabaseHandle, key: UnsafeRawBufferPointer,
                context: @autoclosure () -> [String: String] = [:]) throws(PeerSyncError) -> Bool {
        var keyVal = MDB_val(key)
        let rc = mdb_del(try live("mdb_del(\(database.name))", context()), database.dbi, &keyVal, nil)
        if rc == MDB_NOTFOUND { return false }
        try check(rc, "mdb_del(\(database.name))", self.context(context()))
        return true
    }
}

extension MDB_val {
    /// A value pointing at `bytes` (LMDB only reads keys and copied values).
    @inline(__always)
    init(_ bytes: UnsafeRawBufferPointer) {
        self.init(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
    }

    /// The bytes this value points to (valid only until the next write in the transaction).
    @inline(__always)
    var bytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: mv_data, count: mv_data == nil ? 0 : mv_size)
    }
}
