import PeerSyncCore
import PeerSyncStorage

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// On-disk format (version 1), all integers little-endian except where noted:
//
//   records DB:   key  = keyspace ID (UInt32, big-endian) + record key (UTF-8)
//                 data = sequence (UInt64) | flags (UInt32) | version count (UInt32)
//                        | extra count (UInt32) | version | extra | body
//   sequences DB: key  = keyspace ID (UInt32, big-endian) + sequence (UInt64, big-endian)
//                 data = record key (UTF-8)
//   meta DB:      0x01 → format version (UInt32); 0x02 → next keyspace ID (UInt32);
//                 0x10 + keyspace name (UTF-8) → ID (UInt32) | last sequence (UInt64)
//                                                | live count (UInt64) | deleted count (UInt64)
//                 0x11 + ordered key set name (UTF-8) → the same, for a key set: its entries are
//                        records (key = its ID + entry key, body = the value) with no entries
//                        in the sequences DB (stores without key sets open unchanged)
//
// Big-endian IDs and sequences keep one keyspace's keys contiguous and in order under LMDB's
// byte-wise key comparison.

/// A fixed scratch area for building keys without allocating (one per transaction).
/// Not a C handle: plain memory owned by this object.
final class ScratchBuffer {
    let base: UnsafeMutableRawPointer
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    /// Writes `prefix` (big-endian) then `text`'s UTF-8; nil if longer than `limit` bytes.
    /// The bytes returned are valid until the next write into this buffer.
    @inline(__always)
    func write(prefix: UInt32, text: String, limit: Int) -> UnsafeRawBufferPointer? {
        base.storeBytes(of: prefix.bigEndian, as: UInt32.self)
        let count = text.utf8.count
        guard count + 4 <= min(limit, capacity) else { return nil }
        copyUTF8(text, to: base + 4)
        return UnsafeRawBufferPointer(start: base, count: count + 4)
    }

    /// Writes a tag byte then `text`'s UTF-8; nil if longer than `limit` bytes.
    @inline(__always)
    func write(tag: UInt8, text: String, limit: Int) -> UnsafeRawBufferPointer? {
        base.storeBytes(of: tag, as: UInt8.self)
        let count = text.utf8.count
        guard count + 1 <= min(limit, capacity) else { return nil }
        var i = 1
        for byte in text.utf8 {
            base.storeBytes(of: byte, toByteOffset: i, as: UInt8.self)
            i += 1
        }
        return UnsafeRawBufferPointer(start: base, count: count + 1)
    }

    /// Writes `prefix` and `sequence`, both big-endian (a sequences-DB key).
    @inline(__always)
    func write(prefix: UInt32, sequence: UInt64) -> UnsafeRawBufferPointer {
        base.storeBytes(of: prefix.bigEndian, as: UInt32.self)
        base.storeBytes(of: sequence.bigEndian, toByteOffset: 4, as: UInt64.self)
        return UnsafeRawBufferPointer(start: base, count: 12)
    }

    /// Copies `bytes` (at most `capacity`).
    func write(_ bytes: [UInt8]) -> UnsafeRawBufferPointer {
        let n = min(bytes.count, capacity)
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress { base.copyMemory(from: s, byteCount: n) }
        }
        return UnsafeRawBufferPointer(start: base, count: n)
    }
}

/// Copies `text`'s UTF-8 to `dest`, which has room for `text.utf8.count` bytes.
@inline(__always)
func copyUTF8(_ text: String, to dest: UnsafeMutableRawPointer) {
    let copied = text.utf8.withContiguousStorageIfAvailable { src -> Bool in
        if let s = src.baseAddress { dest.copyMemory(from: s, byteCount: src.count) }
        return true
    } ?? false
    if !copied {
        var i = 0
        for byte in text.utf8 {
            dest.storeBytes(of: byte, toByteOffset: i, as: UInt8.self)
            i += 1
        }
    }
}

/// A dictionary key for a name that is equal only to the same UTF-8 bytes (see `sameUTF8` in PeerSyncStorage).
struct ByteExactName: Hashable {
    let name: String

    static func == (lhs: ByteExactName, rhs: ByteExactName) -> Bool { sameUTF8(lhs.name, rhs.name) }

    func hash(into hasher: inout Hasher) {
        let hashed: Void? = name.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            for byte in name.utf8 { hasher.combine(byte) }
        }
    }
}

/// Byte-wise comparison with shorter-first on a common prefix (LMDB's default order).
@inline(__always)
func compareBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
    let n = min(a.count, b.count)
    if n > 0, let pa = a.baseAddress, let pb = b.baseAddress {
        let c = memcmp(pa, pb, n)
        if c != 0 { return c < 0 ? -1 : 1 }
    }
    return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
}

@inline(__always)
func compareBytes(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int {
    b.withUnsafeBytes { compareBytes(a, $0) }
}

@inline(__always)
func compareBytes(_ a: [UInt8], _ b: [UInt8]) -> Int {
    a.withUnsafeBytes { pa in b.withUnsafeBytes { compareBytes(pa, $0) } }
}

/// Copies `count` bytes at `offset` of `base` into a new array.
@inline(__always)
func copyBytes(_ base: UnsafeRawPointer, offset: Int, count: Int) -> [UInt8] {
    if count == 0 { return [] }
    return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        if let dest = buffer.baseAddress { UnsafeMutableRawPointer(dest).copyMemory(from: base + offset, byteCount: count) }
        initialized = count
    }
}

/// The fixed part of a stored record.
struct RecordHeader {
    static let size = 20
    var sequence: UInt64
    var flags: UInt32
    var versionCount: Int
    var extraCount: Int
    var bodyCount: Int

    /// Parses and bounds-checks a records-DB value.
    @inline(__always)
    static func parse(_ value: UnsafeRawBufferPointer) throws(PeerSyncError) -> RecordHeader {
        guard value.count >= size, let p = value.baseAddress else {
            throw PeerSyncError(.corrupt, "a stored record is shorter than its header (\(value.count) bytes)")
        }
        let seq = UInt64(littleEndian: p.loadUnaligned(as: UInt64.self))
        let flags = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
        let v = Int(UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 12, as: UInt32.self)))
        let e = Int(UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 16, as: UInt32.self)))
        guard size + v + e <= value.count else {
            throw PeerSyncError(.corrupt, "a stored record's lengths exceed its size (\(value.count) bytes)")
        }
        return RecordHeader(sequence: seq, flags: flags, versionCount: v, extraCount: e,
                            bodyCount: value.count - size - v - e)
    }

    /// The largest body of a record without version or extra bytes (an ordered key set's
    /// value) that LMDB can hold: its stored size is at most 4 GiB (``storedSize(_:)``).
    static let maxBodySize = Int(UInt32.max) - size

    /// Bytes needed to store `record`, or nil if LMDB cannot hold it (4 GiB).
    static func storedSize(_ record: Record) -> Int? {
        let (a, o1) = record.version.count.addingReportingOverflow(record.extra.count)
        let (b, o2) = a.addingReportingOverflow(record.body.count)
        let (c, o3) = b.addingReportingOverflow(size)
        guard !o1, !o2, !o3, c <= Int(UInt32.max) else { return nil }
        return c
    }

    @inline(__always)
    static func write(sequence: UInt64, flags: UInt32, versionCount: Int, extraCount: Int,
                      to dest: UnsafeMutableRawPointer) {
        dest.storeBytes(of: sequence.littleEndian, as: UInt64.self)
        dest.storeBytes(of: flags.littleEndian, toByteOffset: 8, as: UInt32.self)
        dest.storeBytes(of: UInt32(truncatingIfNeeded: versionCount).littleEndian, toByteOffset: 12, as: UInt32.self)
        dest.storeBytes(of: UInt32(truncatingIfNeeded: extraCount).littleEndian, toByteOffset: 16, as: UInt32.self)
    }

    /// Writes `record` with `sequence` into reserved space of ``storedSize(_:)`` bytes.
    @inline(__always)
    static func encode(_ record: Record, sequence: UInt64, into dest: UnsafeMutableRawPointer) {
        write(sequence: sequence, flags: record.flags.rawValue, versionCount: record.version.count,
              extraCount: record.extra.count, to: dest)
        let v = record.version.count, e = record.extra.count
        copy(record.version, to: dest + size)
        copy(record.extra, to: dest + size + v)
        copy(record.body, to: dest + size + v + e)
    }

    @inline(__always)
    private static func copy(_ bytes: [UInt8], to dest: UnsafeMutableRawPointer) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress { dest.copyMemory(from: s, byteCount: src.count) }
        }
    }

    /// Decodes a full record (copying its bytes out of the map); with `extra` false, without
    /// its extra bytes (left empty, not copied).
    @inline(__always)
    static func decode(key: String, value: UnsafeRawBufferPointer, extra: Bool = true) throws(PeerSyncError) -> Record {
        let h = try parse(value)
        guard let base = value.baseAddress else { throw PeerSyncError(.corrupt, "a stored record has no data") }
        return Record(key: key, sequence: h.sequence, flags: RecordFlags(rawValue: h.flags),
                      version: copyBytes(base, offset: size, count: h.versionCount),
                      body: copyBytes(base, offset: size + h.versionCount + h.extraCount, count: h.bodyCount),
                      extra: extra ? copyBytes(base, offset: size + h.versionCount, count: h.extraCount) : [])
    }
}

/// One keyspace's entry in the meta DB, cached (and updated in memory) by a transaction;
/// a write transaction writes dirty entries back before it commits.
final class KeyspaceState {
    static let encodedSize = 28
    let name: String
    let id: UInt32
    var lastSequence: UInt64
    var liveCount: UInt64
    var deletedCount: UInt64
    var dirty = false
    /// An ordered key set (meta tag ``Layout/MetaKey/keySet``): no sequence index entries.
    let isKeySet: Bool

    init(name: String, id: UInt32, lastSequence: UInt64 = 0, liveCount: UInt64 = 0, deletedCount: UInt64 = 0,
         isKeySet: Bool = false) {
        self.name = name
        self.id = id
        self.isKeySet = isKeySet
        self.lastSequence = lastSequence
        self.liveCount = liveCount
        self.deletedCount = deletedCount
    }

    static func decode(name: String, _ value: UnsafeRawBufferPointer, isKeySet: Bool = false) throws(PeerSyncError) -> KeyspaceState {
        guard value.count == encodedSize, let p = value.baseAddress else {
            throw PeerSyncError(.corrupt, "malformed keyspace entry in the meta database", context: ["keyspace": name])
        }
        return KeyspaceState(name: name,
                             id: UInt32(littleEndian: p.loadUnaligned(as: UInt32.self)),
                             lastSequence: UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 4, as: UInt64.self)),
                             liveCount: UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 12, as: UInt64.self)),
                             deletedCount: UInt64(littleEndian: p.loadUnaligned(fromByteOffset: 20, as: UInt64.self)),
                             isKeySet: isKeySet)
    }

    func encode(into dest: UnsafeMutableRawPointer) {
        dest.storeBytes(of: id.littleEndian, as: UInt32.self)
        dest.storeBytes(of: lastSequence.littleEndian, toByteOffset: 4, as: UInt64.self)
        dest.storeBytes(of: liveCount.littleEndian, toByteOffset: 12, as: UInt64.self)
        dest.storeBytes(of: deletedCount.littleEndian, toByteOffset: 20, as: UInt64.self)
    }

    /// Adjusts the live/deleted counters for a record with `flags` appearing (+1) or going (-1).
    @inline(__always)
    func count(_ flags: UInt32, _ delta: Int) {
        let deleted = flags & RecordFlags.deleted.rawValue != 0
        if delta > 0 {
            if deleted { deletedCount &+= 1 } else { liveCount &+= 1 }
        } else {
            if deleted { deletedCount = deletedCount > 0 ? deletedCount - 1 : 0 } else { liveCount = liveCount > 0 ? liveCount - 1 : 0 }
        }
        dirty = true
    }
}
