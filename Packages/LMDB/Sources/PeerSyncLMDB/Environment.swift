import Foundation
import PeerSyncCore
import PeerSyncStorage
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let log = Logger(.database)

/// Names and layout of the PeerSync LMDB format.
enum Layout {
    /// Current format version stored under ``MetaKey/format``.
    static let formatVersion: UInt32 = 1
    static let recordsDB = "records"
    static let sequencesDB = "sequences"
    static let metaDB = "meta"
    /// Our cross-process writer lock file (LMDB's own files are `data.mdb` and `lock.mdb`).
    static let writerLockFile = "peersync-writer.lock"
    static let dataFile = "data.mdb"

    /// Keys of the meta DB.
    enum MetaKey {
        /// `UInt32` LE: the format version.
        static let format: UInt8 = 0x01
        /// `UInt32` LE: the next keyspace ID to hand out (IDs are never reused).
        static let nextKeyspaceID: UInt8 = 0x02
        /// Followed by the keyspace name's UTF-8: the keyspace's ``KeyspaceState`` (28 bytes).
        static let keyspace: UInt8 = 0x10
        /// Followed by an ordered key set's name (UTF-8): its ``KeyspaceState`` (28 bytes). A key
        /// set is a keyspace whose records have no sequence index entries (`OrderedKeySets`).
        static let keySet: UInt8 = 0x11
    }

    static let defaultMapSize = 64 << 20
    static let minimumMapSize = 1 << 20
    static let maximumMapSize = 1 << 40
    /// LMDB's compile-time key limit (`MDB_MAXKEYSIZE`, 511 in Debian's build).
    static let maxLMDBKeySize = 511
    /// Record keys are stored behind a 4-byte keyspace ID.
    static var maxRecordKeySize: Int { maxLMDBKeySize - 4 }
    /// Keyspace names are stored behind one tag byte in the meta DB.
    static var maxKeyspaceNameSize: Int { maxLMDBKeySize - 1 }
}

/// One open LMDB environment, shared by every ``LMDBStorage`` of this process that opened the
/// same directory (LMDB forbids opening one environment twice in a process: its POSIX locks
/// would be dropped when either copy closes). See ``EnvironmentRegistry``.
///
/// Locking: ``writerLock`` (in-process writers) → ``fileLock`` (cross-process writers) →
/// ``gate`` (shared by every transaction, exclusive for map resizes and close), always in that
/// order. `@unchecked Sendable`: `noSync` is only touched with ``writerLock`` held; `failure`
/// is written with ``gate`` held exclusively and read with it held shared; the rest is
/// immutable after `init`.
final class LMDBEnvironment: @unchecked Sendable {
    let directory: String
    let handle: EnvHandle
    let records: DatabaseHandle
    let sequences: DatabaseHandle
    let meta: DatabaseHandle
    let pageSize: Int
    let gate = TransactionGate()
    let writerLock = StorageWriterLock()
    let fileLock: FileLock
    private var noSync: Bool
    /// Set when the map could not be remapped: the environment cannot be used any more.
    private var failure: PeerSyncError?
    /// When the map's pages were last released (``releaseMappedPagesIfDue()``): nanoseconds
    /// after ``clockOrigin``.
    private let lastPageRelease = Atomic<Int64>(0)
    private let clockOrigin = ContinuousClock.now

    /// How often, at most, the pages of the map this process touched are released from its
    /// resident set (see ``EnvHandle/releaseMappedPages(pageSize:)``): between two releases RSS
    /// grows by at most what the process reads or writes in this time.
    static let mappedPagesReleaseInterval: Duration = .milliseconds(500)

    /// Opens (or creates) the environment in `directory`, which must exist. Independent of
    /// the registry: two instances on one directory in one process are only for tests.
    ///
    /// Opening an existing, complete store takes no lock and never waits for a writer of any
    /// process: the header is validated, the environment opened and the three named DBs are
    /// opened in a read-only transaction. Only when something must be created (no
    /// `data.mdb` yet, or a `data.mdb` without our DBs: a store another process is creating
    /// right now, or one whose creation was interrupted) is the cross-process writer lock
    /// taken (bounded by ``StorageOptions/busyTimeout``) and the DBs created in a write
    /// transaction, so that a store being created is never seen half-initialized.
    init(directory: String, options: StorageOptions) throws(PeerSyncError) {
        self.directory = directory
        let dataPath = directory + "/" + Layout.dataFile
        if !options.create, access(dataPath, F_OK) != 0 {
            throw PeerSyncError(.notFound, "no LMDB store in this directory and `create` is false",
                                context: ["directory": directory])
        }
        let deadline = Deadline(options.busyTimeout)
        let fileLock = try FileLock(path: directory + "/" + Layout.writerLockFile)
        var locked = false
        defer { if locked { fileLock.unlock() } }

        // Without the lock, a header being rewritten by a committing writer may read as
        // damaged: a failed check is repeated under the lock, where its verdict stands.
        var existing = try? DataFileCheck.validate(path: dataPath)
        if existing == nil {
            try fileLock.lock(deadline, directory: directory)
            locked = true
            existing = try DataFileCheck.validate(path: dataPath)
        }
        if existing == nil, !options.create {
            throw PeerSyncError(.notFound, "no LMDB store in this directory and `create` is false",
                                context: ["directory": directory])
        }
        let handle = try EnvHandle(directory: directory)
        let ctx = ["directory": directory]
        try handle.setMaxDatabases(4)
        try handle.setMaxReaders(Self.maxReaders)
        let osPage = Int(sysconf(Int32(_SC_PAGESIZE)))
        var mapSize = options.initialSize > 0 ? min(options.initialSize, Layout.maximumMapSize) : Layout.defaultMapSize
        mapSize = max(mapSize, Layout.minimumMapSize)
        if let existing {
            // Adopt the size another process already grew the map to (if sane), and never
            // map less than the file uses.
            let recorded = Int(clamping: min(existing.mapSize, UInt64(Layout.maximumMapSize)))
            mapSize = max(mapSize, recorded, Int(clamping: min(existing.usedBytes, UInt64(Int.max / 2))))
        }
        mapSize = Self.roundUp(mapSize, to: osPage)
        try handle.setMapSize(mapSize)
        try Self.allocateLockFile(directory: directory, maxReaders: Self.maxReaders)
        try handle.open(durable: options.durable)
        try handle.clearStaleReaders()
        guard try handle.maxKeySize() >= Layout.maxLMDBKeySize else {
            throw PeerSyncError(.storage, "this liblmdb was built with keys shorter than \(Layout.maxLMDBKeySize) bytes",
                                context: ctx)
        }

        let pageSize = try handle.pageSize()
        let dbis: (records: DatabaseHandle, sequences: DatabaseHandle, meta: DatabaseHandle)
        if let opened = try Self.openExistingDatabases(handle) {
            dbis = opened
        } else {
            if !locked {
                try fileLock.lock(deadline, directory: directory)
                locked = true
            }
            dbis = try Self.openDatabases(handle)
        }

        self.handle = handle
        self.fileLock = fileLock
        self.records = dbis.records
        self.sequences = dbis.sequences
        self.meta = dbis.meta
        self.pageSize = pageSize
        self.noSync = !options.durable
    }

    /// Reader slots of the lock file (`mdb_env_set_maxreaders`).
    static let maxReaders = 254

    /// Makes sure every byte of `lock.mdb` is allocated on disk before LMDB maps it.
    ///
    /// LMDB sizes the lock file with `ftruncate` (a sparse file) and then writes its header
    /// and reader slots through a shared memory map; on a full file system (tmpfs, or any
    /// file system once a sparse page cannot be allocated) that write is SIGBUS, not an
    /// error. `posix_fallocate` over the size LMDB will map turns it into `ENOSPC` →
    /// `.diskFull` here. The size is LMDB's own: `(maxReaders - 1) × 64` bytes of reader
    /// slots plus the 192-byte header (16 KiB for 254 readers), or the file's size when it is
    /// larger (LMDB then maps the whole file). `data.mdb` needs no such care: without
    /// `MDB_WRITEMAP` LMDB writes it with `pwrite`, which reports `ENOSPC`.
    ///
    /// A file that cannot be opened for writing is left to `mdb_env_open` to report; a file
    /// system without `fallocate` support (`EOPNOTSUPP`, `EINVAL`) is not an error.
    static func allocateLockFile(directory: String, maxReaders: Int) throws(PeerSyncError) {
        #if os(Linux)
        let path = directory + "/lock.mdb"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { _ = Glibc.close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return }
        let size = max(Int(st.st_size), (maxReaders - 1) * 64 + 192)
        var rc: Int32
        repeat { rc = posix_fallocate(fd, 0, off_t(size)) } while rc == EINTR
        if rc == EOPNOTSUPP || rc == EINVAL { return }
        try check(rc, "allocating lock.mdb", ["directory": directory])
        #endif
    }

    /// Begins a transaction for opening the DBs, adopting a map another process grew.
    private static func beginOpeningTransaction(_ handle: EnvHandle, readOnly: Bool) throws(PeerSyncError) -> TxnHandle {
        for _ in 0..<8 {
            do {
                return try handle.beginTransaction(readOnly: readOnly)
            } catch where error.code == .lmdbMapResized {
                try handle.setMapSize(0)
            }
        }
        throw PeerSyncError(.storage, "the LMDB map kept being resized by another process",
                            context: ["directory": handle.directory])
    }

    /// Opens the three named DBs of a complete store in a read-only transaction (so neither
    /// our writer lock nor LMDB's is needed, and a writer of another process is never waited
    /// for) and checks the format version. Returns nil when the store has no `meta` DB yet
    /// (new, being created, or its creation was interrupted): the caller then creates it.
    private static func openExistingDatabases(_ handle: EnvHandle)
        throws(PeerSyncError) -> (records: DatabaseHandle, sequences: DatabaseHandle, meta: DatabaseHandle)? {
        let txn = try beginOpeningTransaction(handle, readOnly: true)
        defer { txn.abort() }
        guard let meta = try txn.openDatabase(Layout.metaDB) else { return nil }
        let (records, sequences) = try openExistingDataDatabases(txn, meta)
        // Committing a read-only transaction keeps the DBI handles it opened for the environment.
        try txn.commit()
        return (records, sequences, meta)
    }

    /// Checks the format version in `meta` and opens `records` and `sequences`, which a store
    /// with a `meta` DB must have (all three are created in one transaction).
    private static func openExistingDataDatabases(_ txn: TxnHandle, _ meta: DatabaseHandle)
        throws(PeerSyncError) -> (DatabaseHandle, DatabaseHandle) {
        let version = try getMetaU32(txn, meta, key: Layout.MetaKey.format)
        guard version == Layout.formatVersion else {
            throw PeerSyncError(.corrupt, "unsupported PeerSync LMDB format version \(version.map(String.init) ?? "none")",
                                context: txn.context([:]))
        }
        var databases: [DatabaseHandle] = []
        for name in [Layout.recordsDB, Layout.sequencesDB] {
            guard let database = try txn.openDatabase(name) else {
                throw PeerSyncError(.corrupt, "the PeerSync store lacks its `\(name)` database", context: txn.context([:]))
            }
            databases.append(database)
        }
        return (databases[0], databases[1])
    }

    /// Opens the three named DBs in one write transaction, creating them in a new store, and
    /// checks the format version. A store whose main DB holds other names is not ours. The
    /// caller holds ``fileLock``.
    private static func openDatabases(_ handle: EnvHandle)
        throws(PeerSyncError) -> (records: DatabaseHandle, sequences: DatabaseHandle, meta: DatabaseHandle) {
        let txn = try beginOpeningTransaction(handle, readOnly: false)
        defer { txn.abort() }

        let meta: DatabaseHandle
        let records: DatabaseHandle
        let sequences: DatabaseHandle
        if let existing = try txn.openDatabase(Layout.metaDB) {
            meta = existing
            (records, sequences) = try openExistingDataDatabases(txn, meta)
        } else {
            if let main = try txn.openDatabase(nil), try txn.entryCount(main) > 0 {
                throw PeerSyncError(.corrupt, "data.mdb is an LMDB environment of another application, not a PeerSync store",
                                    context: txn.context([:]))
            }
            meta = try txn.createDatabase(Layout.metaDB)
            records = try txn.createDatabase(Layout.recordsDB)
            sequences = try txn.createDatabase(Layout.sequencesDB)
            try putMetaU32(txn, meta, key: Layout.MetaKey.format, value: Layout.formatVersion)
            try putMetaU32(txn, meta, key: Layout.MetaKey.nextKeyspaceID, value: 1)
        }
        do {
            try txn.commit()
        } catch where error.code == .lmdbMapFull {
            throw PeerSyncError(.tooLarge, "the LMDB map is too small to create the store", context: txn.context([:]))
        }
        return (records, sequences, meta)
    }

    /// Stores the meta entry `key` → `value` (`UInt32` LE).
    static func putMetaU32(_ txn: TxnHandle, _ meta: DatabaseHandle, key: UInt8, value: UInt32) throws(PeerSyncError) {
        try txn.put(meta, key: [key], value: withUnsafeBytes(of: value.littleEndian) { Array($0) })
    }

    /// The meta entry `key` (`UInt32` LE); nil when there is none, `.corrupt` when malformed.
    static func getMetaU32(_ txn: TxnHandle, _ meta: DatabaseHandle, key: UInt8) throws(PeerSyncError) -> UInt32? {
        guard let value = try txn.get(meta, key: [key]) else { return nil }
        guard value.count == 4 else {
            throw PeerSyncError(.corrupt, "malformed meta entry \(key)", context: txn.context([:]))
        }
        return UInt32(littleEndian: value.loadUnaligned(as: UInt32.self))
    }

    static func roundUp(_ value: Int, to unit: Int) -> Int {
        (value + unit - 1) / unit * unit
    }

    // MARK: Transactions

    /// Called by every transaction as it ends, the gate still held shared: releases the map's
    /// pages from this process's resident set when ``mappedPagesReleaseInterval`` has passed
    /// since the last release (one caller wins the race; the others return at once). Without
    /// it, LMDB's memory map keeps every page ever read counted in RSS — a process that
    /// replicates a 1,000,000-document store showed 0.4–2 GB resident while its heap stayed
    /// under 50 MB. The pages stay in the page cache; reading them again is a minor fault.
    func releaseMappedPagesIfDue() {
        let (seconds, attoseconds) = (ContinuousClock.now - clockOrigin).components
        let now = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        let last = lastPageRelease.load(ordering: .relaxed)
        let (intervalSeconds, intervalAttoseconds) = Self.mappedPagesReleaseInterval.components
        guard now - last >= intervalSeconds * 1_000_000_000 + intervalAttoseconds / 1_000_000_000,
              lastPageRelease.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else { return }
        handle.releaseMappedPages(pageSize: pageSize)
    }

    /// Begins a read-only transaction. On success the gate is held shared (the transaction
    /// releases it when it ends). Adopts a map grown by another process (`MDB_MAP_RESIZED`).
    func beginRead(_ deadline: Deadline) throws(PeerSyncError) -> TxnHandle {
        for _ in 0..<100 {
            try lockSharedUsable(deadline)
            do {
                return try handle.beginTransaction(readOnly: true)
            } catch where error.code == .lmdbMapResized {
                gate.unlockShared()
                try adoptMapSize(deadline)
            } catch {
                gate.unlockShared()
                throw error
            }
        }
        throw PeerSyncError(.storage, "the LMDB map kept being resized by another process", context: ["directory": directory])
    }

    /// ``beginRead(_:)`` without waiting: nil when the gate is held or wanted exclusively (a
    /// map resize or close in this process), when another process grew the map (adopting its
    /// size needs the gate exclusively) or when LMDB's reader table is full. On success the
    /// gate is held shared (the transaction releases it when it ends). `MDB_NOTLS` (see
    /// ``EnvHandle/open(durable:)``) lets the read transaction live on any thread, also a
    /// cooperative one, for the one synchronous call that uses it.
    func beginReadWithoutWaiting() throws(PeerSyncError) -> TxnHandle? {
        guard gate.tryLockShared() else { return nil }
        try releaseGateUnlessUsable()
        do {
            return try handle.beginTransaction(readOnly: true)
        } catch where error.code == .lmdbMapResized || error.code == .busy {
            gate.unlockShared()
            return nil
        } catch {
            gate.unlockShared()
            throw error
        }
    }

    /// Begins the write transaction. The caller holds ``writerLock`` and ``fileLock``; on
    /// success the gate is held shared (the transaction releases it). Grows the map first when
    /// it is more than half used, so that most transactions never hit `MDB_MAP_FULL`.
    func beginWrite(_ deadline: Deadline) throws(PeerSyncError) -> TxnHandle {
        var grewAhead = false
        for _ in 0..<100 {
            try lockSharedUsable(deadline)
            if !grewAhead {
                let info: MapInfo
                do {
                    info = try handle.mapInfo()
                } catch {
                    gate.unlockShared()
                    throw error
                }
                let used = (info.lastPage &+ 1) &* pageSize
                if used > info.mapSize / 2 {
                    // Grow ahead only if no reader of this process is in the way right now:
                    // the transaction may well fit, and `MDB_MAP_FULL` is handled anyway.
                    gate.unlockShared()
                    grewAhead = true
                    do {
                        try growMap(observedSize: info.mapSize, pendingBytes: 0, Deadline(.zero))
                    } catch where error.code == .busy {
                        log.debug("LMDB: readers active, not growing the map of \(directory) ahead of time")
                    }
                    continue
                }
            }
            do {
                return try handle.beginTransaction(readOnly: false)
            } catch where error.code == .lmdbMapResized {
                gate.unlockShared()
                try adoptMapSize(deadline)
            } catch {
                gate.unlockShared()
                throw error
            }
        }
        throw PeerSyncError(.storage, "the LMDB map kept being resized by another process", context: ["directory": directory])
    }

    /// Takes the gate shared if the environment is open and usable (else throws, not holding it).
    private func lockSharedUsable(_ deadline: Deadline) throws(PeerSyncError) {
        try gate.lockShared(deadline, directory: directory)
        try releaseGateUnlessUsable()
    }

    /// With the gate held shared: throws, releasing the gate, when the environment failed or
    /// is closed; returns still holding it otherwise.
    private func releaseGateUnlessUsable() throws(PeerSyncError) {
        if let failure {
            gate.unlockShared()
            throw failure
        }
        guard handle.isOpen else {
            gate.unlockShared()
            throw PeerSyncError(.closed, "the LMDB store is closed", context: ["directory": directory])
        }
    }

    // MARK: Map size

    /// Sets the map size under the exclusive gate. The caller must not hold the gate.
    private func setMapSize(_ size: Int, _ deadline: Deadline) throws(PeerSyncError) {
        try gate.lockExclusive(deadline, directory: directory)
        defer { gate.unlockExclusive() }
        if let failure { throw failure }
        try setMapSizeLocked(size)
    }

    /// Sets the map size; the caller holds the gate exclusively and checked ``failure``.
    private func setMapSizeLocked(_ size: Int) throws(PeerSyncError) {
        do {
            try handle.setMapSize(size)
        } catch where error.code != .closed {
            // LMDB unmapped the old map before failing to map the new one: the environment
            // cannot be used any more.
            failure = PeerSyncError(.storage, "the LMDB map could not be remapped; close and reopen the store (\(error.message))",
                                    context: error.context)
            throw error
        }
    }

    /// Adopts the map size another process grew the map to (`MDB_MAP_RESIZED`).
    func adoptMapSize(_ deadline: Deadline) throws(PeerSyncError) {
        try setMapSize(0, deadline)
    }

    /// Grows the map after `MDB_MAP_FULL`: at least doubles it, and adds twice the bytes the
    /// failed transaction had written. Nothing to do if the map already grew past
    /// `observedSize`. Throws `.tooLarge` beyond ``Layout/maximumMapSize``.
    func growMap(observedSize: Int, pendingBytes: Int, _ deadline: Deadline) throws(PeerSyncError) {
        try gate.lockExclusive(deadline, directory: directory)
        defer { gate.unlockExclusive() }
        if let failure { throw failure }
        let current = try handle.mapInfo().mapSize
        if current > observedSize { return }
        guard current < Layout.maximumMapSize else {
            throw PeerSyncError(.tooLarge, "the LMDB map reached its maximum size of \(Layout.maximumMapSize) bytes",
                                context: ["directory": directory])
        }
        let (doubled, overflow) = current.multipliedReportingOverflow(by: 2)
        var target = overflow ? Layout.maximumMapSize : doubled
        let (withPending, overflow2) = current.addingReportingOverflow(pendingBytes.multipliedReportingOverflow(by: 2).partialValue)
        if !overflow2 { target = max(target, withPending) }
        target = min(Self.roundUp(min(target, Layout.maximumMapSize), to: 1 << 20), Layout.maximumMapSize)
        log.verbose("LMDB: growing the map of \(directory) from \(current) to \(target) bytes")
        try setMapSizeLocked(target)
    }

    /// Current map size (bytes), for tests and diagnostics.
    func mapSize() throws(PeerSyncError) -> Int {
        try lockSharedUsable(Deadline(.seconds(10)))
        defer { gate.unlockShared() }
        return try handle.mapInfo().mapSize
    }

    // MARK: Durability

    /// Makes the next commit durable or not. The caller holds ``writerLock``.
    ///
    /// LMDB 0.9 has no per-transaction `MDB_NOSYNC`, so handles of one process that disagree
    /// on ``StorageOptions/durable`` toggle the environment flag before their commits (only
    /// commits read it). Handles that agree, the usual case, never call into LMDB here.
    func setDurable(_ durable: Bool) throws(PeerSyncError) {
        guard noSync == durable, handle.isOpen else { return }
        try handle.setDurable(durable)
        noSync = !durable
    }

    // MARK: Closing

    /// Closes the environment once no transaction of this process runs. Idempotent.
    func close(_ deadline: Deadline) throws(PeerSyncError) {
        try writerLock.acquire(timeout: deadline.remaining, context: ["directory": directory])
        defer { writerLock.release() }
        try gate.lockExclusive(deadline, directory: directory)
        defer { gate.unlockExclusive() }
        handle.close()
        fileLock.close()
    }
}

/// Process-wide table of open environments, keyed by the directory's device and inode, so
/// that every ``LMDBStorage`` on one directory shares one `MDB_env` (reference-counted).
///
/// `@unchecked Sendable`: `entries` is only touched with `lock` held.
final class EnvironmentRegistry: @unchecked Sendable {
    static let shared = EnvironmentRegistry()

    private struct DirectoryID: Hashable {
        let device: UInt64
        let inode: UInt64
    }

    private final class Entry {
        let environment: LMDBEnvironment
        var references = 1
        init(_ environment: LMDBEnvironment) { self.environment = environment }
    }

    private let entries = LockedValue<[DirectoryID: Entry]>([:])

    func acquire(directory: String, options: StorageOptions) throws(PeerSyncError) -> LMDBEnvironment {
        guard !directory.isEmpty else {
            throw PeerSyncError(.invalidArgument, "the store directory must not be empty")
        }
        if options.create {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw PeerSyncError(.io, "cannot create the store directory: \(error.localizedDescription)",
                                    context: ["directory": directory])
            }
        }
        var st = stat()
        if stat(directory, &st) != 0 {
            let err = errno
            if err == ENOENT {
                throw PeerSyncError(.notFound, "the store directory does not exist and `create` is false",
                                    context: ["directory": directory])
            }
            try check(err, "stat store directory", ["directory": directory])
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            throw PeerSyncError(.invalidArgument, "the store path is not a directory", context: ["directory": directory])
        }
        let id = DirectoryID(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        return try entries.withLock { (entries) throws(PeerSyncError) -> LMDBEnvironment in
            if let entry = entries[id] {
                entry.references += 1
                return entry.environment
            }
            let environment = try LMDBEnvironment(directory: directory, options: options)
            entries[id] = Entry(environment)
            return environment
        }
    }

    /// Drops one reference; the last one closes the environment (waiting, up to `deadline`,
    /// for this process's transactions on it to end).
    func release(_ environment: LMDBEnvironment, _ deadline: Deadline) throws(PeerSyncError) {
        try entries.withLock { (entries) throws(PeerSyncError) in
            guard let (id, entry) = entries.first(where: { $0.value.environment === environment }) else { return }
            entry.references -= 1
            guard entry.references == 0 else { return }
            // Still open when this throws (a transaction outlived the deadline): it stays
            // registered, so that a new open of this directory reuses it instead of opening
            // LMDB a second time.
            try environment.close(deadline)
            entries[id] = nil
        }
    }

    /// Whether this process has the store in `directory` open (for tests).
    func isOpen(_ directory: String) -> Bool {
        var st = stat()
        guard stat(directory, &st) == 0 else { return false }
        let id = DirectoryID(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        return entries.withLock { $0[id] != nil }
    }
}
