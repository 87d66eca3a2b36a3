import PeerSyncCore
import PeerSyncDatabaseTestSupport
import PeerSyncStorage
import Testing
@testable import PeerSyncQuery

/// The index key encoding: byte order (what every storage backend compares) is the
/// collation's order, prefixes select exactly what they claim, and keys decode.
@Suite struct IndexKeyTests {
    struct Values {
        var rng: SplitMix64
        mutating func int(_ r: ClosedRange<Int>) -> Int { Int.random(in: r, using: &rng) }
        mutating func string() -> String {
            let pieces = ["", "a", "b", "ab", "\u{0}", "\u{1}", "\u{2}", "\n", "é", "e\u{301}", "日本", "🙂", "\u{10FFFF}", "%", "Z"]
            return (0..<int(0...3)).map { _ in pieces[int(0...(pieces.count - 1))] }.joined()
        }
        mutating func value(_ depth: Int) -> JSONValue? {
            switch int(0...(depth > 0 ? 12 : 9)) {
            case 0: return nil
            case 1: return .null
            case 2: return .bool(int(0...1) == 1)
            case 3: return .int(Int64(int(-3...3)))
            case 4: return .double(Double(int(-12...12)) / 4)
            case 5:
                let edges: [Int64] = [Int64.max, Int64.max - 1, Int64.max - 600, Int64.min, Int64.min + 1, 1 << 53, (1 << 53) + 1,
                                      (1 << 60) + 3, -(1 << 53) - 1, 0]
                return .int(edges[int(0...(edges.count - 1))])
            case 6:
                let edges: [Double] = [9.223372036854775807e18, -9.223372036854775808e18, 9007199254740992, 1e300, -1e-300, 0.5, -0.0, 1.0]
                return .double(edges[int(0...(edges.count - 1))])
            case 7, 8, 9: return .string(string())
            case 10, 11: return .array((0..<int(0...3)).map { _ in value(depth - 1) ?? .null })
            default:
                var o: [String: JSONValue] = [:]
                for _ in 0..<int(0...3) { o[string()] = value(depth - 1) ?? .null }
                return .object(o)
            }
        }
    }

    static func bytesCompare(_ a: String, _ b: String) -> Int {
        a.utf8.elementsEqual(b.utf8) ? 0 : (a.utf8.lexicographicallyPrecedes(b.utf8) ? -1 : 1)
    }

    @Test func byteOrderIsCollationOrder() {
        var gen = Values(rng: SplitMix64(seed: 7))
        let values = (0..<400).map { _ in gen.value(2) }
        for a in values {
            let ea = IndexKey.string(IndexKey.encode([a]))
            #expect(!ea.utf8.contains(0), "no NUL byte")
            for b in values {
                let eb = IndexKey.string(IndexKey.encode([b]))
                let c = Collation.compare(a, b)
                #expect(IndexKeyTests.bytesCompare(ea, eb) == c, "\(String(describing: a)) vs \(String(describing: b))")
            }
        }
    }

    /// The stored format, byte for byte (readers decode it: an encoder change must not move it).
    @Test func numbersAndStringsEncodeToTheDocumentedBytes() {
        #expect(IndexKey.entryKey([.int(1)], documentID: "d") == "\u{06}bff00000000000008000\u{01}d")
        #expect(IndexKey.entryKey([.double(1.0)], documentID: "d") == "\u{06}bff00000000000008000\u{01}d")
        #expect(IndexKey.entryKey([.double(-2.5)], documentID: "d") == "\u{06}3ffbffffffffffff8000\u{01}d")
        #expect(IndexKey.entryKey([.int(Int64(1) << 53 + 1)], documentID: "x") == "\u{06}c3400000000000008001\u{01}x")
        #expect(IndexKey.entryKey([.string("ab"), nil, .null], documentID: "i") == "\u{07}ab\u{01}\u{01}\u{02}\u{03}\u{01}i")
    }

    @Test func entriesSortByValuesThenDocumentID() {
        var gen = Values(rng: SplitMix64(seed: 8))
        let ids = ["a", "b", "a\u{1}", "日", "\u{10FFFF}x", "Z"]
        var entries: [([JSONValue?], String)] = []
        for i in 0..<300 { entries.append(([gen.value(1), gen.value(1)], ids[i % ids.count])) }
        let byCollation = entries.sorted { l, r in
            for (x, y) in zip(l.0, r.0) { let c = Collation.compare(x, y); if c != 0 { return c < 0 } }
            return l.1.utf8.lexicographicallyPrecedes(r.1.utf8)
        }.map { IndexKey.entryKey($0.0, documentID: $0.1) }
        let byBytes = entries.map { IndexKey.entryKey($0.0, documentID: $0.1) }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(byCollation == byBytes)
        for (values, id) in entries {
            let key = IndexKey.entryKey(values, documentID: id)
            #expect(IndexKey.documentID(key, count: 2) == id)
            // The entry lies in the range of its first value, and of both, and in no other value's.
            let one = IndexKey.prefixRange([values[0]])
            #expect(KeyRange(from: one.lower, to: one.upper).contains(key))
            let both = IndexKey.prefixRange(values)
            #expect(KeyRange(from: both.lower, to: both.upper).contains(key))
            for (other, _) in entries.prefix(40) where Collation.compare(other[0], values[0]) != 0 {
                let r = IndexKey.prefixRange([other[0]])
                #expect(!KeyRange(from: r.lower, to: r.upper).contains(key))
            }
        }
    }

    @Test func stringPrefixRangeHoldsExactlyTheStringsWithThatPrefix() {
        var gen = Values(rng: SplitMix64(seed: 9))
        let strings = (0..<300).map { _ in gen.string() }
        for prefix in ["", "a", "\u{0}", "\u{1}", "日", "\u{10FFFF}", "e\u{301}", "ab"] {
            let (lower, upper) = IndexKey.stringPrefixRange([], prefix)
            let range = KeyRange(from: lower, to: upper)
            for s in strings {
                let key = IndexKey.entryKey([.string(s)], documentID: "id")
                #expect(range.contains(key) == s.utf8.starts(with: prefix.utf8), "\(s.debugDescription) / \(prefix.debugDescription)")
            }
            #expect(!range.contains(IndexKey.entryKey([.int(1)], documentID: "id")))
            #expect(!range.contains(IndexKey.entryKey([.array([])], documentID: "id")))
        }
    }

    @Test func likePrefixes() {
        #expect(Planner.literalPrefix("abc%") == "abc")
        #expect(Planner.literalPrefix("a_c%") == "a")
        #expect(Planner.literalPrefix("100\\%x%") == "100%x")
        #expect(Planner.literalPrefix("%a") == "")
        #expect(Planner.literalPrefix("exact") == "exact")
    }
}
