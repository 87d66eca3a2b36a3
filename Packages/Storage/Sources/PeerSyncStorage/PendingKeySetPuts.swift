import Foundation

// Key-set puts of a write transaction, held back by a backend and written at the end, sorted.
// Shared by the SQLite and LMDB backends (package access: not part of the public API).
//
// A bulk insert into an indexed collection puts one entry per document into each index's key
// set, in document order, which is random order for most indexes (a `type` index with 1,000
// values gets each batch's entries spread over all of its leaf pages). Written one by one, each
// put descends the B-tree to another leaf. Written sorted by key at the end, each leaf page is
// reached once per run of neighbouring keys and takes them together.
//
// SQLite: once a batch's dirty pages outgrow the page cache, nearly every unsorted put reads a
// page back and makes SQLite spill another dirty page to the WAL first
// (`sqlite3PcacheFetchStress` under the puts: in the profile of that insert the two entry puts
// cost twice the document's own put); sorted, they are written
// ``SQLiteTransaction/putsPerStatement`` rows per `INSERT`.
// LMDB: each put copies-on-write the leaf it lands in and descends through pages spread over
// the map; sorted, consecutive puts land in the same (already dirty, cached) leaf.
//
// What the transaction sees stays exactly what it wrote (the `Storage` contract): every
// other operation on a key set — `entry`, `enumerateEntries`, `removeEntry` — first writes
// that key set's held-back puts, in order, and `dropKeySet` forgets them; the commit writes
// everything left before committing — in the same transaction, so a crash keeps or loses the
// entries together with the rest of it. A transaction that rolls back never writes them. (So
// only runs of puts are sorted: a transaction that replaces entries, a remove and a put per
// document, writes them about as before.) A backend bounds the memory by writing everything
// out once ``PendingKeySetPuts/maxPendingPuts`` puts are held back, and fails the commit when a
// write-out failed (the puts not written are gone).

/// The held-back puts of one key set (see the file comment), in the order they were made:
/// their keys' UTF-8 and their values copied into one byte buffer as they come (no `String` or
/// array kept per put, nothing to retain or release when they are sorted and written).
/// Used by one transaction (one thread) only.
package final class PendingKeySetPuts {
    /// Held-back puts (of all key sets of a transaction) beyond which a backend writes them
    /// out before the commit: the memory bound.
    package static let maxPendingPuts = 65_536

    package let name: String
    /// One stored property, changed by one mutating call per put: the exclusivity of a class's
    /// stored property is checked at run time once per access, not once per field.
    private var run = HeldRun()

    package init(name: String) {
        self.name = name
    }

    package var isEmpty: Bool { run.spans.isEmpty }

    /// Holds a put back: appends the key's UTF-8 bytes and the value's bytes.
    package func put(_ key: String, _ value: [UInt8]) {
        run.append(key, value)
    }

    /// Every held-back put in ascending UTF-8 byte order of the keys (two puts of one key in
    /// the order they were made, so the last one written wins); forgets them.
    package func takeSorted() -> SortedKeySetPuts {
        let taken = run
        run = HeldRun()
        return taken.sorted()
    }
}

/// The puts of a ``PendingKeySetPuts``, in the order they were made.
private struct HeldRun {
    var bytes: [UInt8] = []
    var spans: [KeySetPutSpan] = []
    var keyByteCount = 0
    var valueByteCount = 0

    mutating func append(_ key: String, _ value: [UInt8]) {
        let keyStart = bytes.count
        let copied: Void? = key.utf8.withContiguousStorageIfAvailable { bytes.append(contentsOf: $0) }
        if copied == nil { bytes.append(contentsOf: key.utf8) }   // not contiguous (bridged): byte by byte
        let keyCount = bytes.count - keyStart
        let prefix = bytes.withUnsafeBytes { KeySetPutSpan.prefix(of: UnsafeRawBufferPointer(rebasing: $0[keyStart...])) }
        bytes.append(contentsOf: value)
        spans.append(KeySetPutSpan(keyStart: keyStart, keyCount: keyCount, valueCount: value.count, prefix: prefix))
        keyByteCount &+= keyCount
        valueByteCount &+= value.count
    }

    /// Sorted by key bytes, then by the order of the puts.
    consuming func sorted() -> SortedKeySetPuts {
        bytes.withUnsafeBytes { raw in
            // `raw.baseAddress` is nil only when every key is empty: then every prefix is equal
            // and so is every key, and the order of the puts decides.
            let base = raw.baseAddress
            spans.sort { a, b in
                if a.prefix != b.prefix { return a.prefix < b.prefix }
                if let base {
                    let common = min(a.keyCount, b.keyCount)
                    if common > 8 {
                        // The first 8 bytes are equal (the prefixes are).
                        let c = memcmp(base + a.keyStart + 8, base + b.keyStart + 8, common - 8)
                        if c != 0 { return c < 0 }
                    }
                }
                if a.keyCount != b.keyCount { return a.keyCount < b.keyCount }
                return a.keyStart < b.keyStart   // the same key: in the order of the puts
            }
        }
        return SortedKeySetPuts(bytes: bytes, spans: spans, keyByteCount: keyByteCount, valueByteCount: valueByteCount)
    }
}

/// Where one held-back put lies in its run's bytes: its key's UTF-8 at `keyStart`, its value
/// right after it.
package struct KeySetPutSpan {
    package let keyStart: Int
    package let keyCount: Int
    package let valueCount: Int
    /// The key's first 8 bytes as a big-endian integer, zero-padded: ordering two keys by it
    /// orders them as their bytes do whenever the two differ, so a sort compares bytes only
    /// past the first 8.
    fileprivate let prefix: UInt64

    package var valueStart: Int { keyStart + keyCount }

    fileprivate static func prefix(of key: UnsafeRawBufferPointer) -> UInt64 {
        if key.count >= 8 { return UInt64(bigEndian: key.loadUnaligned(as: UInt64.self)) }
        var prefix: UInt64 = 0
        for i in 0..<key.count { prefix |= UInt64(key[i]) << (56 - 8 * i) }
        return prefix
    }
}

/// One key set's held-back puts, sorted by key (``PendingKeySetPuts/takeSorted()``): the keys'
/// UTF-8 and values in ``bytes``, each put's place in ``spans``, in the order to write them.
/// Immutable, so a backend can keep it (LMDB journals it for a replay after a map growth).
package struct SortedKeySetPuts {
    /// Every put's key bytes followed by its value bytes, in the order the puts were made.
    package let bytes: [UInt8]
    /// The puts in ascending key order (a key put twice: in the order of its puts).
    package let spans: [KeySetPutSpan]
    /// The sum of the keys' UTF-8 lengths.
    package let keyByteCount: Int
    /// The sum of the values' lengths.
    package let valueByteCount: Int

    package var count: Int { spans.count }
    package var isEmpty: Bool { spans.isEmpty }
}

/// The held-back key-set puts of one write transaction (see the file comment): one
/// ``PendingKeySetPuts`` per key set, in the order the key sets were first put to, and the
/// count that bounds the memory. The backend owns the writing: it writes a key set's puts
/// before that key set is read, enumerated or has entries removed (``pending(_:)``), all of them
/// before its commit or once ``hold(_:_:inKeySet:)`` says the bound is reached (``takeAll()``),
/// and forgets a dropped key set's (``forget(_:)``).
/// Used by one transaction (one thread) only.
package struct HeldBackKeySetPuts {
    private var keySets: [PendingKeySetPuts] = []
    /// Puts held since the last ``takeAll()`` (a replaced key counted again).
    private var count = 0

    package init() {}

    /// Holds a put back. Returns true when ``PendingKeySetPuts/maxPendingPuts`` puts are held:
    /// the backend then writes them all out (``takeAll()``) before going on.
    package mutating func hold(_ key: String, _ value: [UInt8], inKeySet keySet: String) -> Bool {
        let pending: PendingKeySetPuts
        if let found = self.pending(keySet) {
            pending = found
        } else {
            pending = PendingKeySetPuts(name: keySet)
            keySets.append(pending)
        }
        pending.put(key, value)
        count += 1
        return count >= PendingKeySetPuts.maxPendingPuts
    }

    /// The held-back puts of key set `name` (same UTF-8 bytes), if it has any.
    package func pending(_ name: String) -> PendingKeySetPuts? {
        if keySets.isEmpty { return nil }
        return keySets.last(where: { sameUTF8($0.name, name) })
    }

    /// Forgets the held-back puts of key set `name` (it was dropped).
    package mutating func forget(_ name: String) {
        keySets.removeAll { sameUTF8($0.name, name) }
    }

    /// Every key set's held-back puts, to be written out now; forgets them and resets the count.
    package mutating func takeAll() -> [PendingKeySetPuts] {
        let all = keySets
        keySets = []
        count = 0
        return all
    }
}

/// Whether two strings have the same UTF-8 bytes: a memcmp. (Swift's `==` is canonical
/// equivalence — `"\u{E9}" == "e\u{301}"` — but those are different keys and keyspace names
/// to a store; `utf8.elementsEqual` is ~100 times slower on a put/get hot path.)
@inline(__always)
package func sameUTF8(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    return compareUTF8(a, b) == 0
}

/// `a`'s UTF-8 bytes against `b`'s: negative, zero or positive as memcmp, a prefix first (the
/// order of SQLite's BINARY collation over UTF-8 text, and of LMDB's default key comparison).
/// Borrows both: no copy, no retain.
@inline(__always)
package func compareUTF8(_ a: String, _ b: String) -> Int {
    if let c = a.utf8.withContiguousStorageIfAvailable({ x in
        b.utf8.withContiguousStorageIfAvailable { y -> Int in
            let common = min(x.count, y.count)
            if common > 0, let p = x.baseAddress, let q = y.baseAddress {
                let c = memcmp(p, q, common)
                if c != 0 { return Int(c) }
            }
            return x.count - y.count
        }
    }), let c {
        return c
    }
    // Not contiguous (a bridged string): the slow byte-by-byte way.
    if a.utf8.elementsEqual(b.utf8) { return 0 }
    return a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : 1
}
