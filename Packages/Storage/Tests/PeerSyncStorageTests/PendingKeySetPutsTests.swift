import PeerSyncCore
@testable import PeerSyncStorage
import Testing

/// The held-back key-set puts the SQLite and LMDB backends write at the commit: what
/// `takeSorted` hands them must be every put, in the order of the keys' UTF-8 bytes (a prefix
/// first), a key put twice in the order of its puts, with its own value.
@Suite struct PendingKeySetPutsTests {
    /// The puts, as (key bytes, value) in the order `takeSorted` gives them.
    private static func taken(_ pending: PendingKeySetPuts) -> (puts: [([UInt8], [UInt8])], sorted: SortedKeySetPuts) {
        let sorted = pending.takeSorted()
        let puts = sorted.spans.map { span in
            (Array(sorted.bytes[span.keyStart..<(span.keyStart + span.keyCount)]),
             Array(sorted.bytes[span.valueStart..<(span.valueStart + span.valueCount)]))
        }
        return (puts, sorted)
    }

    /// The expected order: by key bytes (memcmp, shorter first), then by the order of the puts.
    private static func expected(_ puts: [(String, [UInt8])]) -> [([UInt8], [UInt8])] {
        puts.enumerated()
            .map { (order: $0.offset, key: Array($0.element.0.utf8), value: $0.element.1) }
            .sorted { a, b in
                if a.key != b.key { return a.key.lexicographicallyPrecedes(b.key) }
                return a.order < b.order
            }
            .map { ($0.key, $0.value) }
    }

    /// Random keys around the 8 bytes the sort compares first as one integer: shorter, as long
    /// and longer keys sharing prefixes, NUL and high bytes, multi-byte characters, duplicates.
    @Test func takeSortedOrdersByKeyBytesThenByPutOrder() {
        var random = SeededGenerator(seed: 0x5EED_4B45)
        let pieces = ["", "\u{0}", "\u{1}", "a", "b", "ab", "abcdefg", "abcdefgh", "abcdefghi", "é", "\u{7F}",
                      "\u{80}", "\u{10FFFF}", "zz", "\u{6}0000", "\u{6}4000"]
        let pending = PendingKeySetPuts(name: "set")
        for round in 0..<3 {
            var puts: [(String, [UInt8])] = []
            for _ in 0..<2_000 {
                var key = ""
                for _ in 0..<Int.random(in: 0...4, using: &random) { key += pieces.randomElement(using: &random)! }
                let value = (0..<Int.random(in: 0...3, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                puts.append((key, value))
                pending.put(key, value)
            }
            let (got, sorted) = Self.taken(pending)
            let want = Self.expected(puts)
            #expect(got.count == want.count, "round \(round)")
            #expect(got.map(\.0) == want.map(\.0), "round \(round): key order")
            #expect(got.map(\.1) == want.map(\.1), "round \(round): each put's value, a repeated key's in put order")
            #expect(sorted.keyByteCount == puts.reduce(0) { $0 + $1.0.utf8.count })
            #expect(sorted.valueByteCount == puts.reduce(0) { $0 + $1.1.count })
            #expect(pending.isEmpty, "takeSorted forgets the puts")
        }
    }

    /// Only empty keys and values (a run with no bytes at all): every put, in put order.
    @Test func emptyKeysAndValuesKeepThePutOrder() {
        let pending = PendingKeySetPuts(name: "set")
        for _ in 0..<5 { pending.put("", []) }
        let (got, sorted) = Self.taken(pending)
        #expect(got.count == 5)
        #expect(sorted.spans.map(\.keyStart) == [0, 0, 0, 0, 0])
        #expect(got.allSatisfy { $0.0.isEmpty && $0.1.isEmpty })
        #expect(sorted.bytes.isEmpty)
    }
}

/// A small deterministic generator (SplitMix64), so a failure repeats.
private struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
