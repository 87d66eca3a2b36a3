import PeerSyncCore
import PeerSyncStorage

/// Ordered key sets (`OrderedKeySets`): a backend's own implementation or the protocols'
/// default one over a keyspace; either must pass.
enum KeySetCases {
    static func orderedKeySets(_ t: CaseContext) throws {
        let directory = t.directory()
        let store = try t.open(directory, options: StorageOptions(busyTimeout: .seconds(20)))

        // Missing key sets read as empty; removing from or dropping one does nothing.
        try store.read { r in
            try t.checkEqual(try r.entry("a", inKeySet: "set"), nil, "entry of a missing key set")
            try t.checkEqual(try entryKeys(r, "set"), [], "enumeration of a missing key set")
        }
        try store.write { w in
            try t.checkEqual(try w.removeEntry("a", inKeySet: "set"), false, "removeEntry in a missing key set")
            try w.dropKeySet("set")
        }

        // Round trip, empty and binary values, replace, remove; a keyspace of the same name is
        // another thing.
        let binary = (0...255).map { UInt8($0) }
        let keys = ["a", "a1", "a2", "ab", "b", "ba", "c", "d"]
        try store.write { w in
            for key in keys.reversed() { try w.putEntry(key, value: key.bytes, inKeySet: "set") }
            try w.putEntry("empty", value: [], inKeySet: "other")
            try w.putEntry("binary", value: binary, inKeySet: "other")
            try w.put(Record(key: "a", body: "record".bytes), in: "set")
            try w.putEntry("c", value: "c2".bytes, inKeySet: "set")
            try t.checkEqual(try w.entry("c", inKeySet: "set"), "c2".bytes, "the writer sees its replace")
            try t.checkEqual(try w.removeEntry("x", inKeySet: "set"), false, "removeEntry of a missing key")
        }
        try store.read { r in
            try t.checkEqual(try r.entry("a", inKeySet: "set"), "a".bytes, "entry a")
            try t.checkEqual(try r.entry("c", inKeySet: "set"), "c2".bytes, "a replaced entry")
            try t.checkEqual(try r.entry("x", inKeySet: "set"), nil, "a missing key")
            try t.checkEqual(try r.entry("empty", inKeySet: "other"), [], "an empty value is a value")
            try t.checkBytes(try r.entry("binary", inKeySet: "other"), binary, "every byte value")
            try t.checkEqual(try r.entry("empty", inKeySet: "set"), nil, "key sets are separate")
            try t.checkEqual(try r.get("a", in: "set")?.body, "record".bytes, "the keyspace of the same name")
            try t.checkEqual(try r.count(in: "set", includeDeleted: true), 1, "the keyspace holds its own record only")
            try t.checkEqual(try entryKeys(r, "set"), keys, "all keys")
        }

        // Ranges: every combination of bounds against KeyRange.contains, both directions.
        try store.read { r in
            let bounds: [String?] = [nil, "", "a", "a0", "a1", "ab", "abc", "b", "c", "d", "e", "\u{7F}"]
            for lower in bounds {
                for upper in bounds {
                    for inclusive in [false, true] {
                        let range = KeyRange(from: lower, to: upper, includesUpperBound: inclusive)
                        let expected = keys.filter(range.contains)
                        let name = "\(brief(lower)) ..\(inclusive ? "." : "<") \(brief(upper))"
                        try t.checkEqual(try entryKeys(r, "set", range: range), expected, "key set range \(name)")
                        try t.checkEqual(try entryKeys(r, "set", range: range, descending: true), expected.reversed(),
                                         "key set range \(name), descending")
                    }
                }
            }
            for (range, expected) in [(KeyRange.prefix("a"), ["a", "a1", "a2", "ab"]), (.prefix("b"), ["b", "ba"])] {
                try t.checkEqual(try entryKeys(r, "set", range: range), expected, "prefix \(brief(range.lowerBound))")
            }
            var pairs: [String] = []
            try r.enumerateEntries(inKeySet: "set", range: .all, descending: false) { key, value in
                pairs.append(key + "=" + String(decoding: value, as: UTF8.self))
                return pairs.count < 3
            }
            try t.checkEqual(pairs, ["a=a", "a1=a1", "a2=a2"], "values in the enumeration, stopping after 3")
            do {
                try r.enumerateEntries(inKeySet: "set", range: .all, descending: true) { _, _ in throw IntentionalRollback(tag: 3) }
                throw t.failure("an error thrown by the enumeration body was swallowed", file: #fileID, line: #line)
            } catch let error as IntentionalRollback {
                try t.checkEqual(error, IntentionalRollback(tag: 3), "error rethrown from the enumeration body")
            }
        }

        // UTF-8 byte order (not UTF-16, not Unicode collation); canonically equivalent keys
        // are distinct.
        let unicode = ["z", "\u{7F}", "é", "e\u{301}", "\u{FFFD}", "\u{FF5E}", "\u{1F600}", "\u{10000}", "A", "a\u{0}"]
        try store.write { w in
            for (i, key) in unicode.enumerated() { try w.putEntry(key, value: [UInt8(i)], inKeySet: "unicode") }
        }
        try store.read { r in
            try t.checkEqual(try entryKeys(r, "unicode"), unicode.sorted(by: byteOrder), "UTF-8 byte order")
            try t.checkEqual(try r.entry("é", inKeySet: "unicode"), [2], "precomposed é")
            try t.checkEqual(try r.entry("e\u{301}", inKeySet: "unicode"), [3], "decomposed é")
        }

        // Rollback: puts, removes and drops of a transaction that throws leave nothing.
        do {
            try store.write { w in
                try w.putEntry("new", value: "n".bytes, inKeySet: "set")
                try w.removeEntry("a", inKeySet: "set")
                try w.dropKeySet("other")
                try w.putEntry("k", value: [], inKeySet: "created")
                try t.checkEqual(try w.entry("a", inKeySet: "set"), nil, "the writer sees its remove")
                try t.checkEqual(try w.entry("binary", inKeySet: "other"), nil, "the writer sees its drop")
                throw IntentionalRollback(tag: 1)
            }
            throw t.failure("the write did not rethrow", file: #fileID, line: #line)
        } catch let error as IntentionalRollback {
            try t.checkEqual(error, IntentionalRollback(tag: 1), "error rethrown")
        }
        try store.read { r in
            try t.checkEqual(try entryKeys(r, "set"), keys, "a rolled-back transaction left the key set as it was")
            try t.checkBytes(try r.entry("binary", inKeySet: "other"), binary, "a rolled-back drop")
            try t.checkEqual(try entryKeys(r, "created"), [], "a rolled-back key set creation")
        }

        // Within one transaction the writer sees every put at once, however the backend
        // writes them (SQLite holds puts back and writes them sorted at the commit): a put
        // then a remove of one key, a key put twice, puts in reverse order then an
        // enumeration, a put into a new key set then a drop of it.
        try store.write { w in
            try w.putEntry("p", value: [1], inKeySet: "held")
            try t.checkEqual(try w.removeEntry("p", inKeySet: "held"), true, "removeEntry of a key put in the same transaction")
            try t.checkEqual(try w.entry("p", inKeySet: "held"), nil, "a key put then removed")
            for key in ["z", "y", "x"] { try w.putEntry(key, value: key.bytes, inKeySet: "held") }
            try w.putEntry("y", value: "y2".bytes, inKeySet: "held")
            try t.checkEqual(try entryKeys(w, "held"), ["x", "y", "z"], "the writer enumerates its puts in order")
            try t.checkEqual(try w.entry("y", inKeySet: "held"), "y2".bytes, "the last put of a key wins")
            try w.putEntry("w", value: [], inKeySet: "held")
            try w.putEntry("y", value: "y3".bytes, inKeySet: "held")
            try w.putEntry("gone", value: [], inKeySet: "dropped in its transaction")
            try w.dropKeySet("dropped in its transaction")
        }
        try store.read { r in
            try t.checkEqual(try entryKeys(r, "held"), ["w", "x", "y", "z"], "puts of one transaction after its commit")
            try t.checkEqual(try r.entry("y", inKeySet: "held"), "y3".bytes, "the last put of a key wins after the commit")
            try t.checkEqual(try entryKeys(r, "dropped in its transaction"), [], "a key set dropped in the transaction of its puts")
        }
        try store.write { w in try w.dropKeySet("held") }

        // A reader keeps its snapshot while another thread commits.
        try store.read { r in
            try t.checkEqual(try r.entry("a", inKeySet: "set"), "a".bytes, "the reader's first read")
            let writer = CaseThread(name: "keyset-writer") {
                try store.write { w in
                    try w.putEntry("a", value: "a2".bytes, inKeySet: "set")
                    try w.removeEntry("b", inKeySet: "set")
                    try w.putEntry("e", value: [], inKeySet: "set")
                }
            }
            try t.join(writer, "a writer committing while a reader is open")
            try t.checkEqual(try r.entry("a", inKeySet: "set"), "a".bytes, "the reader still sees the old value")
            try t.checkEqual(try entryKeys(r, "set"), keys, "the reader's enumeration")
        }
        let committed = ["a", "a1", "a2", "ab", "ba", "c", "d", "e"]

        // Drop: gone, the keyspace of the same name stays; re-created empty. Reopen keeps the rest.
        try store.write { w in
            try w.dropKeySet("unicode")
            try w.dropKeySet("set")
            try w.putEntry("after", value: [1], inKeySet: "set")
            try w.putEntry("a", value: "a2".bytes, inKeySet: "kept")
        }
        try store.read { r in
            try t.checkEqual(try entryKeys(r, "unicode"), [], "a dropped key set")
            try t.checkEqual(try entryKeys(r, "set"), ["after"], "a key set re-created after its drop")
            try t.checkEqual(try r.get("a", in: "set")?.body, "record".bytes, "dropping a key set keeps the keyspace")
        }
        try store.write { w in
            for key in committed { try w.putEntry(key, value: key.bytes, inKeySet: "kept") }
            try w.dropKeyspace("set")
        }
        try store.close()
        let reopened = try t.open(directory)
        try reopened.read { r in
            try t.checkEqual(try entryKeys(r, "kept"), committed, "key set entries after reopening")
            try t.checkEqual(try r.entry("d", inKeySet: "kept"), "d".bytes, "a value after reopening")
            try t.checkEqual(try entryKeys(r, "set"), ["after"], "dropping a keyspace keeps the key set")
            try t.checkBytes(try r.entry("binary", inKeySet: "other"), binary, "binary value after reopening")
        }
    }

    /// More key-set puts in one write transaction than a backend may hold back
    /// (`PendingKeySetPuts.maxPendingPuts` + 1,000, in a scrambled order), then replaced and
    /// removed keys among them: the writer sees its own puts before and after a backend's early
    /// write-out, and the commit keeps every one, the last put of a key winning.
    static func manyKeySetPutsInOneTransaction(_ t: CaseContext) throws {
        let store = try t.open(t.directory(), options: StorageOptions(busyTimeout: .seconds(20)))
        let count = PendingKeySetPuts.maxPendingPuts + 1_000
        func key(_ i: Int) -> String {
            let digits = String(i)
            return "k" + String(repeating: "0", count: max(0, 6 - digits.count)) + digits
        }
        // Position i puts key (i × 7919) mod count: a permutation (7919 is a prime that does
        // not divide count), far from key order, the same on every run.
        let order = (0..<count).map { key(($0 * 7919) % count) }
        try store.write { w in
            for (i, k) in order.enumerated() {
                try w.putEntry(k, value: [UInt8(truncatingIfNeeded: i)], inKeySet: "big")
                if i == 10 { try t.checkEqual(try w.entry(order[3], inKeySet: "big"), [3], "the writer's own held-back put") }
            }
            try w.putEntry(key(0), value: [42], inKeySet: "big")
            try t.checkEqual(try w.removeEntry(key(1), inKeySet: "big"), true, "removing a put of this transaction")
            try t.checkEqual(try w.entry(key(0), inKeySet: "big"), [42], "a replaced entry, seen by the writer")
            try w.putEntry(key(2), value: [43], inKeySet: "big")
        }
        try store.read { r in
            try t.checkEqual(try entryKeys(r, "big"), (0..<count).filter { $0 != 1 }.map(key), "every committed key, in order")
            try t.checkEqual(try r.entry(key(0), inKeySet: "big"), [42], "a key replaced after the puts")
            try t.checkEqual(try r.entry(key(2), inKeySet: "big"), [43], "a key put again after the puts")
            try t.checkEqual(try r.entry(key(1), inKeySet: "big"), nil, "a removed key")
            try t.checkEqual(try r.entry(order[count - 1], inKeySet: "big"), [UInt8(truncatingIfNeeded: count - 1)],
                             "the last put")
        }
        try store.close()
    }

    private static func entryKeys(_ reader: any StorageReader, _ keySet: String, range: KeyRange = .all,
                                  descending: Bool = false) throws -> [String] {
        var keys: [String] = []
        try reader.enumerateEntries(inKeySet: keySet, range: range, descending: descending) { key, _ in
            keys.append(key)
            return true
        }
        return keys
    }
}
