import Foundation
import PeerSyncCore
import PeerSyncStorage

/// Sizes, keyspaces, key and name encodings, empty and binary fields.
enum DataCases {
    static func largeBodies(_ t: CaseContext) throws {
        let store = try t.open()
        let mib = 1 << 20
        let big = Record(key: "big", version: patternBytes(count: 64 << 10, seed: 1),
                         body: patternBytes(count: 16 * mib, seed: 2), extra: patternBytes(count: mib, seed: 3))
        try t.checkEqual(try store.write { try $0.put(big, in: "ks") }, 1, "put a 16 MiB body")
        try store.read { r in
            try t.checkRecord(try r.get("big", in: "ks"), big, sequence: 1, "16 MiB record read back")
            var enumerated: Record?
            try r.enumerate(in: "ks") { enumerated = $0; return true }
            try t.checkRecord(enumerated, big, "16 MiB record from key enumeration")
            var fromFeed: Record?
            try r.enumerate(in: "ks", since: 0) { fromFeed = $0; return true }
            try t.checkRecord(fromFeed, big, "16 MiB record from sequence enumeration")
        }

        // Two more in one transaction, then shrink one and delete another.
        let second = Record(key: "big2", body: patternBytes(count: 16 * mib, seed: 4))
        let third = Record(key: "big3", body: patternBytes(count: 16 * mib + 1, seed: 5))
        try store.write { w in
            try w.put(second, in: "ks")
            try w.put(third, in: "ks")
        }
        try store.write { w in
            try w.put(Record(key: "big", body: [42]), in: "ks")
            _ = try w.delete("big2", in: "ks")
        }
        try store.read { r in
            try t.checkBytes(try r.get("big", in: "ks")?.body, [42], "a 16 MiB body replaced by 1 byte")
            try t.checkBytes(try r.get("big2", in: "ks")?.body, [], "a deleted 16 MiB body")
            try t.checkRecord(try r.get("big3", in: "ks"), third, sequence: 3, "16 MiB + 1 byte record")
        }
        try store.close()
        let reopened = try t.open()
        try reopened.read { r in
            try t.checkRecord(try r.get("big3", in: "ks"), third, sequence: 3, "16 MiB + 1 byte record after reopening")
        }
    }

    static func manyKeyspacesAndDrop(_ t: CaseContext) throws {
        let store = try t.open()
        let names = (0..<250).map { String(format: "ks.%03d", $0) }
        try store.write { w in
            for (i, name) in names.enumerated() {
                try w.put(Record(key: "a", body: [UInt8(i % 256)]), in: name)
                try w.put(Record(key: "b"), in: name)
            }
        }
        for (i, name) in names.enumerated() where i % 50 == 7 {
            try store.write { w in try w.put(Record(key: "c"), in: name) }
        }
        try store.read { r in
            try t.checkEqual(try r.keyspaces(), names, "keyspaces() lists all 250, sorted")
            for (i, name) in names.enumerated() {
                try t.checkEqual(try r.get("a", in: name)?.body, [UInt8(i % 256)], "record a of \(name)")
                try t.checkEqual(try r.lastSequence(in: name), i % 50 == 7 ? 3 : 2, "lastSequence of \(name)")
                try t.checkEqual(try r.count(in: name, includeDeleted: true), i % 50 == 7 ? 3 : 2, "count of \(name)")
            }
        }

        // Drop every other keyspace (one transaction), and one that never existed.
        let dropped = names.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)
        let kept = names.enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
        try store.write { w in
            for name in dropped { try w.dropKeyspace(name) }
            try w.dropKeyspace("never-existed")
        }
        func checkAfterDrop(_ r: any StorageReader, _ when: String) throws {
            try t.checkEqual(try r.keyspaces(), kept, "keyspaces() \(when)")
            for name in dropped.prefix(20) {
                try t.checkEqual(try r.get("a", in: name), nil, "a record of dropped \(name) \(when)")
                try t.checkEqual(try r.count(in: name, includeDeleted: true), 0, "count of dropped \(name) \(when)")
                try t.checkEqual(try r.lastSequence(in: name), 0, "lastSequence of dropped \(name) \(when)")
                try t.checkEqual(try t.changes(r, name), [], "feed of dropped \(name) \(when)")
            }
            try t.checkEqual(try r.get("b", in: kept[kept.count - 1]) != nil, true, "a record of a kept keyspace \(when)")
        }
        try store.read { try checkAfterDrop($0, "after dropping half") }

        // A drop that rolls back keeps the keyspace.
        _ = try? store.write { w -> Void in
            try w.dropKeyspace(kept[0])
            throw IntentionalRollback(tag: 0)
        }
        try store.read { r in
            try t.checkEqual(try r.count(in: kept[0], includeDeleted: true), 2, "a keyspace whose drop rolled back")
        }

        try store.close()
        let reopened = try t.open()
        try reopened.read { try checkAfterDrop($0, "after reopening") }
        try t.checkEqual(try reopened.write { try $0.put(Record(key: "x"), in: dropped[0]) }, 1,
                         "a dropped keyspace written again starts at sequence 1")
        try reopened.read { r in
            try t.checkEqual(try t.keys(r, dropped[0]), ["x"], "a re-created keyspace holds only its new record")
        }
    }

    static func keyspaceNames(_ t: CaseContext) throws {
        let store = try t.open()
        let names = [
            "_default._default", "app.tasks", "scope-1.collection_2", "with space", "quote'\"`", "semi;colon--",
            "[brackets]", "percent%_", "UPPER", "upper", "Upper", "\u{E9}t\u{E9}", "e\u{301}te\u{301}",
            "中文.集合", "emoji-😀", "dots...", "a/b\\c", "0starts-with-digit", "select", "table",
            String(repeating: "n", count: 251),
        ]
        try store.write { w in
            for (i, name) in names.enumerated() {
                try w.put(Record(key: "name", body: name.bytes), in: name)
                for _ in 0..<i % 3 { try w.put(Record(key: "name", body: name.bytes), in: name) }
            }
        }
        try store.read { r in
            try t.checkEqual(try r.keyspaces(), names.sorted(by: byteOrder),
                             "keyspaces() returns every name, distinct by bytes (case-sensitive), in byte order")
            for (i, name) in names.enumerated() {
                try t.checkEqual(try r.get("name", in: name)?.body, name.bytes, "the record of keyspace \(brief(name))")
                try t.checkEqual(try r.lastSequence(in: name), UInt64(1 + i % 3), "lastSequence of \(brief(name))")
                try t.checkEqual(try r.count(in: name, includeDeleted: true), 1, "count of \(brief(name))")
            }
        }
        try store.write { w in
            try w.dropKeyspace("upper")
            try w.dropKeyspace("e\u{301}te\u{301}")
        }
        try store.read { r in
            try t.checkEqual(try r.get("name", in: "UPPER")?.body, "UPPER".bytes, "dropping \"upper\" keeps \"UPPER\"")
            try t.checkEqual(try r.get("name", in: "\u{E9}t\u{E9}")?.body, "\u{E9}t\u{E9}".bytes,
                             "dropping the decomposed name keeps the precomposed one")
            try t.checkEqual(try r.get("name", in: "upper"), nil, "the dropped keyspace is empty")
            try t.checkEqual(try r.keyspaces().count, names.count - 2, "keyspaces() after two drops")
        }
    }

    /// Keys built from low control characters (U+0001 … U+000A, which value-index keys use as
    /// type tags and separators), hex digits and multi-byte characters: stored and enumerated
    /// in UTF-8 byte order, both ways, and bounded by ranges whose bounds end in such bytes.
    static func controlCharacterKeys(_ t: CaseContext) throws {
        let store = try t.open()
        let pieces = ["\u{1}", "\u{2}", "\u{3}", "\u{6}", "\u{7}", "\u{9}", "\n", "0", "f", "a", "\u{E9}", "\u{10FFFF}"]
        var keys = Set<String>()
        for a in pieces {
            for b in pieces { keys.insert(a + b); keys.insert("\u{7}" + a + "\u{1}" + b) }
        }
        let sorted = keys.sorted(by: byteOrder)
        try store.write { w in
            for key in sorted.reversed() { try w.put(Record(key: key, body: key.bytes), in: "ctl") }
        }
        try store.read { r in
            try t.checkEqual(try t.keys(r, "ctl"), sorted, "control-character keys in UTF-8 byte order")
            try t.checkEqual(try t.keys(r, "ctl", descending: true), sorted.reversed(), "descending")
            let bounds: [String?] = [nil, "\u{1}", "\u{2}", "\u{6}\n", "\u{7}", "\u{7}\u{7}", "\u{7}\u{7}\n", "\u{7}f\u{1}\u{1}", "\n", "a", "\u{10FFFF}"]
            for lower in bounds {
                for upper in bounds {
                    let range = KeyRange(from: lower, to: upper)
                    try t.checkEqual(try t.keys(r, "ctl", range: range), sorted.filter(range.contains),
                                     "range \(brief(lower)) ..< \(brief(upper))")
                    try t.checkEqual(try t.keys(r, "ctl", range: range, descending: true), sorted.filter(range.contains).reversed(),
                                     "range \(brief(lower)) ..< \(brief(upper)), descending")
                }
            }
        }
    }

    static func utf8KeyOrdering(_ t: CaseContext) throws {
        let store = try t.open()
        var keys = [
            "a", "B", "Z", "ab", "a b", "a~", "a\u{7F}", "~", " ", "-", "_", "0", "9",
            "\u{E9}", "e\u{301}", "e", "f",         // precomposed and decomposed é are different keys
            "\u{7FF}", "\u{800}", "\u{FFFD}", "€",   // 2- and 3-byte boundaries
            "\u{FF61}", "\u{1D11E}", "😀",           // U+FF61 < U+1D11E in UTF-8, but not in UTF-16
            "中", "中文", "中文字", "\u{10FFFF}", "\u{10FFFF}a",
            String(repeating: "k", count: 255), String(repeating: "é", count: 127),  // 255 and 254 bytes
        ]
        keys.sort(by: byteOrder)
        try store.write { w in
            for key in keys.reversed() { try w.put(Record(key: key, body: key.bytes), in: "ks") }
        }
        try store.read { r in
            try t.checkEqual(try t.keys(r, "ks"), keys, "enumeration order is UTF-8 byte order")
            try t.checkEqual(try t.keys(r, "ks", descending: true), keys.reversed(), "descending UTF-8 byte order")
            for key in keys {
                try t.checkEqual(try r.get(key, in: "ks")?.body, key.bytes, "get \(brief(key))")
            }
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), keys.count,
                             "canonically equivalent keys are distinct records")
            let bounds: [String?] = [nil, "a", "\u{E9}", "e\u{301}", "\u{800}", "\u{FF61}", "\u{1D11E}", "中", "\u{10FFFF}"]
            for lower in bounds {
                for upper in bounds {
                    for inclusive in [false, true] {
                        let range = KeyRange(from: lower, to: upper, includesUpperBound: inclusive)
                        try t.checkEqual(try t.keys(r, "ks", range: range), keys.filter(range.contains),
                                         "range \(brief(lower)) .. \(brief(upper)) (inclusive: \(inclusive))")
                    }
                }
            }
            try t.checkEqual(try t.keys(r, "ks", range: .prefix("中")), ["中", "中文", "中文字"], "a non-ASCII prefix")
            try t.checkEqual(try t.keys(r, "ks", range: .prefix("e")), ["e", "e\u{301}"], "prefix e")
            try t.checkEqual(try t.keys(r, "ks", range: .prefix("\u{E9}")),
                             keys.filter { $0.utf8.starts(with: "\u{E9}".utf8) }, "prefix é")
        }
    }

    static func emptyAndBinaryFields(_ t: CaseContext) throws {
        let store = try t.open()
        let allBytes = (0...255).map { UInt8($0) }
        let records = [
            Record(key: "empty"),
            Record(key: "zeros", version: [0], body: [0, 0, 0], extra: [0]),
            Record(key: "binary", version: allBytes, body: allBytes + allBytes.reversed(), extra: allBytes),
            Record(key: "not-utf8", version: [0xFF, 0xFE], body: [0xC3, 0x28, 0xA0, 0xA1], extra: [0x80]),
            Record(key: "high-flags", flags: RecordFlags(rawValue: 0xFFFF_FFFE), body: [1]),
            Record(key: "top-bit", flags: RecordFlags(rawValue: 1 << 31)),
            Record(key: "all-flags", flags: RecordFlags(rawValue: UInt32.max)),
        ]
        try store.write { w in
            for record in records { try w.put(record, in: "ks") }
        }
        func checkAll(_ r: any StorageReader, _ when: String) throws {
            for (i, record) in records.enumerated() {
                try t.checkRecord(try r.get(record.key, in: "ks"), record, sequence: UInt64(i + 1), "\(record.key) \(when)")
            }
            var seen = 0
            try r.enumerate(in: "ks", since: 0) { record in
                seen += 1
                if let expected = records.first(where: { $0.key == record.key }) {
                    try t.checkRecord(record, expected, "\(record.key) from the feed \(when)")
                }
                return true
            }
            try t.checkEqual(seen, records.count, "records in the feed \(when)")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), records.count - 1,
                             "count: only the record with every flag bit has the deleted bit \(when)")
        }
        try store.read { try checkAll($0, "after put") }
        try store.close()
        try t.open().read { try checkAll($0, "after reopening") }
    }
}
