internal import CLMDB
import Foundation
import PeerSyncCore
#if canImport(Glibc)
import Glibc
#endif

// The LMDB wrapper: the files of this folder are the only ones of the module that import
// CLMDB. They own the C handles (`EnvHandle`, `TxnHandle`, `DatabaseHandle`, `Cursor`), hand
// out map memory as `Unsafe(Mutable)RawBufferPointer`s, and turn every return code into a
// `PeerSyncError` through `check`/`lmdbError` (LMDBError.swift). The rest of the module —
// environment lifecycle, map growth, the transaction gate, the storage transaction, the
// integrity check — speaks only to these types.

/// The map as LMDB reports it (`mdb_env_info`).
struct MapInfo {
    /// Bytes mapped.
    let mapSize: Int
    /// Number of the last page in use (`(lastPage + 1) × pageSize` bytes are used).
    let lastPage: Int
}

/// Owns one `MDB_env*`, closed in `deinit` (or earlier by ``close()``).
///
/// Errors: every method throws the ``PeerSyncError`` that ``lmdbError(_:_:_:)`` builds, with
/// the operation and ``directory`` in its context; after ``close()`` every method but
/// ``close()`` and ``isOpen`` throws `.closed`.
///
/// `@unchecked Sendable`: `pointer` is set in `init` and cleared only by ``close()``, which
/// ``LMDBEnvironment`` calls while holding its ``StorageWriterLock`` and its ``TransactionGate``
/// exclusively; every other use of the pointer holds the gate shared or the writer lock.
final class EnvHandle: @unchecked Sendable {
    /// The environment's directory (error context only until ``open(durable:)``).
    let directory: String
    private var pointer: OpaquePointer?

    /// `mdb_env_create`: an environment not opened yet.
    init(directory: String) throws(PeerSyncError) {
        self.directory = directory
        var env: OpaquePointer?
        try check(mdb_env_create(&env), "mdb_env_create", ["directory": directory])
        guard let env else { throw PeerSyncError(.internalError, "mdb_env_create returned no handle") }
        pointer = env
    }

    deinit { close() }

    /// `mdb_env_close`. Idempotent. No transaction of this environment may be open.
    func close() {
        if let env = pointer {
            mdb_env_close(env)
            pointer = nil
        }
    }

    /// Whether ``close()`` has not run yet.
    var isOpen: Bool { pointer != nil }

    private var context: [String: String] { ["directory": directory] }

    @inline(__always)
    private func env() throws(PeerSyncError) -> OpaquePointer {
        guard let pointer else {
            throw PeerSyncError(.closed, "the LMDB store is closed", context: context)
        }
        return pointer
    }

    // MARK: Before opening

    /// `mdb_env_set_maxdbs`.
    func setMaxDatabases(_ count: Int) throws(PeerSyncError) {
        try check(mdb_env_set_maxdbs(try env(), MDB_dbi(count)), "mdb_env_set_maxdbs", context)
    }

    /// `mdb_env_set_maxreaders`.
    func setMaxReaders(_ count: Int) throws(PeerSyncError) {
        try check(mdb_env_set_maxreaders(try env(), UInt32(count)), "mdb_env_set_maxreaders", context)
    }

    /// Opens the environment in ``directory`` (`mdb_env_open`, mode 0644) with `MDB_NOTLS`
    /// (Swift tasks hop threads) and, unless `durable`, `MDB_NOSYNC`. Errors as
    /// ``lmdbWriteError(_:_:directory:pendingBytes:_:)`` (a full disk is `.diskFull`).
    func open(durable: Bool) throws(PeerSyncError) {
        var flags = UInt32(MDB_NOTLS)
        if !durable { flags |= UInt32(MDB_NOSYNC) }
        let rc = mdb_env_open(try env(), directory, flags, 0o644)
        if rc != MDB_SUCCESS {
            throw lmdbWriteError(rc, "mdb_env_open", directory: directory, pendingBytes: 0, context)
        }
    }

    // MARK: Open environment

    /// Frees the reader slots of dead processes (`mdb_reader_check`).
    func clearStaleReaders() throws(PeerSyncError) {
        var dead: Int32 = 0
        try check(mdb_reader_check(try env(), &dead), "mdb_reader_check", context)
    }

    /// The longest key this liblmdb accepts (`mdb_env_get_maxkeysize`, a compile-time value).
    func maxKeySize() throws(PeerSyncError) -> Int {
        Int(mdb_env_get_maxkeysize(try env()))
    }

    /// The database page size (`mdb_env_stat`).
    func pageSize() throws(PeerSyncError) -> Int {
        var stat = MDB_stat()
        try check(mdb_env_stat(try env(), &stat), "mdb_env_stat", context)
        return Int(stat.ms_psize)
    }

    /// The map's size and use (`mdb_env_info`).
    func mapInfo() throws(PeerSyncError) -> MapInfo {
        var info = MDB_envinfo()
        mdb_env_info(try env(), &info)
        return MapInfo(mapSize: info.me_mapsize, lastPage: info.me_last_pgno)
    }

    /// Drops this process's mappings of the map's used pages (`madvise(MADV_DONTNEED)` over
    /// the first `(me_last_pgno + 1) × pageSize` bytes of the map). The map is a shared
    /// mapping of `data.mdb` (this environment never uses `MDB_WRITEMAP`), so no data is lost:
    /// the next access to a page maps it again from the page cache (a minor fault). What it
    /// changes is the resident set: every page a reader ever touched otherwise stays counted
    /// in the process's RSS until the environment closes — a process that reads a 1 GB store
    /// once shows 1 GB resident. LMDB does not tell where the map is (`me_mapaddr` is only set
    /// for `MDB_FIXEDMAP`), so the mapping of `data.mdb` is looked up by device and inode in
    /// `/proc/self/maps`. The caller holds the gate shared, so the map cannot be remapped
    /// meanwhile (an address range another allocation reused must never be advised).
    /// Best effort: when the mapping is not found or `madvise` fails, nothing changes.
    func releaseMappedPages(pageSize: Int) {
        guard let env = pointer else { return }
        var fd: Int32 = -1
        var info = MDB_envinfo()
        var status = stat()
        guard mdb_env_get_fd(env, &fd) == MDB_SUCCESS, fstat(fd, &status) == 0,
              mdb_env_info(env, &info) == MDB_SUCCESS,
              let region = sharedMapping(device: UInt64(status.st_dev), inode: UInt64(status.st_ino)) else { return }
        let used = min(region.length, info.me_mapsize, (info.me_last_pgno + 1) * pageSize)
        #if canImport(Glibc)
        _ = madvise(region.start, used, MADV_DONTNEED)
        #endif
    }

    /// `mdb_env_set_mapsize`: `0` adopts the size another process grew the map to. LMDB
    /// allows it only while no transaction of this process is open; when it fails after
    /// unmapping the old map, the environment cannot be used any more (the caller decides).
    func setMapSize(_ size: Int) throws(PeerSyncError) {
        try check(mdb_env_set_mapsize(try env(), size), "mdb_env_set_mapsize(\(size))", context)
    }

    /// Turns `MDB_NOSYNC` off (`durable`) or on (`mdb_env_set_flags`); only commits read it.
    func setDurable(_ durable: Bool) throws(PeerSyncError) {
        try check(mdb_env_set_flags(try env(), UInt32(MDB_NOSYNC), durable ? 0 : 1), "mdb_env_set_flags", context)
    }

    /// Begins a transaction (`mdb_txn_begin`, no parent). `MDB_MAP_RESIZED` (another process
    /// grew the map) throws the internal code `.lmdbMapResized`: adopt the size with
    /// ``setMapSize(_:)`` `(0)` and begin again.
    func beginTransaction(readOnly: Bool) throws(PeerSyncError) -> TxnHandle {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(try env(), nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn),
                  readOnly ? "mdb_txn_begin (read)" : "mdb_txn_begin (write)", context)
        guard let txn else { throw PeerSyncError(.internalError, "mdb_txn_begin returned no transaction") }
        return TxnHandle(txn, isWrite: !readOnly, directory: directory)
    }
}

/// This process's shared mapping at offset 0 of the file with this device and inode, from
/// `/proc/self/maps` (lines `start-end perms offset major:minor inode [path]`, numbers in hex
/// but the inode), or nil.
private func sharedMapping(device: UInt64, inode: UInt64) -> (start: UnsafeMutableRawPointer, length: Int)? {
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps") else { return nil }
    defer { try? handle.close() }
    // procfs files report a size of 0: read to the end, not by the size.
    guard let data = try? handle.readToEnd() else { return nil }
    let major = UInt64(((device >> 32) & 0xFFFF_F000) | ((device >> 8) & 0xFFF))
    let minor = UInt64(((device >> 12) & 0xFFFF_FF00) | (device & 0xFF))
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
        let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
        guard fields.count >= 5, UInt64(fields[4]) == inode, fields[1].hasSuffix("s"), UInt64(fields[2], radix: 16) == 0 else { continue }
        let dev = fields[3].split(separator: ":")
        guard dev.count == 2, UInt64(dev[0], radix: 16) == major, UInt64(dev[1], radix: 16) == minor else { continue }
        let range = fields[0].split(separator: "-")
        guard range.count == 2, let start = UInt(range[0], radix: 16), let end = UInt(range[1], radix: 16), end > start,
              let address = UnsafeMutableRawPointer(bitPattern: start) else { continue }
        return (address, Int(end - start))
    }
    return nil
}
