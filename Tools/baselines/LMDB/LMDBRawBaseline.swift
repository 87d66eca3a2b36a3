// Benchmark code, not library code: this target (`PeerSyncLMDBBaseline`) is no library product;
// `peersync bench` and the LMDB tests use it. By design it is the one place besides the
// `PeerSyncLMDB` wrapper (`Packages/LMDB/Sources/PeerSyncLMDB/LMDB/`) that calls liblmdb: it
// measures LMDB raw, so it makes plain C calls of its own and uses nothing of PeerSyncLMDB.

internal import CLMDB
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// A yardstick for `peersync bench storage`: the same work as a storage benchmark, done with
/// raw LMDB calls into LMDB's plain (unnamed) database — `key → body`, no sequence index, no
/// record header, no journal — so a benchmark can print PeerSync's rate beside the raw rate.
///
/// It uses its own environment in its own `directory` (never a PeerSync store's; its files
/// are opened as they are, unchecked), opened with `MDB_NOTLS` and a map fixed at `mapSize`
/// (it does not grow: inserting more than fits throws `.tooLarge`). Other LMDB failures throw
/// `.storage` with `mdb_strerror`'s text; calls after ``close()`` throw `.closed`.
/// Thread-safe (calls are serialized); every method blocks the calling thread.
///
/// ```swift
/// let raw = try LMDBRawBaseline(directory: tmp + "/raw", durable: false)
/// try raw.insert(records)                       // one write transaction of mdb_put
/// let found = try raw.get(records.map(\.key).shuffled())
/// let (count, bytes) = try raw.scan()
/// raw.close()
/// ```
public final class LMDBRawBaseline: Sendable {
    public let directory: String
    /// The `MDB_env*`, nil once closed; used only inside the lock.
    private let environment: LockedValue<OpaquePointer?>
    private let dbi: MDB_dbi

    /// Creates (or reopens) a plain LMDB environment in `directory`, created if needed.
    public init(directory: String, mapSize: Int = 1 << 30, durable: Bool = true) throws {
        self.directory = directory
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw PeerSyncError(.io, "cannot create the baseline directory: \(error.localizedDescription)",
                                context: ["directory": directory])
        }
        var created: OpaquePointer?
        try Self.check(mdb_env_create(&created), "mdb_env_create", directory)
        guard let env = created else { throw PeerSyncError(.internalError, "mdb_env_create returned no handle") }
        var dbi: MDB_dbi = 0
        do {
            try Self.check(mdb_env_set_mapsize(env, max(mapSize, 1 << 20)), "mdb_env_set_mapsize", directory)
            try Self.check(mdb_env_open(env, directory, UInt32(durable ? MDB_NOTLS : MDB_NOTLS | MDB_NOSYNC), 0o644),
                           "mdb_env_open", directory)
            var txn: OpaquePointer?
            try Self.check(mdb_txn_begin(env, nil, 0, &txn), "mdb_txn_begin", directory)
            let rc = mdb_dbi_open(txn, nil, 0, &dbi)
            if rc != MDB_SUCCESS { mdb_txn_abort(txn) }
            try Self.check(rc, "mdb_dbi_open", directory)
            try Self.check(mdb_txn_commit(txn), "mdb_txn_commit", directory)
        } catch {
            mdb_env_close(env)
            throw error
        }
        self.environment = LockedValue(env)
        self.dbi = dbi
    }

    deinit { close() }

    /// Closes the environment; later calls throw `.closed`. Idempotent.
    public func close() {
        environment.withLock { env in
            if let open = env { mdb_env_close(open) }
            env = nil
        }
    }

    /// Puts every record's `key → body` with `mdb_put` in one write transaction (its version,
    /// extra, flags and sequence are not stored). Throws `.tooLarge` if the map is too small.
    public func insert(_ records: [Record]) throws {
        try withTransaction(readOnly: false) { (txn) throws(PeerSyncError) in
            for record in records {
                var key = record.key
                let rc = key.withUTF8 { k in
                    record.body.withUnsafeBytes { b in
                        var kv = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                        var dv = MDB_val(mv_size: b.count, mv_data: UnsafeMutableRawPointer(mutating: b.baseAddress))
                        return mdb_put(txn, dbi, &kv, &dv, 0)
                    }
                }
                try Self.check(rc, "mdb_put", directory)
            }
        }
    }

    /// Looks every key up with `mdb_get` in one read transaction (in the order given, so pass
    /// them shuffled for random access) and returns how many were found. Each found value's
    /// bytes are read (summed), as copying them into a ``Record`` would.
    public func get(_ keys: [String]) throws -> Int {
        try withTransaction(readOnly: true) { (txn) throws(PeerSyncError) in
            var found = 0
            for var key in keys {
                var dv = MDB_val()
                let rc = key.withUTF8 { k in
                    var kv = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                    return mdb_get(txn, dbi, &kv, &dv)
                }
                if rc == MDB_NOTFOUND { continue }
                try Self.check(rc, "mdb_get", directory)
                found += 1
                keepAlive(Self.copy(dv))  // the copy a Record would make
            }
            return found
        }
    }

    /// Walks every entry with a cursor in one read transaction; returns the number of entries
    /// and their total value bytes.
    public func scan() throws -> (count: Int, bytes: Int) {
        try withTransaction(readOnly: true) { (txn) throws(PeerSyncError) in
            var cursor: OpaquePointer?
            try Self.check(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open", directory)
            defer { mdb_cursor_close(cursor) }
            var kv = MDB_val()
            var dv = MDB_val()
            var count = 0
            var bytes = 0
            var rc = mdb_cursor_get(cursor, &kv, &dv, MDB_FIRST)
            while rc == MDB_SUCCESS {
                count += 1
                bytes += dv.mv_size
                keepAlive(Self.copy(dv))  // the copy a Record would make
                rc = mdb_cursor_get(cursor, &kv, &dv, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try Self.check(rc, "mdb_cursor_get", directory) }
            return (count, bytes)
        }
    }

    /// Runs `body` in a transaction, holding the lock: a write transaction commits when `body`
    /// returns, anything else aborts.
    private func withTransaction<R>(readOnly: Bool, _ body: (OpaquePointer) throws(PeerSyncError) -> R)
        throws(PeerSyncError) -> R {
        try environment.withLock { (env) throws(PeerSyncError) -> R in
            guard let env else {
                throw PeerSyncError(.closed, "the baseline environment is closed", context: ["directory": directory])
            }
            var begun: OpaquePointer?
            try Self.check(mdb_txn_begin(env, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &begun), "mdb_txn_begin", directory)
            guard let txn = begun else { throw PeerSyncError(.internalError, "mdb_txn_begin returned no transaction") }
            var ended = false
            defer { if !ended { mdb_txn_abort(txn) } }
            let result = try body(txn)
            if !readOnly {
                ended = true  // mdb_txn_commit ends the transaction whatever the outcome
                try Self.check(mdb_txn_commit(txn), "mdb_txn_commit", directory)
            }
            return result
        }
    }

    /// `MDB_MAP_FULL` → `.tooLarge`; any other failure → `.storage`.
    private static func check(_ rc: Int32, _ operation: String, _ directory: String) throws(PeerSyncError) {
        if rc == MDB_SUCCESS { return }
        if rc == MDB_MAP_FULL {
            throw PeerSyncError(.tooLarge, "the baseline map is too small; pass a larger mapSize",
                                context: ["directory": directory])
        }
        throw PeerSyncError(.storage, "\(operation): \(String(cString: mdb_strerror(rc)))",
                            context: ["directory": directory])
    }

    private static func copy(_ value: MDB_val) -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_data == nil ? 0 : value.mv_size))
    }
}

/// Keeps the optimizer from dropping the copies the baseline makes on purpose.
@inline(never)
@_optimize(none)
private func keepAlive(_ bytes: [UInt8]) {
    _ = bytes
}
