import PeerSyncCore
import PeerSyncStorage

// What a write transaction remembers besides LMDB's own state: the journal it replays into a
// new LMDB transaction after the map grew, and, for each enumeration running inside it, the
// pre-images of the records its body changed before the enumeration reached them.

/// One operation of a write transaction, kept so that the transaction can be replayed into a
/// fresh LMDB transaction after the map grew. The recorded results let the replay verify that
/// nothing else changed the store in between.
enum JournalEntry {
    case put(Record, keyspace: String, sequence: UInt64, storedSize: Int)
    case delete(key: String, keyspace: String, sequence: UInt64?)
    case purge(key: String, keyspace: String, existed: Bool)
    case drop(keyspace: String)
    /// A key set's held-back puts, written out in this (sorted) order (``PendingKeySetPuts``).
    case putEntries(SortedKeySetPuts, keySet: String)
    case removeEntry(key: String, keySet: String, existed: Bool)
    case dropKeySet(keySet: String)
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
