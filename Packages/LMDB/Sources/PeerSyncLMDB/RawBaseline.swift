internal import CLMDB
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// A yardstick for `peersync bench storage`: the same work as a storage benchmark, done with
/// raw LMDB calls into LMDB's plain (unnamed) database — `key → body`, no sequence index, no
/// record header, no journal — so a benchmark can print PeerSync's rate beside the raw rate.
///
/// It uses its own environment in its own `directory` (never a PeerSync store's), opened with
/// `MDB_NOTLS` and a map fixed at `mapSize` (it does not grow: inserting more than fits throws
/// `.tooLarge`). Thread-safe (calls are serialized); every method blocks the calling thread.
///
/// ```swift
/// let raw = try LMDBRawBaseline(directory: tmp + "/raw", durable: false)
/// try raw.insert(records)                       // one write transaction of mdb_put
/// let found = try raw.get(records.map(\.key).shuffled())
/// let (count, bytes) = try raw.scan()
/// raw.close()
/// ```
///
/// `@unchecked Sendable`: the environment handle is used only inside `lock`.
public final class LMDBRawBaseline: @unchecked Sendable {
    public let directory: String
    private let handle: EnvHandle
    private let dbi: MDB_dbi
    private let lock = LockedValue()

    /// Creates (or reopens) a plain LMDB environment in `directory`, created if needed.
    public init(directory: String, mapSize: Int = 1 << 30, durable: Bool = true) throws {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw PeerSyncError(.io, "cannot create the baseline directory: \(error.localizedDescription)",
                                context: ["directory": directory])
        }
        _ = try DataFileCheck.validate(path: directory + "/" + Layout.dataFile)
        let ctx = ["directory": directory]
        handle = try EnvHandle()
        guard let env = handle.pointer else { throw PeerSyncError(.internalError, "mdb_env_create returned no handle") }
        try check(mdb_env_set_mapsize(env, max(mapSize, 1 << 20)), "mdb_env_set_mapsize", ctx)
        var flags = UInt32(MDB_NOTLS)
        if !durable { flags |= UInt32(MDB_NOSYNC) }
        try check(mdb_env_open(env, directory, flags, 0o644), "mdb_env_open", ctx)
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin", ctx)
        var dbi: MDB_dbi = 0
        let rc = mdb_dbi_open(txn, nil, 0, &dbi)
        if rc != MDB_SUCCESS {
            mdb_txn_abort(txn)
            try check(rc, "mdb_dbi_open", ctx)
        }
        try check(mdb_txn_commit(txn), "mdb_txn_commit", ctx)
        self.dbi = dbi
    }

    deinit { close() }

    /// Closes the environment; later calls throw `.closed`. Idempotent.
    public func close() {
        lock.withLock {
            handle.close()
        }
    }

    private func environment() throws(PeerSyncError) -> OpaquePointer {
        guard let env = handle.pointer else {
            throw PeerSyncError(.closed, "the baseline environment is closed", context: ["directory": directory])
        }
        return env
    }

    /// Puts every record's `key → body` with `mdb_put` in one write transaction (its version,
    /// extra, flags and sequence are not stored). Throws `.tooLarge` if the map is too small.
    public func insert(_ records: [Record]) throws {
        try lock.withLock { () throws in
            let env = try environment()
            var txnPtr: OpaquePointer?
            try check(mdb_txn_begin(env, nil, 0, &txnPtr), "mdb_txn_begin", ["directory": directory])
            guard let txn = txnPtr else { throw PeerSyncError(.internalError, "mdb_txn_begin returned no transaction") }
            var committed = false
            defer { if !committed { mdb_txn_abort(txn) } }
            for record in records {
                var key = record.key
                let rc = key.withUTF8 { k in
                    record.body.withUnsafeBytes { b in
                        var kv = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                        var dv = MDB_val(mv_size: b.count, mv_data: UnsafeMutableRawPointer(mutating: b.baseAddress))
                        return mdb_put(txn, dbi, &kv, &dv, 0)
                    }
                }
                if rc == MDB_MAP_FULL {
                    throw PeerSyncError(.tooLarge, "the baseline map is too small; pass a larger mapSize",
                                        context: ["directory": directory])
                }
                try check(rc, "mdb_put", ["directory": directory, "key": record.key])
            }
            committed = true
            let rc = mdb_txn_commit(txn)
            if rc == MDB_MAP_FULL {
                throw PeerSyncError(.tooLarge, "the baseline map is too small; pass a larger mapSize",
                                    context: ["directory": directory])
            }
            try check(rc, "mdb_txn_commit", ["directory": directory])
        }
    }

    /// Looks every key up with `mdb_get` in one read transaction (in the order given, so pass
    /// them shuffled for random access) and returns how many were found. Each found value's
    /// bytes are read (summed), as copying them into a ``Record`` would.
    public func get(_ keys: [String]) throws -> Int {
        return try lock.withLock { () throws in
            let env = try environment()
            var txnPtr: OpaquePointer?
            try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txnPtr), "mdb_txn_begin", ["directory": directory])
            guard let txn = txnPtr else { throw PeerSyncError(.internalError, "mdb_txn_begin returned no transaction") }
            defer { mdb_txn_abort(txn) }
            var found = 0
            for var key in keys {
                var dv = MDB_val()
                let rc = key.withUTF8 { k in
                    var kv = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                    return mdb_get(txn, dbi, &kv, &dv)
                }
                if rc == MDB_NOTFOUND { continue }
                try check(rc, "mdb_get", ["directory": directory])
                found += 1
                keepAlive(Array(dv.bytes))  // the copy a Record would make
            }
            return found
        }
    }

    /// Walks every entry with a cursor in one read transaction; returns the number of entries
    /// and their total value bytes.
    public func scan() throws -> (count: Int, bytes: Int) {
        return try lock.withLock { () throws in
            let env = try environment()
            var txnPtr: OpaquePointer?
            try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txnPtr), "mdb_txn_begin", ["directory": directory])
            guard let txn = txnPtr else { throw PeerSyncError(.internalError, "mdb_txn_begin returned no transaction") }
            defer { mdb_txn_abort(txn) }
            let cursor = try Cursor(txn: txn, token: TxnToken(isWrite: false), dbi: dbi, directory: directory)
            defer { cursor.close() }
            var kv = MDB_val()
            var dv = MDB_val()
            var count = 0
            var bytes = 0
            var rc = cursor.get(&kv, &dv, MDB_FIRST)
            while rc == MDB_SUCCESS {
                count += 1
                bytes += dv.mv_size
                keepAlive(Array(dv.bytes))  // the copy a Record would make
                rc = cursor.get(&kv, &dv, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get", ["directory": directory]) }
            return (count, bytes)
        }
    }
}

/// Keeps the optimizer from dropping the copies the baseline makes on purpose.
@inline(never)
@_optimize(none)
private func keepAlive(_ bytes: [UInt8]) {
    _ = bytes
}
