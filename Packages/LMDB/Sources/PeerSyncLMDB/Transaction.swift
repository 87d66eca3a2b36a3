internal import CLMDB
import PeerSyncCore
import PeerSyncStorage

/// Liveness of one `MDB_txn`, shared with the cursors opened in it: LMDB frees a write
/// transaction's cursors when the transaction ends, so they must not be closed again.
final class TxnToken {
    let isWrite: Bool
    var alive = true
    init(isWrite: Bool) { self.isWrite = isWrite }
}

/// Owns one `MDB_cursor*`, closed in `deinit` unless its write transaction already freed it.
final class Cursor {
    private(set) var pointer: OpaquePointer?
    private let token: TxnToken

    init(txn: OpaquePointer, token: TxnToken, dbi: MDB_dbi, directory: String) throws(PeerSyncError) {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open", ["directory": directory])
        self.pointer = cursor
        self.token = token
    }

    var isUsable: Bool { pointer != nil && token.alive }

    func close() {
        if let p = pointer {
            if token.alive || !token.isWrite { mdb_cursor_close(p) }
            pointer = nil
        }
    }

    deinit { close() }

    @inline(__always)
    func get(_ key: inout MDB_val, _ data: inout MDB_val, _ op: MDB_cursor_op) -> Int32 {
        guard let p = pointer, token.alive else { return MDB_BAD_TXN }
        return mdb_cursor_get(p, &key, &data, op)
    }
}

/// One operation of a write transaction, kept so that the transaction can be replayed into a
/// fresh LMDB transaction after the map grew. The recorded results let the replay verify that
/// nothing else changed the store in between.
enum JournalEntry {
    case put(Record, keyspace: String, sequence: UInt64, storedSize: Int)
    case delete(key: String, keyspace: String, sequence: UInt64?)
    case purge(key: String, keyspace: String, existed: Bool)
    case drop(keyspace: String)
}

/// The not-yet-visited part of a by-key enumeration that the enumeration's own body changed:
/// the records those keys had when the enumeration started (nil: the key did not exist).
/// Lets an enumeration inside a write transaction see the keyspace as it was when it began,
/// whatever its body writes (as the in-memory backend does).
final class KeyOverlay {
    let id: UInt32
    let descending: Bool
    let lower: [UInt8]
    let upper: [UInt8]?
    let upperInclusive: Bool
    /// The last key emitted (full key, with the keyspace prefix), valid when `hasAfter`.
    var after: [UInt8] = []
    var hasAfter = false
    /// Sorted ascending by key; every entry lies ahead of `after`.
    var entries: [(key: [UInt8], record: Record?)] = []

    init(id: UInt32, descending: Bool, lower: [UInt8], upper: [UInt8]?, upperInclusive: Bool) {
        self.id = id
        self.descending = descending
        self.lower = lower
        self.upper = upper
        self.upperInclusive = upperInclusive
        after.reserveCapacity(64)
    }

    /// Whether a full key belongs to this keyspace and range.
    @inline(__always)
    func inRange(_ key: UnsafeRawBufferPointer) -> Bool {
        guard key.count >= 4, key.loadUnaligned(as: UInt32.self) == id.bigEndian else { return false }
        if compareBytes(key, lower) < 0 { return false }
        if let upper {
            let c = compareBytes(key, upper)
            return c < 0 || (c == 0 && upperInclusive)
        }
        return true
    }

    @inline(__always)
    func isAhead(_ key: UnsafeRawBufferPointer) -> Bool {
        guard hasAfter else { return true }
        let c = compareBytes(key, after)
        return descending ? c < 0 : c > 0
    }

    func setAfter(_ key: UnsafeRawBufferPointer) {
        after.removeAll(keepingCapacity: true)
        after.append(contentsOf: key)
        hasAfter = true
    }

    func setAfter(_ key: [UInt8]) {
        after = key
        hasAfter = true
    }

    private func search(_ key: UnsafeRawBufferPointer) -> (found: Bool, index: Int) {
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            let c = compareBytes(key, entries[mid].key)
            if c == 0 { return (true, mid) }
            if c > 0 { lo = mid + 1 } else { hi = mid }
        }
        return (false, lo)
    }

    @inline(__always)
    func contains(_ key: UnsafeRawBufferPointer) -> Bool {
        !entries.isEmpty && search(key).found
    }

    /// Records the pre-image of `key` if it matters to this enumeration and is not known yet.
    func capture(_ key: UnsafeRawBufferPointer, _ record: () throws(PeerSyncError) -> Record?) throws(PeerSyncError) {
        guard inRange(key), isAhead(key) else { return }
        let (found, index) = search(key)
        if found { return }
        entries.insert((Array(key), try record()), at: index)
    }

    /// The next overlay record to emit, in enumeration order.
    func next() -> (key: [UInt8], record: Record)? {
        if descending {
            for entry in entries.reversed() { if let r = entry.record { return (entry.key, r) } }
        } else {
            for entry in entries { if let r = entry.record { return (entry.key, r) } }
        }
        return nil
    }

    /// Drops entries that are no longer ahead of `after`.
    func consume() {
        guard hasAfter, !entries.isEmpty else { return }
        if descending {
            while let last = entries.last, compareBytes(last.key, after) >= 0 { entries.removeLast() }
        } else {
            var n = 0
            while n < entries.count, compareBytes(entries[n].key, after) <= 0 { n += 1 }
            if n > 0 { entries.removeFirst(n) }
        }
    }
}

/// Same as ``KeyOverlay`` for a by-sequence enumeration: the pre-images (with their old
/// sequences) of records that the body changed before the enumeration reached them.
/// Sequences assigned during the enumeration are above `limit` and never visited.
final class SeqOverlay {
    let id: UInt32
    let limit: UInt64
    var after: UInt64
    /// Sorted ascending by sequence; every entry is above `after`.
    var entries: [(sequence: UInt64, record: Record)] = []

    init(id: UInt32, limit: UInt64, after: UInt64) {
        self.id = id
        self.limit = limit
        self.after = after
    }

    @inline(__always)
    func wants(_ sequence: UInt64) -> Bool { sequence > after && sequence <= limit }

    func capture(_ sequence: UInt64, _ record: () throws(PeerSyncError) -> Record) throws(PeerSyncError) {
        guard wants(sequence) else { return }
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if entries[mid].sequence == sequence { return }
            if entries[mid].sequence < sequence { lo = mid + 1 } else { hi = mid }
        }
        entries.insert((sequence, try record()), at: lo)
    }

    func consume() {
        var n = 0
        while n < entries.count, entries[n].sequence <= after { n += 1 }
        if n > 0 { entries.removeFirst(n) }
    }
}

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
final class LMDBTransaction: StorageWriter {
    private enum CachedKeyspace {
        case present(KeyspaceState)
        case absent
    }

    let env: LMDBEnvironment
    let isWrite: Bool
    private let busyTimeout: Duration
    private var txn: OpaquePointer?
    private(set) var token: TxnToken
    private var holdsGate: Bool
    private var active = true
    private var poison: PeerSyncError?
    /// Bumped whenever the LMDB transaction is replaced (map growth).
    private var generation = 0
    /// Bumped by every write: cursors positioned before it must seek again.
    private var mutations = 0
    /// Keyed by exact bytes: canonically equivalent names are different keyspaces.
    private var keyspaceCache: [ByteExactName: CachedKeyspace] = [:]
    private var lastKeyspace: KeyspaceState?
    private var nextKeyspaceID: UInt32?
    private var recordsCursor: Cursor?
    private var sequencesCursor: Cursor?
    private var journal: [JournalEntry] = []
    private var journalBytes = 0
    private var replaying = false
    private var keyOverlays: [KeyOverlay] = []
    private var seqOverlays: [SeqOverlay] = []
    private let keyBuffer = ScratchBuffer(capacity: 1024)
    private let seekBuffer = ScratchBuffer(capacity: 1024)
    private let metaBuffer = ScratchBuffer(capacity: 1024)
    private var scratch: [UInt8] = []

    /// Takes over `txn`, begun by the environment with the gate held shared.
    init(env: LMDBEnvironment, txn: OpaquePointer, isWrite: Bool, busyTimeout: Duration) {
        self.env = env
        self.txn = txn
        self.isWrite = isWrite
        self.busyTimeout = busyTimeout
        self.token = TxnToken(isWrite: isWrite)
        self.holdsGate = true
    }

    deinit { end() }

    private var ctx: [String: String] { ["directory": env.directory] }

    // MARK: Lifecycle

    /// Ends the transaction: aborts it unless committed, releases the gate. Idempotent.
    func end() {
        active = false
        recordsCursor = nil
        sequencesCursor = nil
        if let txn {
            token.alive = false
            mdb_txn_abort(txn)
            self.txn = nil
        }
        if holdsGate {
            env.gate.unlockShared()
            holdsGate = false
        }
        journal = []
        keyOverlays = []
        seqOverlays = []
    }

    /// Writes back keyspace counters and commits. On `MDB_MAP_FULL` grows the map, replays
    /// and commits again.
    func commit() throws(PeerSyncError) {
        try ensureWritable()
        while true {
            try perform { () throws(PeerSyncError) in try flushKeyspaces() }
            guard let current = txn else { throw noTransaction() }
            recordsCursor = nil
            sequencesCursor = nil
            token.alive = false
            let rc = mdb_txn_commit(current)  // ends the transaction whatever the outcome
            txn = nil
            if rc == MDB_MAP_FULL {
                do {
                    try recoverFromMapFull()
                } catch {
                    poison = error
                    throw error
                }
                continue
            }
            active = false
            if holdsGate {
                env.gate.unlockShared()
                holdsGate = false
            }
            let pending = journalBytes
            journal = []
            if rc != MDB_SUCCESS {
                throw lmdbWriteError(rc, "mdb_txn_commit", directory: env.directory, pendingBytes: pending, ctx)
            }
            return
        }
    }

    @inline(__always)
    private func ensureActive() throws(PeerSyncError) {
        guard active else {
            throw PeerSyncError(.closed, "the transaction has ended; a reader or writer must not escape its closure",
                                context: ctx)
        }
        if let poison { throw poison }
    }

    @inline(__always)
    private func ensureWritable() throws(PeerSyncError) {
        try ensureActive()
        guard isWrite else {
            throw PeerSyncError(.storage, "writes are not allowed in a read transaction", context: ctx)
        }
    }

    private func noTransaction() -> PeerSyncError {
        PeerSyncError(.internalError, "the LMDB transaction is gone", context: ctx)
    }

    @inline(__always)
    func currentTxn() throws(PeerSyncError) -> OpaquePointer {
        guard let txn else { throw noTransaction() }
        return txn
    }

    // MARK: Map growth

    /// Runs one write operation; on `MDB_MAP_FULL` grows the map, replays the journal into a
    /// new transaction and runs the operation again. Any other failure poisons the
    /// transaction: it may be half-applied, so only a rollback is allowed afterwards.
    @inline(__always)
    private func perform<T>(_ operation: () throws(PeerSyncError) -> T) throws(PeerSyncError) -> T {
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
            token = TxnToken(isWrite: true)
            generation &+= 1
            mutations &+= 1
            keyspaceCache = [:]
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
        if let txn {
            token.alive = false
            mdb_txn_abort(txn)
            self.txn = nil
        }
        if holdsGate {
            env.gate.unlockShared()
            holdsGate = false
        }
    }

    /// The map size; the caller holds the gate shared.
    private func currentMapSize() -> Int {
        guard let pointer = env.handle.pointer else { return 0 }
        var info = MDB_envinfo()
        mdb_env_info(pointer, &info)
        return info.me_mapsize
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
        }
        guard matches else {
            throw PeerSyncError(.storage, "the store changed while the transaction was replayed after the LMDB map grew "
                                + "(a writer that does not take PeerSync's lock?); the transaction was rolled back",
                                context: ctx)
        }
    }

    // MARK: Keyspaces

    private func lookupKeyspace(_ name: String) throws(PeerSyncError) -> KeyspaceState? {
        if let last = lastKeyspace, sameBytes(last.name, name) { return last }
        if let cached = keyspaceCache[ByteExactName(name: name)] {
            switch cached {
            case .present(let state):
                lastKeyspace = state
                return state
            case .absent:
                return nil
            }
        }
        let state = try readKeyspace(name)
        if let state {
            keyspaceCache[ByteExactName(name: name)] = .present(state)
            lastKeyspace = state
        } else {
            keyspaceCache[ByteExactName(name: name)] = .absent
        }
        return state
    }

    private func readKeyspace(_ name: String) throws(PeerSyncError) -> KeyspaceState? {
        guard var key = metaBuffer.write(tag: Layout.MetaKey.keyspace, text: name, limit: Layout.maxLMDBKeySize) else {
            return nil  // a name that long cannot have been stored
        }
        var data = MDB_val()
        let rc = mdb_get(try currentTxn(), env.meta, &key, &data)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_get(meta)", ["directory": env.directory, "keyspace": name])
        return try KeyspaceState.decode(name: name, data)
    }

    private func createKeyspace(_ name: String) throws(PeerSyncError) -> KeyspaceState {
        let id: UInt32
        if let next = nextKeyspaceID {
            id = next
        } else {
            id = try LMDBEnvironment.getMetaU32(try currentTxn(), env.meta, key: Layout.MetaKey.nextKeyspaceID, ctx) ?? 1
        }
        guard id < UInt32.max else {
            throw PeerSyncError(.storage, "keyspace IDs are exhausted", context: ctx)
        }
        let txn = try currentTxn()
        var idKey = Layout.MetaKey.nextKeyspaceID
        var nextValue = (id + 1).littleEndian
        let rc = withUnsafeMutableBytes(of: &idKey) { kb in
            withUnsafeMutableBytes(of: &nextValue) { vb in
                var k = MDB_val(mv_size: 1, mv_data: kb.baseAddress)
                var v = MDB_val(mv_size: 4, mv_data: vb.baseAddress)
                return mdb_put(txn, env.meta, &k, &v, 0)
            }
        }
        try check(rc, "mdb_put(meta)", ctx)
        nextKeyspaceID = id + 1
        let state = KeyspaceState(name: name, id: id)
        try writeKeyspace(state)
        keyspaceCache[ByteExactName(name: name)] = .present(state)
        lastKeyspace = state
        return state
    }

    private func writeKeyspace(_ state: KeyspaceState) throws(PeerSyncError) {
        guard var key = metaBuffer.write(tag: Layout.MetaKey.keyspace, text: state.name, limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.tooLarge, "the keyspace name is longer than \(Layout.maxKeyspaceNameSize) bytes",
                                context: ["keyspace": state.name])
        }
        var data = MDB_val(mv_size: KeyspaceState.encodedSize, mv_data: nil)
        try check(mdb_put(try currentTxn(), env.meta, &key, &data, UInt32(MDB_RESERVE)), "mdb_put(meta)",
                  ["directory": env.directory, "keyspace": state.name])
        guard let dest = data.mv_data else { throw noTransaction() }
        state.encode(into: dest)
        state.dirty = false
    }

    private func flushKeyspaces() throws(PeerSyncError) {
        for case .present(let state) in keyspaceCache.values where state.dirty {
            try writeKeyspace(state)
        }
    }

    // MARK: StorageReader

    func keyspaces() throws -> [String] {
        try ensureActive()
        let cursor = try Cursor(txn: try currentTxn(), token: token, dbi: env.meta, directory: env.directory)
        defer { cursor.close() }
        var names: [String] = []
        var key = seekBuffer.write([Layout.MetaKey.keyspace])
        var data = MDB_val()
        var rc = cursor.get(&key, &data, MDB_SET_RANGE)
        while rc == MDB_SUCCESS {
            let bytes = key.bytes
            guard let first = bytes.first, first == Layout.MetaKey.keyspace else { break }
            names.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1...]), as: UTF8.self))
            rc = cursor.get(&key, &data, MDB_NEXT)
        }
        if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get(meta)", ctx) }
        return names
    }

    func get(_ key: String, in keyspace: String) throws -> Record? {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace),
              var k = keyBuffer.write(prefix: ks.id, text: key, limit: Layout.maxLMDBKeySize) else { return nil }
        var data = MDB_val()
        let rc = mdb_get(try currentTxn(), env.records, &k, &data)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_get(records)", ["directory": env.directory, "keyspace": keyspace, "key": key])
        return try RecordHeader.decode(key: key, value: data)
    }

    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace) else { return 0 }
        let total = includeDeleted ? ks.liveCount &+ ks.deletedCount : ks.liveCount
        return Int(clamping: total)
    }

    func lastSequence(in keyspace: String) throws -> UInt64 {
        try ensureActive()
        return try lookupKeyspace(keyspace)?.lastSequence ?? 0
    }

    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace) else { return }
        let lower = fullKey(ks.id, range.lowerBound ?? "")
        let upper = range.upperBound.map { fullKey(ks.id, $0) }
        if let upper {
            let c = compareBytes(upper, lower)
            if c < 0 || (c == 0 && !range.includesUpperBound) { return }
        }
        let overlay = KeyOverlay(id: ks.id, descending: descending, lower: lower, upper: upper,
                                 upperInclusive: range.includesUpperBound)
        if isWrite { keyOverlays.append(overlay) }
        defer { if isWrite { keyOverlays.removeAll { $0 === overlay } } }

        var cursor: Cursor?
        var cursorGeneration = -1
        var cursorMutations = -1
        var pendingLive = false  // the cursor sits on a live key that was not emitted yet
        let step = descending ? MDB_PREV : MDB_NEXT
        while true {
            try ensureActive()
            var key = MDB_val()
            var data = MDB_val()
            var rc: Int32
            if let c = cursor, c.isUsable, cursorGeneration == generation, cursorMutations == mutations {
                rc = c.get(&key, &data, pendingLive ? MDB_GET_CURRENT : step)
            } else {
                if cursor == nil || cursorGeneration != generation || !(cursor?.isUsable ?? false) {
                    cursor?.close()
                    cursor = try Cursor(txn: try currentTxn(), token: token, dbi: env.records, directory: env.directory)
                }
                guard let c = cursor else { throw noTransaction() }
                rc = seek(c, overlay, &key, &data)
                cursorGeneration = generation
                cursorMutations = mutations
            }
            if let c = cursor {
                while rc == MDB_SUCCESS, overlay.contains(key.bytes) { rc = c.get(&key, &data, step) }
            }
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get(records)", ctx) }
            let liveValid = rc == MDB_SUCCESS && overlay.inRange(key.bytes)
            let candidate = overlay.entries.isEmpty ? nil : overlay.next()
            let record: Record
            if liveValid, candidate.map({ descending ? compareBytes(key.bytes, $0.key) > 0
                                                     : compareBytes(key.bytes, $0.key) < 0 }) ?? true {
                let name = String(decoding: UnsafeRawBufferPointer(rebasing: key.bytes[4...]), as: UTF8.self)
                record = try RecordHeader.decode(key: name, value: data)
                if isWrite { overlay.setAfter(key.bytes) }
                pendingLive = false
            } else if let candidate {
                record = candidate.record
                overlay.setAfter(candidate.key)
                pendingLive = liveValid
            } else {
                break
            }
            overlay.consume()
            if try !body(record) { break }
        }
        cursor?.close()
    }

    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace), since < ks.lastSequence else { return }
        let overlay = SeqOverlay(id: ks.id, limit: ks.lastSequence, after: since)
        if isWrite { seqOverlays.append(overlay) }
        defer { if isWrite { seqOverlays.removeAll { $0 === overlay } } }

        var cursor: Cursor?
        var cursorGeneration = -1
        var cursorMutations = -1
        var pendingLive = false
        while true {
            try ensureActive()
            var key = MDB_val()
            var data = MDB_val()
            var rc: Int32
            if let c = cursor, c.isUsable, cursorGeneration == generation, cursorMutations == mutations {
                rc = c.get(&key, &data, pendingLive ? MDB_GET_CURRENT : MDB_NEXT)
            } else {
                if cursor == nil || cursorGeneration != generation || !(cursor?.isUsable ?? false) {
                    cursor?.close()
                    cursor = try Cursor(txn: try currentTxn(), token: token, dbi: env.sequences, directory: env.directory)
                }
                guard let c = cursor else { throw noTransaction() }
                if overlay.after == UInt64.max {
                    rc = MDB_NOTFOUND
                } else {
                    key = seekBuffer.write(prefix: ks.id, sequence: overlay.after + 1)
                    rc = c.get(&key, &data, MDB_SET_RANGE)
                }
                cursorGeneration = generation
                cursorMutations = mutations
            }
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get(sequences)", ctx) }
            var liveSequence: UInt64?
            if rc == MDB_SUCCESS, let s = sequenceKey(key, id: ks.id), s <= overlay.limit { liveSequence = s }
            let candidate = overlay.entries.first
            let record: Record
            if let s = liveSequence, candidate.map({ s < $0.sequence }) ?? true {
                record = try fetchIndexed(ks.id, sequence: s, keyBytes: data)
                overlay.after = s
                pendingLive = false
            } else if let candidate {
                record = candidate.record
                overlay.after = candidate.sequence
                pendingLive = liveSequence != nil
            } else {
                break
            }
            overlay.consume()
            if try !body(record) { break }
        }
        cursor?.close()
    }

    /// Positions a records cursor where a by-key enumeration (re)starts: at the first key in
    /// range, or just past `overlay.after`.
    private func seek(_ cursor: Cursor, _ overlay: KeyOverlay, _ key: inout MDB_val, _ data: inout MDB_val) -> Int32 {
        if !overlay.descending {
            let target = overlay.hasAfter ? overlay.after : overlay.lower
            var rc = positionAtOrAfter(cursor, target, &key, &data)
            if rc == MDB_SUCCESS, overlay.hasAfter, compareBytes(key.bytes, overlay.after) == 0 {
                rc = cursor.get(&key, &data, MDB_NEXT)
            }
            return rc
        }
        let target: [UInt8]
        let inclusive: Bool
        if overlay.hasAfter {
            target = overlay.after
            inclusive = false
        } else if let upper = overlay.upper {
            target = upper
            inclusive = overlay.upperInclusive
        } else if overlay.id == UInt32.max {
            return cursor.get(&key, &data, MDB_LAST)
        } else {
            target = withUnsafeBytes(of: (overlay.id + 1).bigEndian) { Array($0) }
            inclusive = false
        }
        let rc = positionAtOrAfter(cursor, target, &key, &data)
        if rc == MDB_NOTFOUND { return cursor.get(&key, &data, MDB_LAST) }
        if rc != MDB_SUCCESS { return rc }
        if inclusive, compareBytes(key.bytes, target) == 0 { return rc }
        return cursor.get(&key, &data, MDB_PREV)
    }

    /// `MDB_SET_RANGE` for targets of any length (LMDB rejects keys over 511 bytes).
    private func positionAtOrAfter(_ cursor: Cursor, _ target: [UInt8], _ key: inout MDB_val,
                                   _ data: inout MDB_val) -> Int32 {
        key = seekBuffer.write(Array(target.prefix(Layout.maxLMDBKeySize)))
        var rc = cursor.get(&key, &data, MDB_SET_RANGE)
        if target.count > Layout.maxLMDBKeySize {
            while rc == MDB_SUCCESS, compareBytes(key.bytes, target) < 0 { rc = cursor.get(&key, &data, MDB_NEXT) }
        }
        return rc
    }

    private func fullKey(_ id: UInt32, _ text: String) -> [UInt8] {
        var bytes = withUnsafeBytes(of: id.bigEndian) { Array($0) }
        bytes.append(contentsOf: text.utf8)
        return bytes
    }

    /// The sequence of a sequences-DB key if it belongs to keyspace `id`.
    @inline(__always)
    private func sequenceKey(_ key: MDB_val, id: UInt32) -> UInt64? {
        let bytes = key.bytes
        guard bytes.count == 12, bytes.loadUnaligned(as: UInt32.self) == id.bigEndian else { return nil }
        return UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
    }

    /// The record a sequences-DB entry points to; `.corrupt` if the indexes disagree.
    private func fetchIndexed(_ id: UInt32, sequence: UInt64, keyBytes: MDB_val) throws(PeerSyncError) -> Record {
        let name = String(decoding: keyBytes.bytes, as: UTF8.self)
        guard var k = keyBuffer.write(prefix: id, text: name, limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.corrupt, "the sequence index holds an over-long key", context: ctx)
        }
        var value = MDB_val()
        let rc = mdb_get(try currentTxn(), env.records, &k, &value)
        if rc == MDB_NOTFOUND {
            throw PeerSyncError(.corrupt, "the sequence index points to a missing record",
                                context: ["directory": env.directory, "key": name, "sequence": String(sequence)])
        }
        try check(rc, "mdb_get(records)", ctx)
        let record = try RecordHeader.decode(key: name, value: value)
        guard record.sequence == sequence else {
            throw PeerSyncError(.corrupt, "the sequence index disagrees with the record",
                                context: ["directory": env.directory, "key": name, "sequence": String(sequence)])
        }
        return record
    }

    // MARK: StorageWriter

    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        try ensureWritable()
        guard record.key.utf8.count <= Layout.maxRecordKeySize else {
            throw PeerSyncError(.tooLarge, "the record key is longer than \(Layout.maxRecordKeySize) bytes",
                                context: ["keyspace": keyspace, "keyLength": String(record.key.utf8.count)])
        }
        guard keyspace.utf8.count <= Layout.maxKeyspaceNameSize else {
            throw PeerSyncError(.tooLarge, "the keyspace name is longer than \(Layout.maxKeyspaceNameSize) bytes",
                                context: ["keyspace": keyspace])
        }
        guard let size = RecordHeader.storedSize(record) else {
            throw PeerSyncError(.tooLarge, "the record is larger than LMDB's 4 GiB value limit",
                                context: ["keyspace": keyspace, "key": record.key])
        }
        let sequence = try perform { () throws(PeerSyncError) in try putCore(record, keyspace, storedSize: size) }
        journal.append(.put(record, keyspace: keyspace, sequence: sequence, storedSize: size))
        journalBytes &+= size &+ record.key.utf8.count &+ 64
        return sequence
    }

    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        try ensureWritable()
        let sequence = try perform { () throws(PeerSyncError) in try deleteCore(key, keyspace) }
        if sequence != nil {
            journal.append(.delete(key: key, keyspace: keyspace, sequence: sequence))
            journalBytes &+= key.utf8.count &+ 64
        }
        return sequence
    }

    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool {
        try ensureWritable()
        let existed = try perform { () throws(PeerSyncError) in try purgeCore(key, keyspace) }
        if existed {
            journal.append(.purge(key: key, keyspace: keyspace, existed: true))
            journalBytes &+= key.utf8.count &+ 64
        }
        return existed
    }

    func dropKeyspace(_ keyspace: String) throws {
        try ensureWritable()
        let existed = try perform { () throws(PeerSyncError) in try dropCore(keyspace) }
        if existed {
            journal.append(.drop(keyspace: keyspace))
            journalBytes &+= 64
        }
    }

    // MARK: Write internals (no journaling, no growth handling)

    @inline(__always)
    private func writeCursor(records: Bool) throws(PeerSyncError) -> OpaquePointer {
        if records {
            if let c = recordsCursor, c.isUsable, let p = c.pointer { return p }
            let c = try Cursor(txn: try currentTxn(), token: token, dbi: env.records, directory: env.directory)
            recordsCursor = c
            guard let p = c.pointer else { throw noTransaction() }
            return p
        } else {
            if let c = sequencesCursor, c.isUsable, let p = c.pointer { return p }
            let c = try Cursor(txn: try currentTxn(), token: token, dbi: env.sequences, directory: env.directory)
            sequencesCursor = c
            guard let p = c.pointer else { throw noTransaction() }
            return p
        }
    }

    private func putCore(_ record: Record, _ keyspace: String, storedSize: Int) throws(PeerSyncError) -> UInt64 {
        let ks: KeyspaceState
        if let existing = try lookupKeyspace(keyspace) { ks = existing } else { ks = try createKeyspace(keyspace) }
        guard ks.lastSequence < UInt64.max else {
            throw PeerSyncError(.storage, "sequence numbers are exhausted", context: ["keyspace": keyspace])
        }
        let sequence = ks.lastSequence + 1
        guard var key = keyBuffer.write(prefix: ks.id, text: record.key, limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.tooLarge, "the record key is too long", context: ["keyspace": keyspace])
        }
        let cursor = try writeCursor(records: true)
        var data = MDB_val(mv_size: storedSize, mv_data: nil)
        var rc = mdb_cursor_put(cursor, &key, &data, UInt32(MDB_NOOVERWRITE | MDB_RESERVE))
        if rc == MDB_KEYEXIST {
            // `data` is the stored record: read what we need before replacing it in place.
            let old = try RecordHeader.parse(data)
            try noteMutation(ks.id, key, old: data)
            data = MDB_val(mv_size: storedSize, mv_data: nil)
            rc = mdb_cursor_put(cursor, &key, &data, UInt32(MDB_CURRENT | MDB_RESERVE))
            try check(rc, "mdb_cursor_put(records)", ["directory": env.directory, "keyspace": keyspace, "key": record.key])
            guard let dest = data.mv_data else { throw noTransaction() }
            RecordHeader.encode(record, sequence: sequence, into: dest)
            try deleteSequenceEntry(ks.id, old.sequence)
            ks.count(old.flags, -1)
        } else {
            try check(rc, "mdb_cursor_put(records)", ["directory": env.directory, "keyspace": keyspace, "key": record.key])
            guard let dest = data.mv_data else { throw noTransaction() }
            RecordHeader.encode(record, sequence: sequence, into: dest)
            try noteMutation(ks.id, key, old: nil)
        }
        try putSequenceEntry(ks.id, sequence, key: record.key)
        ks.count(record.flags.rawValue, 1)
        ks.lastSequence = sequence
        return sequence
    }

    private func deleteCore(_ keyString: String, _ keyspace: String) throws(PeerSyncError) -> UInt64? {
        guard let ks = try lookupKeyspace(keyspace),
              var key = keyBuffer.write(prefix: ks.id, text: keyString, limit: Layout.maxLMDBKeySize) else { return nil }
        let cursor = try writeCursor(records: true)
        var data = MDB_val()
        var rc = mdb_cursor_get(cursor, &key, &data, MDB_SET)
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "mdb_cursor_get(records)", ["directory": env.directory, "keyspace": keyspace, "key": keyString])
        guard ks.lastSequence < UInt64.max else {
            throw PeerSyncError(.storage, "sequence numbers are exhausted", context: ["keyspace": keyspace])
        }
        let old = try RecordHeader.parse(data)
        try noteMutation(ks.id, key, old: data)
        // Keep version and extra: copy them out, the node is rewritten below.
        let kept = old.versionCount + old.extraCount
        scratch.removeAll(keepingCapacity: true)
        if kept > 0, let src = data.mv_data {
            scratch.append(contentsOf: UnsafeRawBufferPointer(start: src + RecordHeader.size, count: kept))
        }
        let sequence = ks.lastSequence + 1
        let newFlags = old.flags | RecordFlags.deleted.rawValue
        var newData = MDB_val(mv_size: RecordHeader.size + kept, mv_data: nil)
        rc = mdb_cursor_put(cursor, &key, &newData, UInt32(MDB_CURRENT | MDB_RESERVE))
        try check(rc, "mdb_cursor_put(records)", ["directory": env.directory, "keyspace": keyspace, "key": keyString])
        guard let dest = newData.mv_data else { throw noTransaction() }
        RecordHeader.write(sequence: sequence, flags: newFlags, versionCount: old.versionCount,
                           extraCount: old.extraCount, to: dest)
        if kept > 0 {
            scratch.withUnsafeBytes { src in
                if let s = src.baseAddress { (dest + RecordHeader.size).copyMemory(from: s, byteCount: kept) }
            }
        }
        try deleteSequenceEntry(ks.id, old.sequence)
        try putSequenceEntry(ks.id, sequence, key: keyString)
        ks.count(old.flags, -1)
        ks.count(newFlags, 1)
        ks.lastSequence = sequence
        return sequence
    }

    private func purgeCore(_ keyString: String, _ keyspace: String) throws(PeerSyncError) -> Bool {
        guard let ks = try lookupKeyspace(keyspace),
              var key = keyBuffer.write(prefix: ks.id, text: keyString, limit: Layout.maxLMDBKeySize) else { return false }
        let cursor = try writeCursor(records: true)
        var data = MDB_val()
        let rc = mdb_cursor_get(cursor, &key, &data, MDB_SET)
        if rc == MDB_NOTFOUND { return false }
        try check(rc, "mdb_cursor_get(records)", ["directory": env.directory, "keyspace": keyspace, "key": keyString])
        let old = try RecordHeader.parse(data)
        try noteMutation(ks.id, key, old: data)
        try check(mdb_cursor_del(cursor, 0), "mdb_cursor_del(records)",
                  ["directory": env.directory, "keyspace": keyspace, "key": keyString])
        try deleteSequenceEntry(ks.id, old.sequence)
        ks.count(old.flags, -1)
        return true
    }

    private func dropCore(_ keyspace: String) throws(PeerSyncError) -> Bool {
        guard let ks = try lookupKeyspace(keyspace) else { return false }
        if !replaying { try preserveForEnumerations(ks) }
        mutations &+= 1
        try deletePrefix(ks.id, dbi: env.records)
        try deletePrefix(ks.id, dbi: env.sequences)
        if var key = metaBuffer.write(tag: Layout.MetaKey.keyspace, text: keyspace, limit: Layout.maxLMDBKeySize) {
            let rc = mdb_del(try currentTxn(), env.meta, &key, nil)
            if rc != MDB_NOTFOUND { try check(rc, "mdb_del(meta)", ["directory": env.directory, "keyspace": keyspace]) }
        }
        ks.dirty = false
        keyspaceCache[ByteExactName(name: keyspace)] = .absent
        if lastKeyspace === ks { lastKeyspace = nil }
        return true
    }

    private func deletePrefix(_ id: UInt32, dbi: MDB_dbi) throws(PeerSyncError) {
        let cursor = try Cursor(txn: try currentTxn(), token: token, dbi: dbi, directory: env.directory)
        defer { cursor.close() }
        guard let p = cursor.pointer else { throw noTransaction() }
        let prefix = withUnsafeBytes(of: id.bigEndian) { Array($0) }
        while true {
            var key = seekBuffer.write(prefix)
            var data = MDB_val()
            let rc = mdb_cursor_get(p, &key, &data, MDB_SET_RANGE)
            if rc == MDB_NOTFOUND { return }
            try check(rc, "mdb_cursor_get", ctx)
            guard key.mv_size >= 4, key.bytes.loadUnaligned(as: UInt32.self) == id.bigEndian else { return }
            try check(mdb_cursor_del(p, 0), "mdb_cursor_del", ctx)
        }
    }

    private func putSequenceEntry(_ id: UInt32, _ sequence: UInt64, key: String) throws(PeerSyncError) {
        let cursor = try writeCursor(records: false)
        var k = seekBuffer.write(prefix: id, sequence: sequence)
        let count = key.utf8.count
        var v = MDB_val(mv_size: count, mv_data: nil)
        // Sequences grow, so appending usually works (and packs pages full); when a keyspace
        // with a higher ID already has entries, fall back to a normal put.
        var rc = mdb_cursor_put(cursor, &k, &v, UInt32(MDB_APPEND | MDB_RESERVE))
        if rc == MDB_KEYEXIST {
            v = MDB_val(mv_size: count, mv_data: nil)
            rc = mdb_cursor_put(cursor, &k, &v, UInt32(MDB_RESERVE))
        }
        try check(rc, "mdb_cursor_put(sequences)", ["directory": env.directory, "key": key])
        if count > 0, let dest = v.mv_data {
            let copied = key.utf8.withContiguousStorageIfAvailable { src -> Bool in
                if let s = src.baseAddress { dest.copyMemory(from: s, byteCount: count) }
                return true
            } ?? false
            if !copied {
                var i = 0
                for byte in key.utf8 {
                    dest.storeBytes(of: byte, toByteOffset: i, as: UInt8.self)
                    i += 1
                }
            }
        }
    }

    private func deleteSequenceEntry(_ id: UInt32, _ sequence: UInt64) throws(PeerSyncError) {
        var k = seekBuffer.write(prefix: id, sequence: sequence)
        let rc = mdb_del(try currentTxn(), env.sequences, &k, nil)
        if rc == MDB_NOTFOUND {
            log.warning("LMDB store \(env.directory): sequence \(sequence) was missing from the sequence index")
            return
        }
        try check(rc, "mdb_del(sequences)", ctx)
    }

    // MARK: Test hooks

    /// Removes one sequence-index entry behind the store's back (tests of the integrity check).
    func damageSequenceIndexForTesting(keyspace: String, sequence: UInt64) throws {
        try ensureWritable()
        guard let ks = try lookupKeyspace(keyspace) else { return }
        try deleteSequenceEntry(ks.id, sequence)
    }

    // MARK: Enumeration snapshots

    /// Called before a record changes (`old` is its stored value, nil for a new key): lets
    /// running enumerations keep the pre-image of a key they have not reached yet.
    @inline(__always)
    private func noteMutation(_ id: UInt32, _ key: MDB_val, old: MDB_val?) throws(PeerSyncError) {
        mutations &+= 1
        guard !replaying, !(keyOverlays.isEmpty && seqOverlays.isEmpty) else { return }
        let keyBytes = key.bytes
        func decodeOld() throws(PeerSyncError) -> Record? {
            guard let old else { return nil }
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: keyBytes[4...]), as: UTF8.self)
            return try RecordHeader.decode(key: name, value: old)
        }
        for overlay in keyOverlays where overlay.id == id {
            try overlay.capture(keyBytes) { () throws(PeerSyncError) in try decodeOld() }
        }
        if let old {
            let sequence = try RecordHeader.parse(old).sequence
            for overlay in seqOverlays where overlay.id == id && overlay.wants(sequence) {
                try overlay.capture(sequence) { () throws(PeerSyncError) in
                    guard let record = try decodeOld() else { throw noTransaction() }
                    return record
                }
            }
        }
    }

    /// Before a keyspace is dropped, copies every record that its running enumerations have
    /// yet to visit into their overlays.
    private func preserveForEnumerations(_ ks: KeyspaceState) throws(PeerSyncError) {
        let keyed = keyOverlays.filter { $0.id == ks.id }
        let sequenced = seqOverlays.filter { $0.id == ks.id }
        if keyed.isEmpty && sequenced.isEmpty { return }
        let txn = try currentTxn()
        for overlay in keyed {
            let cursor = try Cursor(txn: txn, token: token, dbi: env.records, directory: env.directory)
            defer { cursor.close() }
            var key = MDB_val()
            var data = MDB_val()
            var rc = seek(cursor, overlay, &key, &data)
            while rc == MDB_SUCCESS, overlay.inRange(key.bytes) {
                let value = data
                let keyBytes = key.bytes
                try overlay.capture(keyBytes) { () throws(PeerSyncError) in
                    let name = String(decoding: UnsafeRawBufferPointer(rebasing: keyBytes[4...]), as: UTF8.self)
                    return try RecordHeader.decode(key: name, value: value)
                }
                rc = cursor.get(&key, &data, overlay.descending ? MDB_PREV : MDB_NEXT)
            }
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get(records)", ctx) }
        }
        for overlay in sequenced {
            let cursor = try Cursor(txn: txn, token: token, dbi: env.sequences, directory: env.directory)
            defer { cursor.close() }
            var key = seekBuffer.write(prefix: ks.id, sequence: overlay.after &+ 1)
            var data = MDB_val()
            var rc = overlay.after == UInt64.max ? MDB_NOTFOUND : cursor.get(&key, &data, MDB_SET_RANGE)
            while rc == MDB_SUCCESS, let s = sequenceKey(key, id: ks.id), s <= overlay.limit {
                let value = data
                try overlay.capture(s) { () throws(PeerSyncError) in try fetchIndexed(ks.id, sequence: s, keyBytes: value) }
                rc = cursor.get(&key, &data, MDB_NEXT)
            }
            if rc != MDB_SUCCESS && rc != MDB_NOTFOUND { try check(rc, "mdb_cursor_get(sequences)", ctx) }
        }
    }
}
