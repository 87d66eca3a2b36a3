import Testing
@testable import PeerSyncCore

/// `JSONValue.canonicalized` is exactly what parsing `canonicalData` gives back: the same
/// cases (an `.int` stays an `.int`, a `.double` stays a `.double`), the same numbers and
/// strings, on random nested values with the numbers canonical JSON changes (integral and
/// non-finite doubles, -0.0, doubles beyond the `Int64` range).
@Suite struct CanonicalizedTests {
    /// Equality of cases and values (`JSONValue ==` equates `.int(1)` and `.double(1)`).
    static func identical(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.int(x), .int(y)): return x == y
        case let (.double(x), .double(y)): return x.bitPattern == y.bitPattern
        case let (.string(x), .string(y)): return x.utf8.elementsEqual(y.utf8)
        case let (.array(x), .array(y)): return x.count == y.count && zip(x, y).allSatisfy { identical($0, $1) }
        case let (.object(x), .object(y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { identical(value, $0) } ?? false }
        default: return false
        }
    }

    static let doubles: [Double] = [.nan, .infinity, -.infinity, -0.0, 0.0, 1.0, -3.0, 2.5, 1e15, 1e15 + 0.5, 9.2e18,
                                    -9.2e18, 9.1e18, 1e19, 1e300, .leastNonzeroMagnitude, 0.1, Double(1 << 53) + 2, -123456789.0]

    static func randomValue(_ rng: inout SplitMix64, depth: Int) -> JSONValue {
        switch Int(rng.next() % (depth > 2 ? 6 : 8)) {
        case 0: return .null
        case 1: return .int(Int64(bitPattern: rng.next()) >> Int64(rng.next() % 63))
        case 2, 3: return .double(doubles[Int(rng.next() % UInt64(doubles.count))])
        case 4: return .double(Double(Int64(rng.next() % 20_000) - 10_000) / 4)
        case 5: return .string(["", "a", "q\"uote", "名前", "e\u{301}", "nul\u{0}", "\u{1}"][Int(rng.next() % 7)])
        case 6: return .array((0..<Int(rng.next() % 4)).map { _ in randomValue(&rng, depth: depth + 1) })
        default:
            var object: [String: JSONValue] = [:]
            for _ in 0..<Int(rng.next() % 5) { object[["a", "b", "n", "é", ""][Int(rng.next() % 5)]] = randomValue(&rng, depth: depth + 1) }
            return .object(object)
        }
    }

    @Test func canonicalizedIsTheParseOfTheCanonicalText() throws {
        var rng = SplitMix64(seed: 14)
        var values: [JSONValue] = CanonicalizedTests.doubles.map { .double($0) } + [.bool(true), .int(.min), .int(.max)]
        for _ in 0..<3_000 { values.append(CanonicalizedTests.randomValue(&rng, depth: 0)) }
        for value in values {
            let parsed = try JSONValue(parsing: value.canonicalData)
            #expect(CanonicalizedTests.identical(value.canonicalized, parsed), "\(value.canonicalString)")
        }
        // What changes: non-finite numbers become null, integral doubles integers.
        #expect(CanonicalizedTests.identical(JSONValue.double(.nan).canonicalized, .null))
        #expect(CanonicalizedTests.identical(JSONValue.array([.double(2), .double(-0.0)]).canonicalized, .array([.int(2), .int(0)])))
        #expect(CanonicalizedTests.identical(JSONValue.double(1e19).canonicalized, .double(1e19)))
    }
}
