import Foundation
import PeerSyncCore
import PeerSyncStorage

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The LMDB storage backend (name `"lmdb"`): a `StorageBackend` that keeps a store in
/// `data.mdb` + `lock.mdb` (LMDB's files) and `peersync-writer.lock` in its directory.
///
/// - Every keyspace lives in three fixed LMDB databases (records by key, the sequence index,
///   and a meta database with each keyspace's ID, last sequence and counts), so the number of
///   keyspaces is not limited by LMDB's `maxdbs` and no DBI handle is ever opened after the
///   store is.
/// - Record keys are at most 507 UTF-8 bytes and keyspace names at most 510 (LMDB's 511-byte
///   key limit); longer ones throw `.tooLarge`. Values may be up to 4 GiB.
/// - Opening an existing store takes no lock and never waits for a writer of any process
///   (only creating a store does); read transactions see a snapshot, never block writers and
///   are never blocked by them. Write transactions are serialized within the process and
///   across processes; waiting longer than
///   `StorageOptions.busyTimeout` throws `.busy`. A nested `write` on the same thread throws
///   `.storage` at once.
/// - The map starts at `StorageOptions.initialSize` (default 64 MiB) and grows automatically
///   (at least doubling) when full: the write transaction is replayed from its journal into a
///   new LMDB transaction, transparently — the closure runs exactly once. A map grown by
///   another process is adopted on the next transaction.
/// - `StorageOptions.durable` `false` opens LMDB with `MDB_NOSYNC`: a commit is not flushed,
///   so a system crash may lose (or, on file systems that reorder writes, damage) the last
///   transactions; an application crash loses nothing.
/// - Opening a zero-length, truncated, non-LMDB or foreign-LMDB `data.mdb` throws `.corrupt`.
///   ``checkIntegrity(directory:)`` walks a whole store.
/// - Within one process every open of one directory shares one LMDB environment (LMDB must
///   not open an environment twice per process); it closes with the last `Storage`.
///
/// Threading: every method blocks the calling thread (see `Storage`).
public struct LMDBStorageBackend: StorageBackend {
    /// The LMDB backend. It holds no state: the environments it opens are shared per directory
    /// within the process (see above).
    public init() {}

    public var name: String { "lmdb" }

    public func open(directory: String, options: StorageOptions = StorageOptions()) throws -> any Storage {
        let environment = try EnvironmentRegistry.shared.acquire(directory: directory, options: options)
        return LMDBStorage(environment: environment, directory: directory, options: options, registered: true)
    }

    /// Whether `directory` holds `data.mdb` (even a damaged one: opening it then throws).
    public func hasStore(in directory: String) -> Bool {
        access(directory + "/" + Layout.dataFile, F_OK) == 0
    }

    /// Walks the whole store in `directory` in one read transaction and returns the problems
    /// found, one line each (empty: the store is consistent). Checks the meta entries, decodes
    /// every record, and verifies that the sequence index and the records agree one to one,
    /// that no sequence exceeds its keyspace's last sequence, and that the stored counts are
    /// right. Throws if the store cannot be opened (e.g. `.corrupt` for a damaged header, or
    /// `.notFound`). Does not create a store. Blocks the calling thread.
    public func checkIntegrity(directory: String) throws -> [String] {
        var options = StorageOptions()
        options.create = false
        let storage = try open(directory: directory, options: options)
        defer { try? storage.close() }
        return try storage.read { reader in
            guard let transaction = reader as? LMDBTransaction else {
                throw PeerSyncError(.internalError, "unexpected reader type")
            }
            return try IntegrityCheck(transaction).run()
        }
    }
}

/// An open LMDB store. Thread-safe: each call runs on the calling thread.
///
/// `Sendable`: `environment` is itself `Sendable`; `isClosed` is a `LockedValue`.
final class LMDBStorage: Storage {
    var backendName: String { "lmdb" }
    let directory: String
    let options: StorageOptions
    let environment: LMDBEnvironment
    private let registered: Bool
    private let isClosed = LockedValue(false)

    init(environment: LMDBEnvironment, directory: String, options: StorageOptions, registered: Bool) {
        self.environment = environment
        self.directory = directory
        self.options = options
        self.registered = registered
    }

    deinit {
        try? close()
    }

    private func checkOpen() throws(PeerSyncError) {
        if isClosed.withLock({ $0 }) {
            throw PeerSyncError(.closed, "the store is closed", context: ["directory": directory])
        }
    }

    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try checkOpen()
        let txn = try environment.beginRead(Deadline(options.busyTimeout))
        let transaction = LMDBTransaction(env: environment, txn: txn, isWrite: false, busyTimeout: options.busyTimeout)
        defer { transaction.end() }
        return try body(transaction)
    }

    /// See ``Storage/readWithoutWaiting(_:)``: an LMDB read transaction never waits for a
    /// writer (MVCC); only this process's gate (a map resize or close) and a full reader table
    /// can make it wait, and then this returns nil (see
    /// ``LMDBEnvironment/beginReadWithoutWaiting()``).
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        try checkOpen()
        guard let txn = try environment.beginReadWithoutWaiting() else { return nil }
        let transaction = LMDBTransaction(env: environment, txn: txn, isWrite: false, busyTimeout: options.busyTimeout)
        defer { transaction.end() }
        return try body(transaction)
    }

    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try checkOpen()
        let deadline = Deadline(options.busyTimeout)
        try environment.writerLock.acquire(timeout: deadline.remaining, context: ["directory": directory])
        defer { environment.writerLock.release() }
        // With the writer lock held the environment cannot close under us.
        guard environment.handle.isOpen else {
            throw PeerSyncError(.closed, "the store is closed", context: ["directory": directory])
        }
        try environment.fileLock.lock(deadline, directory: directory)
        defer { environment.fileLock.unlock() }
        try environment.setDurable(options.durable)
        let txn = try environment.beginWrite(deadline)
        let transaction = LMDBTransaction(env: environment, txn: txn, isWrite: true, busyTimeout: options.busyTimeout)
        defer { transaction.end() }
        let result = try body(transaction)
        try transaction.commit()
        return result
    }

    func close() throws {
        let wasOpen = isClosed.withLock { closed in
            if closed { return false }
            closed = true
            return true
        }
        guard wasOpen else { return }
        if registered {
            try EnvironmentRegistry.shared.release(environment, Deadline(options.busyTimeout))
        } else {
            try environment.close(Deadline(options.busyTimeout))
        }
    }
}

extension LMDBStorageBackend: StorageBackendIntegrityChecking {}
