import PeerSyncCore
import PeerSyncStorage

/// Reads without ``Record/extra`` (`getWithoutExtra`, `enumerateWithoutExtra`): a backend's own
/// implementation or the protocol's default one; either must give exactly the records of
/// `get`/`enumerate` with `extra` empty — in a read snapshot and in a write transaction that
/// changed records it has not committed yet.
enum WithoutExtraCases {
    static func readsWithoutExtra(_ t: CaseContext) throws {
        let store = try t.open()
        let binary = (0...255).map { UInt8($0) }
        let big = [UInt8](repeating: 0xAB, count: 100_000)
        try store.write { w in
            try w.put(Record(key: "a", flags: .conflicted, version: "1-a".bytes, body: "{\"a\":1}".bytes, extra: "tree a".bytes), in: "ks")
            try w.put(Record(key: "b", version: "2-b".bytes, body: binary, extra: []), in: "ks")
            try w.put(Record(key: "c", version: "3-c".bytes, body: "{}".bytes, extra: big), in: "ks")
            try w.put(Record(key: "d", version: "1-d".bytes, body: "{\"d\":true}".bytes, extra: binary), in: "ks")
            _ = try w.delete("c", in: "ks")   // a tombstone keeps its extra
            try w.put(Record(key: "a", extra: "other keyspace".bytes), in: "other")
        }
        let keys = ["a", "b", "c", "d"]
        func check(_ r: any StorageReader, _ when: String) throws {
            for key in keys + ["missing", ""] {
                var expected = try r.get(key, in: "ks")
                expected?.extra = []
                let actual = try r.getWithoutExtra(key, in: "ks")
                try t.checkEqual(actual, expected, "getWithoutExtra(\(key)) \(when)")
            }
            try t.checkEqual(try r.getWithoutExtra("a", in: "missing keyspace"), nil, "a missing keyspace \(when)")
            let ranges: [KeyRange] = [.all, KeyRange(from: "b"), KeyRange(from: "a0", to: "c", includesUpperBound: true),
                                      KeyRange(to: "b"), .prefix("d"), KeyRange(from: "x")]
            for range in ranges {
                for descending in [false, true] {
                    var expected: [Record] = []
                    try r.enumerate(in: "ks", range: range, descending: descending) { record in
                        var record = record
                        record.extra = []
                        expected.append(record)
                        return true
                    }
                    var actual: [Record] = []
                    try r.enumerateWithoutExtra(in: "ks", range: range, descending: descending) { record in
                        actual.append(record)
                        return true
                    }
                    try t.checkEqual(actual, expected, "enumerateWithoutExtra \(range) descending: \(descending) \(when)")
                }
            }
            var seen = 0
            try r.enumerateWithoutExtra(in: "ks", range: .all, descending: false) { _ in
                seen += 1
                return seen < 2
            }
            try t.checkEqual(seen, 2, "enumerateWithoutExtra stops when its body returns false \(when)")
            var none = 0
            try r.enumerateWithoutExtra(in: "missing keyspace", range: .all, descending: false) { _ in
                none += 1
                return true
            }
            try t.checkEqual(none, 0, "a missing keyspace enumerates nothing \(when)")
        }
        try store.read { r in try check(r, "in a read transaction") }
        try store.write { w in
            try w.put(Record(key: "a", version: "2-a".bytes, body: "{\"a\":2}".bytes, extra: "tree a2".bytes), in: "ks")
            try w.put(Record(key: "bb", version: "1-bb".bytes, body: "{}".bytes, extra: "tree bb".bytes), in: "ks")
            _ = try w.purge("d", in: "ks")
            try check(w, "in a write transaction with uncommitted changes")
        }
        try store.read { r in try check(r, "after the commit") }
    }
}
