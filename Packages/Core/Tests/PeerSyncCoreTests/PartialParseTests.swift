import Testing
@testable import PeerSyncCore

/// `JSONValue.objectProperties(parsing:keys:)` equals the full parse restricted to the keys,
/// on random nested objects (escapes, Unicode keys and strings, numbers, brackets in strings),
/// in canonical and in spaced-out text.
@Suite struct PartialParseTests {
    static func randomValue(_ rng: inout SplitMix64, depth: Int) -> JSONValue {
        let strings = ["", "a", "x,y}", "q\"uote", "back\\slash]", "名前", "e\u{301}", "tab\t{[", "é"]
        switch Int(rng.next() % (depth > 2 ? 6 : 8)) {
        case 0: return .null
        case 1: return .bool(rng.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: rng.next()) >> Int64(rng.next() % 60))
        case 3: return .double(Double(Int64(rng.next() % 20_000) - 10_000) / 7)
        case 4, 5: return .string(strings[Int(rng.next() % UInt64(strings.count))])
        case 6: return .array((0..<Int(rng.next() % 4)).map { _ in randomValue(&rng, depth: depth + 1) })
        default: return .object(randomObject(&rng, depth: depth + 1))
        }
    }

    static let keyNames = ["a", "b", "n", "v", "k", "名", "é", "e\u{301}", "x\"y", "", "long_key_name"]

    static func randomObject(_ rng: inout SplitMix64, depth: Int) -> [String: JSONValue] {
        var object: [String: JSONValue] = [:]
        for _ in 0..<Int(rng.next() % 6) {
            object[keyNames[Int(rng.next() % UInt64(keyNames.count))]] = randomValue(&rng, depth: depth)
        }
        return object
    }

    @Test func equalsTheFullParseRestrictedToTheKeys() throws {
        var rng = SplitMix64(seed: 14)
        // One dictionary reused for every object (as a query's scan does), and one kept
        // object: reusing must neither leak keys of an earlier object nor change a kept one.
        var reused: [String: JSONValue] = [:]
        var kept: (value: [String: JSONValue], expected: [String: JSONValue])?
        for _ in 0..<2_000 {
            let object = Self.randomObject(&rng, depth: 0)
            var keys = Set<String>()
            for name in Self.keyNames where rng.next() % 3 == 0 { keys.insert(name) }
            let canonical = JSONValue.object(object).canonicalData
            let full = try #require(try JSONValue(parsing: canonical).objectValue)
            let expected = full.filter { keys.contains($0.key) }
            #expect(try JSONValue.objectProperties(parsing: canonical, keys: keys) == expected,
                    "\(JSONValue.object(object).canonicalString) keys \(keys.sorted())")
            try JSONValue.objectProperties(parsing: canonical, selecting: JSONValue.PropertySelection(keys), into: &reused)
            #expect(reused == expected, "reused: \(JSONValue.object(object).canonicalString) keys \(keys.sorted())")
            // Canonical text holds each key once: stopping at the last selected key found
            // gives the same properties.
            var stopped: [String: JSONValue] = [:]
            try JSONValue.objectProperties(parsing: canonical, selecting: JSONValue.PropertySelection(keys), into: &stopped,
                                           uniqueKeys: true)
            #expect(stopped == expected, "uniqueKeys: \(JSONValue.object(object).canonicalString) keys \(keys.sorted())")
            if kept == nil && expected.count >= 2 { kept = (reused, expected) }
            // The same text with white space around every structural character.
            var spaced: [UInt8] = []
            var inString = false, escaped = false
            for byte in canonical {
                if inString {
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                    spaced.append(byte)
                } else {
                    if byte == UInt8(ascii: "\"") {
                        inString = true
                        spaced.append(contentsOf: [0x20, byte])
                    } else if "{}[]:,".utf8.contains(byte) {
                        spaced.append(contentsOf: [0x20, byte, 0x0A])
                    } else {
                        spaced.append(byte)   // inside a number or literal
                    }
                }
            }
            #expect(try JSONValue.objectProperties(parsing: spaced, keys: keys) == expected)
        }
        let held = try #require(kept)
        #expect(held.value == held.expected, "a dictionary kept from an earlier parse changed")
    }

    @Test func aSelectionMatchesKeysOfEveryKind() throws {
        // ASCII and non-ASCII keys, keys that are prefixes of others, the empty key.
        let object: JSONValue = ["a": 1, "ab": 2, "abc": 3, "": 4, "名": 5, "e\u{301}": 6, "x\"y": 7]
        let bytes = object.canonicalData
        for keys: Set<String> in [["a"], ["ab"], ["abc", ""], ["名"], ["é"], ["e\u{301}"], ["x\"y", "a"], ["zz"], []] {
            let full = try #require(try JSONValue(parsing: bytes).objectValue)
            let expected = full.filter { keys.contains($0.key) }
            #expect(try JSONValue.objectProperties(parsing: bytes, selecting: JSONValue.PropertySelection(keys)) == expected,
                    "keys \(keys.sorted())")
        }
    }

    /// With `uniqueKeys` the parse ends at the last selected key found: what follows is not
    /// read (here it is not even JSON); without it the whole text is read and refused.
    @Test func uniqueKeysStopsAtTheLastSelectedKeyFound() throws {
        let text = Array(#"{"a":1,"b":"two","c":[3 !"#.utf8)
        var found: [String: JSONValue] = [:]
        try JSONValue.objectProperties(parsing: text, selecting: JSONValue.PropertySelection(["a", "b"]), into: &found,
                                       uniqueKeys: true)
        #expect(found == ["a": 1, "b": "two"])
        try JSONValue.objectProperties(parsing: text, selecting: JSONValue.PropertySelection([]), into: &found,
                                       uniqueKeys: true)
        #expect(found.isEmpty)
        #expect(throws: PeerSyncError.self) {
            try JSONValue.objectProperties(parsing: text, selecting: JSONValue.PropertySelection(["a", "b"]), into: &found)
        }
        // A selected key the object lacks: read to the end, as without `uniqueKeys`.
        #expect(throws: PeerSyncError.self) {
            try JSONValue.objectProperties(parsing: text, selecting: JSONValue.PropertySelection(["a", "z"]), into: &found,
                                           uniqueKeys: true)
        }
    }

    @Test func refusesWhatIsNotAnObject() {
        for text in ["[1]", "1", "", "{\"a\":1", "{\"a\" 1}", "{\"a\":1} x"] {
            #expect(throws: PeerSyncError.self) { try JSONValue.objectProperties(parsing: Array(text.utf8), keys: ["a"]) }
        }
    }
}
