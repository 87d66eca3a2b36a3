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
            for i in 0..<150 {
                let key = "k\(i % 2 == 0 ? "\u{E9}" : "e\u{301}")\(i / 2)"
                try w.put(Record(key: key, version: "1-m".bytes, body: key.bytes, extra: "tree".bytes), in: "many")
            }
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
            // Many keys at once: the records there are, in key byte order, each once.
            var many: [Record] = []
            try r.getManyWithoutExtra(["d", "missing", "b", "a", "c", "b", "bb", ""], in: "ks") { record in
                many.append(record)
                return true
            }
            var expectedMany: [Record] = []
            for key in ["", "a", "b", "bb", "c", "d"] {
                if let record = try r.getWithoutExtra(key, in: "ks") { expectedMany.append(record) }
            }
            try t.checkEqual(many, expectedMany, "getManyWithoutExtra \(when)")
            var stoppedAfter = 0
            try r.getManyWithoutExtra(["a", "b", "d"], in: "ks") { _ in
                stoppedAfter += 1
                return false
            }
            try t.checkEqual(stoppedAfter, 1, "getManyWithoutExtra stops when its body returns false \(when)")
            var inMissing = 0
            try r.getManyWithoutExtra(["a", "b"], in: "missing keyspace") { _ in
                inMissing += 1
                return true
            }
            try t.checkEqual(inMissing, 0, "getManyWithoutExtra in a missing keyspace \(when)")
            // More keys than one lookup takes (SQLite: 64 per statement), distinct only by
            // their bytes ("\u{E9}" and "e\u{301}" are canonically equal), a body reading
            // while the lookup runs.
            let manyKeys = (0..<150).map { "k\($0 % 2 == 0 ? "\u{E9}" : "e\u{301}")\($0 / 2)" }
            var gotKeys: [String] = []
            try r.getManyWithoutExtra(manyKeys.reversed(), in: "many") { record in
                gotKeys.append(record.key)
                var nested = 0
                try r.getManyWithoutExtra([record.key, manyKeys[1]], in: "many") { _ in
                    nested += 1
                    return true
                }
                try t.checkEqual(nested, Array(record.key.utf8) == Array(manyKeys[1].utf8) ? 1 : 2, "a lookup inside a lookup \(when)")
                return true
            }
            var expectedKeys: [String] = []
            try r.enumerate(in: "many") { record in
                expectedKeys.append(record.key)
                return true
            }
            try t.checkEqual(gotKeys.count, 150, "getManyWithoutExtra of 150 keys \(when)")
            try t.checkEqual(gotKeys.map { Array($0.utf8) }, expectedKeys.map { Array($0.utf8) },
                             "getManyWithoutExtra of 150 keys, in key byte order \(when)")
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
