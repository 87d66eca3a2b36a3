import PeerSyncCore
import PeerSyncStorage

/// Enumeration by key range and by sequence.
enum EnumerationCases {
    static func byKeyRange(_ t: CaseContext) throws {
        let store = try t.open()
        let keys = ["a", "a1", "a2", "ab", "b", "ba", "c", "d"]
        try store.write { w in
            for key in keys.reversed() { try w.put(Record(key: key, body: key.bytes), in: "ks") }
            try w.put(Record(key: "noise"), in: "aa-other")
            try w.put(Record(key: "noise"), in: "zz-other")
            _ = try w.delete("c", in: "ks")
        }
        try store.read { r in
            try t.checkEqual(try t.keys(r, "ks"), keys, "all keys, ascending (tombstones included)")
            try t.checkEqual(try t.keys(r, "ks", descending: true), keys.reversed(), "all keys, descending")

            // Hand-checked ranges.
            let cases: [(KeyRange, [String], String)] = [
                (KeyRange(from: "a1", to: "b"), ["a1", "a2", "ab"], "[a1, b)"),
                (KeyRange(from: "a1", to: "b", includesUpperBound: true), ["a1", "a2", "ab", "b"], "[a1, b]"),
                (KeyRange(to: "ab"), ["a", "a1", "a2"], "[-, ab)"),
                (KeyRange(from: "b"), ["b", "ba", "c", "d"], "[b, -)"),
                (KeyRange(from: "a15", to: "bb", includesUpperBound: true), ["a2", "ab", "b", "ba"], "[a15, bb] (absent bounds)"),
                (KeyRange(from: "b", to: "b"), [], "[b, b)"),
                (KeyRange(from: "b", to: "b", includesUpperBound: true), ["b"], "[b, b]"),
                (KeyRange(from: "c", to: "a", includesUpperBound: true), [], "lower > upper"),
                (KeyRange(from: "e"), [], "above every key"),
                (.prefix("a"), ["a", "a1", "a2", "ab"], "prefix a"),
                (.prefix("b"), ["b", "ba"], "prefix b"),
                (.prefix("a1"), ["a1"], "prefix a1"),
                (.prefix("x"), [], "prefix x"),
                (.prefix(""), keys, "empty prefix"),
            ]
            for (range, expected, name) in cases {
                try t.checkEqual(try t.keys(r, "ks", range: range), expected, "range \(name), ascending")
                try t.checkEqual(try t.keys(r, "ks", range: range, descending: true), expected.reversed(),
                                 "range \(name), descending")
            }

            // Every combination of bounds against KeyRange.contains.
            let bounds: [String?] = [nil, "", "a", "a0", "a1", "ab", "abc", "b", "c", "d", "e", "\u{7F}"]
            for lower in bounds {
                for upper in bounds {
                    for inclusive in [false, true] {
                        let range = KeyRange(from: lower, to: upper, includesUpperBound: inclusive)
                        let expected = keys.filter(range.contains)
                        let name = "\(brief(lower)) ..\(inclusive ? "." : "<") \(brief(upper))"
                        try t.checkEqual(try t.keys(r, "ks", range: range), expected, "range \(name), ascending")
                        try t.checkEqual(try t.keys(r, "ks", range: range, descending: true), expected.reversed(),
                                         "range \(name), descending")
                    }
                }
            }

            // Records carry their data; early stop; errors propagate.
            try r.enumerate(in: "ks") { record in
                if record.key != "c" { try t.checkEqual(record.body, record.key.bytes, "body of \(record.key) in enumeration") }
                return true
            }
            for descending in [false, true] {
                var seen: [String] = []
                try r.enumerate(in: "ks", range: .all, descending: descending) { record in
                    seen.append(record.key)
                    return seen.count < 3
                }
                let expected = Array((descending ? keys.reversed() : keys).prefix(3))
                try t.checkEqual(seen, expected, "stopping after 3 records (descending: \(descending))")
            }
            var calls = 0
            do {
                try r.enumerate(in: "ks", range: .prefix("a"), descending: false) { _ in
                    calls += 1
                    throw IntentionalRollback(tag: 7)
                }
                throw t.failure("an error thrown by the enumeration body was swallowed", file: #fileID, line: #line)
            } catch let error as IntentionalRollback {
                try t.checkEqual(error, IntentionalRollback(tag: 7), "error rethrown from the enumeration body")
            }
            try t.checkEqual(calls, 1, "enumeration stops at the first thrown error")
        }
    }

    static func bySequence(_ t: CaseContext) throws {
        let store = try t.open()
        try store.write { w in
            for i in 0..<10 { try w.put(Record(key: "k\(i)", body: [UInt8(i)]), in: "ks") }  // 1...10
        }
        try store.write { w in
            try w.put(Record(key: "k3", body: [33]), in: "ks")                 // 11
            _ = try w.delete("k5", in: "ks")                                   // 12
        }
        try store.write { w in
            _ = try w.purge("k7", in: "ks")
            try w.put(Record(key: "k3", body: [34]), in: "ks")                 // 13
            try w.put(Record(key: "elsewhere"), in: "other")
        }
        let expected = [KeySeq("k0", 1), KeySeq("k1", 2), KeySeq("k2", 3), KeySeq("k4", 5), KeySeq("k6", 7),
                        KeySeq("k8", 9), KeySeq("k9", 10), KeySeq("k5", 12), KeySeq("k3", 13)]
        try store.read { r in
            try t.checkEqual(try t.changes(r, "ks"), expected,
                             "by sequence: each record once, at its newest sequence; purged records absent")
            for since in UInt64(0)...15 {
                try t.checkEqual(try t.changes(r, "ks", since: since), expected.filter { $0.sequence > since },
                                 "by sequence since \(since)")
            }
            try t.checkEqual(try t.changes(r, "ks", since: UInt64.max), [], "by sequence since UInt64.max")

            var tombstone: Record?
            var newest: Record?
            try r.enumerate(in: "ks", since: 11) { record in
                if record.key == "k5" { tombstone = record }
                if record.key == "k3" { newest = record }
                return true
            }
            try t.check(tombstone?.flags.contains(.deleted) == true, "the tombstone appears with the deleted flag")
            try t.checkEqual(newest?.body, [34], "the updated record appears with its newest body")

            // Resuming in pages of 2 from the last sequence seen gives the same feed.
            var paged: [KeySeq] = []
            var since: UInt64 = 0
            while true {
                var page: [KeySeq] = []
                try r.enumerate(in: "ks", since: since) { record in
                    page.append(KeySeq(record.key, record.sequence))
                    return page.count < 2
                }
                if page.isEmpty { break }
                try t.check(page.count <= 2, "enumeration must stop when the body returns false")
                paged += page
                since = page[page.count - 1].sequence
            }
            try t.checkEqual(paged, expected, "the feed read in pages of 2")
            try t.checkEqual(try t.changes(r, "other"), [KeySeq("elsewhere", 1)], "another keyspace's feed")
        }
    }
}
