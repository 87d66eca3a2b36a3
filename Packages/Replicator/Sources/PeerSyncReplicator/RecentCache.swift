import PeerSyncCore

/// A map that remembers only recent entries, so a session's memory does not grow with the
/// number of documents it replicates: entries go into a current generation; when it holds
/// `capacity` entries it becomes the previous generation (the one before is dropped). A
/// lookup sees both, so at least the last `capacity` entries set are always found and at
/// most `2 × capacity` are held.
///
/// The replication session keeps what it knows about the peer here (revisions it has, closed
/// branches already sent). Forgetting an entry only costs a round trip: the peer answers a
/// proposal of a revision it has with 304, and one without the right server revision with
/// 409 naming its revision.
struct RecentMap<Value> {
    static var defaultCapacity: Int { 20_000 }
    let capacity: Int
    private var current: [String: Value] = [:]
    private var previous: [String: Value] = [:]

    init(capacity: Int = Self.defaultCapacity) {
        self.capacity = max(1, capacity)
    }

    subscript(key: String) -> Value? {
        get { current[key] ?? previous[key] }
        set {
            guard let newValue else {
                current[key] = nil
                previous[key] = nil
                return
            }
            if current.updateValue(newValue, forKey: key) == nil, current.count >= capacity {
                previous = current
                current = [:]
                current.reserveCapacity(capacity)
            }
        }
    }

    /// How many entries are held (at most `2 × capacity`; a key in both generations counts twice).
    var count: Int { current.count + previous.count }
}

/// A set with the same bounded memory as ``RecentMap``.
struct RecentSet: ExpressibleByArrayLiteral {
    private var map: RecentMap<Void>

    init(capacity: Int = RecentMap<Void>.defaultCapacity) {
        map = RecentMap(capacity: capacity)
    }

    init(arrayLiteral elements: String...) {
        self.init()
        for e in elements { insert(e) }
    }

    func contains(_ key: String) -> Bool { map[key] != nil }
    mutating func insert(_ key: String) { map[key] = () }
    var count: Int { map.count }
}

/// A revision ID kept without a heap allocation when its digest is 40 lowercase hexadecimal
/// digits (a SHA-1: every revision ID PeerSync and Couchbase Lite 3 create); any other digest
/// is kept as it is.
///
/// Why: each session remembers, per document, the revision its peer has
/// (``SessionContext/peerRevision(_:_:)``) — in a mesh one such table per link end, each with
/// an entry for every document that moved. A ``RevisionID``'s 40-character digest is a heap
/// string of its own (~80 bytes with malloc's overhead); packed, the entry is 32 bytes inline.
/// In a 64-peer benchmark (~1.5 million entries) that was about 100 MB.
enum PackedRevisionID: Sendable, Equatable {
    case sha1(generation: UInt64, high: UInt64, middle: UInt64, low: UInt32)
    case other(RevisionID)

    init(_ revID: RevisionID) {
        var digest = revID.digest
        // Read through the string's own bytes (a native string always has them): iterating
        // `utf8` one element at a time cost 2 % of a mesh's CPU (`Packages/Mesh/BENCHMARKS.md`).
        let words = digest.withUTF8 { Self.sha1Words($0) }
        if let words {
            self = .sha1(generation: revID.generation, high: words.0, middle: words.1, low: UInt32(truncatingIfNeeded: words.2))
        } else {
            self = .other(revID)
        }
    }

    /// The 160 bits of a SHA-1 digest written as 40 lowercase hex digits, as three words
    /// (64, 64 and the last 32 bits); nil for any other text.
    private static func sha1Words(_ text: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64, UInt64)? {
        guard text.count == 40 else { return nil }
        var words: (UInt64, UInt64, UInt64) = (0, 0, 0)
        for (i, c) in text.enumerated() {
            let nibble: UInt64
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = UInt64(c &- UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = UInt64(c &- UInt8(ascii: "a") &+ 10)
            default: return nil
            }
            switch i {
            case 0..<16: words.0 = words.0 << 4 | nibble
            case 16..<32: words.1 = words.1 << 4 | nibble
            default: words.2 = words.2 << 4 | nibble
            }
        }
        return words
    }

    /// The revision ID this stands for (a new digest string for a packed one).
    var revisionID: RevisionID {
        switch self {
        case .other(let revID): return revID
        case .sha1(let generation, let high, let middle, let low):
            let digits = Array("0123456789abcdef".utf8)
            var text = [UInt8](repeating: 0, count: 40)
            func put(_ word: UInt64, count: Int, at start: Int) {
                for i in 0..<count { text[start + i] = digits[Int(word >> UInt64(4 * (count - 1 - i)) & 0xF)] }
            }
            put(high, count: 16, at: 0)
            put(middle, count: 16, at: 16)
            put(UInt64(low), count: 8, at: 32)
            return RevisionID(generation: generation, digest: String(decoding: text, as: UTF8.self))
        }
    }
}
