import PeerSyncCore
import PeerSyncStorage

/// A read or write transaction: the ``StorageReader`` passed to ``LMDBStorage/read(_:)`` and
/// the ``StorageWriter`` passed to ``LMDBStorage/write(_:)``. Used by one thread, inside the
/// closure only; afterwards every call throws `.closed`.
///
/// A write transaction keeps a journal of its operations. When LMDB reports `MDB_MAP_FULL`,
/// the transaction is aborted, the map grown, a new LMDB transaction begun and the journal
/// replayed into it, all inside the failing call: the closure runs once and never notices
/// (the cross-process writer lock is held throughout, so nothing else can change the store
/// in between). The price is that the journal keeps every written ``Record`` alive (their
/// byte arrays are shared, not copied) until the transaction ends.
///
/// One class, one file per concern: this file holds its state, lifecycle and map growth;
/// `TransactionKeyspaces.swift` the keyspace table, `TransactionReader.swift` the
/// ``StorageReader`` part, `TransactionWriter.swift` the ``StorageWriter`` part,
/// `EnumerationSnapshots.swift` what keeps enumerations stable while their body writes, and
/// `WriteJournal.swift` the journal and overlay types. The state below that those files share
/// is internal (not private) for that reason only: nothing outside this class touches it.
final class LMDBTransaction: StorageWriter {
    enum CachedKeyspace {
        case present(KeyspaceState)
        case absent
    }

    let env: LMDBEnvironment
    let isWrite: Bool
    private let busyTimeout: Duration
    /// The LMDB transaction; nil once ended (and, during map growth, between the abort and
    /// the new transaction).
    private var txn: TxnHandle?
    private var holdsGate: Bool
    private var active = true
    private var poison: PeerSyncError?
    /// Bumped whenever the LMDB transaction is replaced (map growth).
    private(set) var generation = 0
    /// Bumped by every write: cursors positioned before it must seek again.
    var mutations = 0
    /// Keyed by exact bytes: canonically equivalent names are different keyspaces.
    var keyspaceCache: [ByteExactName: CachedKeyspace] = [:]
    /// The same for ordered key sets (their own namespace).
    var keySetCache: [ByteExactName: CachedKeyspace] = [:]
    var lastKeyspace: KeyspaceState?
    var nextKeyspaceID: UInt32?
    var recordsCursor: Cursor?
    var sequencesCursor: Cursor?
    var journal: [JournalEntry] = []
    var journalBytes = 0
    /// True while the journal is replayed into a new LMDB transaction.
    private(set) var replaying = false
    var keyOverlays: [KeyOverlay] = []
    /// Key-set puts held back until the commit (see PendingKeySetPuts.swift in PeerSyncStorage);
    /// not yet in the journal (each key set's run is journaled as it is written out).
    var heldBackPuts = HeldBackKeySetPuts()
    var seqOverlays: [SeqOverlay] = []
    let keyBuffer = ScratchBuffer(capacity: 1024)
    let seekBuffer = ScratchBuffer(capacity: 1024)
    let metaBuffer = ScratchBuffer(capacity: 1024)
    var scratch: [UInt8] = []

    /// Takes over `txn`, begun by the environment with the gate held shared.
    init(env: LMDBEnvironment, txn: TxnHandle, isWrite: Bool, busyTimeout: Duration) {
        self.env = env
        self.txn = txn
        self.isWrite = isWrite
        self.busyTimeout = busyTimeout
        self.holdsGate = true
    }

    deinit { end() }

    var ctx: [String: String] { ["directory": env.directory] }

    // MARK: Lifecycle

    /// Ends the transaction: aborts it unless committed, releases the gate. Idempotent.
    func end() {
        active = false
        abandonTransaction()
        journal = []
        heldBackPuts = HeldBackKeySetPuts()
        keyOverlays = []
        seqOverlays = []
    }

    /// Writes the held-back key-set puts and the keyspace counters back and commits. On
    /// `MDB_MAP_FULL` grows the map, replays and commits again.
    func commit() throws(PeerSyncError) {
        try ensureWritable()
        // Into this LMDB transaction, each run journaled as it is written: a map growth during
        // or after the write-out replays them with the rest. A failed write-out poisons the
        // transaction (`perform`), so it cannot commit.
        try writePendingEntries()
        while true {
            try perform { () throws(PeerSyncError) in try flushKeyspaces() }
            guard let current = txn else { throw noTransaction() }
            recordsCursor = nil
            sequencesCursor = nil
            txn = nil
            do {
                try current.commit(pendingBytes: journalBytes)  // ends the transaction whatever the outcome
            } catch where error.code == .lmdbMapFull {
                do {
                    try recoverFromMapFull()
                } catch {
                    poison = error
                    throw error
                }
                continue
            } catch {
                end()
                throw error
            }
            end()
            return
        }
    }

    @inline(__always)
    func ensureActive() throws(PeerSyncError) {
        guard active else {
            throw PeerSyncError(.closed, "the transaction has ended; a reader or writer must not escape its closure",
                                context: ctx)
        }
        if let poison { throw poison }
    }

    @inline(__always)
    func ensureWritable() throws(PeerSyncError) {
        try ensureActive()
        guard isWrite else {
            throw PeerSyncError(.storage, "writes are not allowed in a read transaction", context: ctx)
        }
    }

    func noTransaction() -> PeerSyncError {
        PeerSyncError(.internalError, "the LMDB transaction is gone", context: ctx)
    }

    @inline(__always)
    func currentTxn() throws(PeerSyncError) -> TxnHandle {
        guard let txn else { throw noTransaction() }
        return txn
    }

    // MARK: Map growth

    /// Runs one write operation; on `MDB_MAP_FULL` grows the map, replays the journal into a
    /// new transaction and runs the operation again. Any other failure poisons the
    /// transaction: it may be half-applied, so only a rollback is allowed afterwards.
    @inline(__always)
    func perform<T>(_ operation: () throws(PeerSyncError) -> T) throws(PeerSyncError) -> T {
        while true {
            do {
                return try operation()
            } catch where error.code == .lmdbMapFull {
                do {
                    try recoverFromMapFull()
                } catch {
                    poison = error
                    throw error
                }
            } catch {
                poison = error
                throw error
            }
        }
    }

    private func recoverFromMapFull() throws(PeerSyncError) {
        var observed = currentMapSize()
        for _ in 0..<64 {
            abandonTransaction()
            try env.growMap(observedSize: observed, pendingBytes: journalBytes, Deadline(busyTimeout))
            let newTxn = try env.beginWrite(Deadline(busyTimeout))
            txn = newTxn
            holdsGate = true
            generation &+= 1
            mutations &+= 1
            keyspaceCache = [:]
            keySetCache = [:]
            lastKeyspace = nil
            nextKeyspaceID = nil
            replaying = true
            defer { replaying = false }
            do {
                for entry in journal { try replay(entry) }
                return
            } catch where error.code == .lmdbMapFull {
                observed = currentMapSize()
            }
        }
        throw PeerSyncError(.tooLarge, "the transaction does not fit in the LMDB map even after growing it", context: ctx)
    }

    /// Aborts the LMDB transaction (if any) and releases the gate, keeping the journal.
    private func abandonTransaction() {
        recordsCursor = nil
        sequencesCursor = nil
        txn?.abort()
        txn = nil
        if holdsGate {
            env.releaseMappedPagesIfDue()
            env.gate.unlockShared()
            holdsGate = false
        }
    }

    /// The map size; the caller holds the gate shared.
    private func currentMapSize() -> Int {
        (try? env.handle.mapInfo().mapSize) ?? 0
    }

    private func replay(_ entry: JournalEntry) throws(PeerSyncError) {
        let matches: Bool
        switch entry {
        case let .put(record, keyspace, sequence, storedSize):
            matches = try putCore(record, keyspace, storedSize: storedSize) == sequence
        case let .delete(key, keyspace, sequence):
            matches = try deleteCore(key, keyspace) == sequence
        case let .purge(key, keyspace, existed):
            matches = try purgeCore(key, keyspace) == existed
        case let .drop(keyspace):
            _ = try dropCore(keyspace)
            matches = true
        case let .putEntries(puts, keySet):
            try putEntriesCore(puts, keySet)
            matches = true
        case let .removeEntry(key, keySet, existed):
            matches = try purgeCore(key, keySet, keySet: true) == existed
        case let .dropKeySet(keySet):
            _ = try dropCore(keySet, keySet: true)
            matches = true
        }
        guard matches else {
            throw PeerSyncError(.storage, "the store changed while the transaction was replayed after the LMDB map grew "
                                + "(a writer that does not take PeerSync's lock?); the transaction was rolled back",
                                context: ctx)
        }
    }
}
