import PeerSyncCore
import PeerSyncStorage

/// put/get, tombstones, purge, sequences, counts.
enum BasicCases {
    static func putGetReplace(_ t: CaseContext) throws {
        let store = try t.open()
        let first = Record(key: "doc1", sequence: 999, flags: [.hasAttachments], version: [1, 2],
                           body: "hello".bytes, extra: [9, 8, 7])
        let seq = try store.write { try $0.put(first, in: "ks") }
        try t.checkEqual(seq, 1, "the first put in a new keyspace gets sequence 1 (Record.sequence is ignored)")
        try store.read { r in
            try t.checkRecord(try r.get("doc1", in: "ks"), first, sequence: 1, "get after put")
            try t.checkEqual(try r.get("missing", in: "ks"), nil, "get of a missing key")
            try t.checkEqual(try r.get("doc1", in: "other"), nil, "get in a keyspace that does not exist")
            try t.checkEqual(try r.count(in: "other", includeDeleted: true), 0, "count of a keyspace that does not exist")
            try t.checkEqual(try r.lastSequence(in: "other"), 0, "lastSequence of a keyspace that does not exist")
            try t.checkEqual(try t.keys(r, "other"), [], "enumerate a keyspace that does not exist")
            try t.checkEqual(try t.changes(r, "other"), [], "enumerate by sequence a keyspace that does not exist")
            try t.checkEqual(try r.keyspaces(), ["ks"], "keyspaces(): reading a keyspace must not create it")
        }

        // A put replaces the whole record: nothing of the old one is merged in.
        let second = Record(key: "doc1", version: [3], body: "v2".bytes)
        try t.checkEqual(try store.write { try $0.put(second, in: "ks") }, 2, "sequence of a replacing put")
        try store.read { r in
            try t.checkRecord(try r.get("doc1", in: "ks"), second, sequence: 2, "get after replace")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), 1, "count after replace")
        }

        // Return values pass through; a transaction that changes nothing creates nothing.
        try t.checkEqual(try store.write { _ in 42 }, 42, "write returns the closure's value")
        try t.checkEqual(try store.read { _ in "x" }, "x", "read returns the closure's value")
        try store.write { w in _ = try w.get("nothing", in: "untouched") }
        try store.read { r in
            try t.checkEqual(try r.keyspaces(), ["ks"], "keyspaces() after a write that only read")
            try t.checkEqual(try r.lastSequence(in: "ks"), 2, "lastSequence after an empty write")
        }

        // Keys that differ only by case or a trailing space are different keys.
        try store.write { w in
            try w.put(Record(key: "Doc1", body: [1]), in: "ks")
            try w.put(Record(key: "doc1 ", body: [2]), in: "ks")
        }
        try store.read { r in
            try t.checkEqual(try r.get("Doc1", in: "ks")?.body, [1], "key differing by case")
            try t.checkEqual(try r.get("doc1 ", in: "ks")?.body, [2], "key with a trailing space")
            try t.checkEqual(try r.get("doc1", in: "ks")?.body, "v2".bytes, "the original key is untouched")
        }
    }

    static func deleteMakesTombstone(_ t: CaseContext) throws {
        let store = try t.open()
        let doc = Record(key: "doc", flags: [.hasAttachments, .conflicted], version: "1-abc".bytes,
                         body: "{\"a\":1}".bytes, extra: "tree".bytes)
        try store.write { w in
            try t.checkEqual(try w.put(doc, in: "ks"), 1, "put doc")
            try t.checkEqual(try w.put(Record(key: "other", body: [1]), in: "ks"), 2, "put other")
        }
        let deleteSeq = try store.write { try $0.delete("doc", in: "ks") }
        try t.checkEqual(deleteSeq, 3, "delete returns the tombstone's new sequence")
        let tombstone = Record(key: "doc", flags: [.hasAttachments, .conflicted, .deleted],
                               version: doc.version, body: [], extra: doc.extra)
        try store.read { r in
            try t.checkRecord(try r.get("doc", in: "ks"), tombstone, sequence: 3,
                              "the tombstone (deleted flag set, other flags kept, body emptied, version and extra kept)")
            try t.checkEqual(try t.keys(r, "ks"), ["doc", "other"], "key enumeration includes tombstones")
            try t.checkEqual(try t.changes(r, "ks"), [KeySeq("other", 2), KeySeq("doc", 3)],
                             "sequence enumeration includes the tombstone at its new sequence")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), 1, "count without tombstones")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), 2, "count with tombstones")
        }

        try store.write { w in
            try t.checkEqual(try w.delete("missing", in: "ks"), nil, "delete of a missing key returns nil")
            try t.checkEqual(try w.delete("missing", in: "nokeyspace"), nil, "delete in a missing keyspace returns nil")
            try t.checkEqual(try w.lastSequence(in: "ks"), 3, "a delete of nothing consumes no sequence")
        }
        try store.read { r in
            try t.checkEqual(try r.keyspaces(), ["ks"], "a delete in a missing keyspace does not create it")
        }

        // Deleting a tombstone again: still a tombstone, at a new sequence.
        let again = try store.write { try $0.delete("doc", in: "ks") }
        try t.checkEqual(again, 4, "deleting a tombstone assigns a new sequence")
        try store.read { r in
            try t.checkRecord(try r.get("doc", in: "ks"), tombstone, sequence: 4, "tombstone deleted twice")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), 1, "count without tombstones after a second delete")
        }

        // A put without the deleted flag revives the document.
        let revived = Record(key: "doc", version: "3-def".bytes, body: "{\"b\":2}".bytes, extra: "tree2".bytes)
        try t.checkEqual(try store.write { try $0.put(revived, in: "ks") }, 5, "put over a tombstone")
        try store.read { r in
            try t.checkRecord(try r.get("doc", in: "ks"), revived, sequence: 5, "revived document")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), 2, "count after reviving")
        }
    }

    static func purge(_ t: CaseContext) throws {
        let store = try t.open()
        try store.write { w in
            try w.put(Record(key: "a", body: [1]), in: "ks")  // 1
            try w.put(Record(key: "b", body: [2]), in: "ks")  // 2
            try w.put(Record(key: "c", body: [3]), in: "ks")  // 3
            try t.checkEqual(try w.delete("b", in: "ks"), 4, "delete b")
        }
        try store.write { w in
            try t.checkEqual(try w.purge("a", in: "ks"), true, "purge of an existing record returns true")
            try t.checkEqual(try w.purge("a", in: "ks"), false, "purge of an already purged record returns false")
            try t.checkEqual(try w.purge("zzz", in: "ks"), false, "purge of a missing key returns false")
            try t.checkEqual(try w.purge("a", in: "nokeyspace"), false, "purge in a missing keyspace returns false")
            // b is a tombstone holding the highest sequence: purging it must not lower lastSequence.
            try t.checkEqual(try w.purge("b", in: "ks"), true, "purge of a tombstone returns true")
        }
        try store.read { r in
            try t.checkEqual(try r.get("a", in: "ks"), nil, "get of a purged record")
            try t.checkEqual(try r.get("b", in: "ks"), nil, "get of a purged tombstone")
            try t.checkEqual(try t.keys(r, "ks"), ["c"], "key enumeration after purge")
            try t.checkEqual(try t.changes(r, "ks"), [KeySeq("c", 3)], "sequence enumeration after purge")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), 1, "count with tombstones after purge")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), 1, "count without tombstones after purge")
            try t.checkEqual(try r.lastSequence(in: "ks"), 4, "lastSequence never decreases after a purge")
            try t.checkEqual(try r.keyspaces(), ["ks"], "a purge in a missing keyspace does not create it")
        }
        try t.checkEqual(try store.write { try $0.put(Record(key: "a"), in: "ks") }, 5,
                         "the next put after purging the newest record gets lastSequence + 1")

        // Purge everything: the keyspace still exists and keeps its counter, also after reopening.
        try store.write { w in
            _ = try w.purge("a", in: "ks")
            _ = try w.purge("c", in: "ks")
        }
        try store.read { r in
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), 0, "count after purging everything")
            try t.checkEqual(try r.lastSequence(in: "ks"), 5, "lastSequence after purging everything")
            try t.checkEqual(try r.keyspaces(), ["ks"], "a keyspace whose records were all purged still exists")
        }
        try store.close()
        let reopened = try t.open()
        try reopened.read { r in
            try t.checkEqual(try r.lastSequence(in: "ks"), 5, "lastSequence after purging everything and reopening")
        }
        try t.checkEqual(try reopened.write { try $0.put(Record(key: "d"), in: "ks") }, 6,
                         "sequence of the first put after reopening an all-purged keyspace")
    }

    static func sequenceAssignment(_ t: CaseContext) throws {
        let store = try t.open()
        try store.write { w in
            for (i, key) in ["c", "a", "b"].enumerated() {
                try t.checkEqual(try w.put(Record(key: key), in: "ks"), UInt64(i + 1), "put \(key) in one transaction")
                try t.checkEqual(try w.lastSequence(in: "ks"), UInt64(i + 1), "lastSequence inside the transaction")
            }
            try t.checkEqual(try w.put(Record(key: "x"), in: "other"), 1, "keyspaces have independent sequences")
        }
        var expected: UInt64 = 3
        for i in 0..<60 {
            expected += 1
            let key = "k\(i % 7)"
            let seq: UInt64?
            if i % 5 == 4 {
                seq = try store.write { try $0.delete(key, in: "ks") }
            } else {
                seq = try store.write { try $0.put(Record(key: key, body: [UInt8(i)]), in: "ks") }
            }
            guard let seq else {
                // Deleting a key not yet written: consumes nothing.
                expected -= 1
                continue
            }
            try t.checkEqual(seq, expected, "sequence of change #\(i) (\(key))")
            try store.read { r in
                try t.checkEqual(try r.get(key, in: "ks")?.sequence, seq, "Record.sequence of \(key) after change #\(i)")
                try t.checkEqual(try r.lastSequence(in: "ks"), seq, "lastSequence after change #\(i)")
            }
        }
        try store.read { r in
            let all = try t.changes(r, "ks")
            try t.check(zip(all, all.dropFirst()).allSatisfy { $0.sequence < $1.sequence },
                        "sequence enumeration must be strictly increasing: \(brief(all))")
            try t.checkEqual(Set(all.map(\.key)).count, all.count, "each key appears once in the sequence enumeration")
            try t.checkEqual(try r.lastSequence(in: "other"), 1, "the other keyspace's counter did not move")
        }
    }

    static func counts(_ t: CaseContext) throws {
        let store = try t.open()
        func expectCounts(_ live: Int, _ all: Int, _ step: String, file: StaticString = #fileID, line: UInt = #line) throws {
            try store.read { r in
                try t.checkEqual(try r.count(in: "ks", includeDeleted: false), live, "count without tombstones \(step)",
                                 file: file, line: line)
                try t.checkEqual(try r.count(in: "ks", includeDeleted: true), all, "count with tombstones \(step)",
                                 file: file, line: line)
                var enumerated = 0, deleted = 0
                try r.enumerate(in: "ks") { record in
                    enumerated += 1
                    if record.flags.contains(.deleted) { deleted += 1 }
                    return true
                }
                try t.checkEqual(enumerated, all, "records enumerated \(step)", file: file, line: line)
                try t.checkEqual(enumerated - deleted, live, "live records enumerated \(step)", file: file, line: line)
            }
        }
        try expectCounts(0, 0, "of an empty store")
        try store.write { w in
            for i in 0..<10 { try w.put(Record(key: "k\(i)", body: [UInt8(i)]), in: "ks") }
        }
        try expectCounts(10, 10, "after 10 puts")
        try store.write { w in
            _ = try w.delete("k1", in: "ks")
            _ = try w.delete("k2", in: "ks")
            _ = try w.delete("k2", in: "ks")
        }
        try expectCounts(8, 10, "after deleting 2")
        try store.write { w in
            try w.put(Record(key: "t1", flags: [.deleted], version: [1]), in: "ks")  // a tombstone put directly
            try w.put(Record(key: "k3", flags: [.deleted, .conflicted]), in: "ks")   // a live record replaced by a tombstone
        }
        try expectCounts(7, 11, "after putting tombstones")
        try store.write { w in
            try w.put(Record(key: "k1", body: [1]), in: "ks")                          // revive
            _ = try w.purge("k2", in: "ks")                                            // purge a tombstone
            _ = try w.purge("k4", in: "ks")                                            // purge a live record
        }
        try expectCounts(7, 9, "after reviving one and purging two")
        try store.write { w in try w.put(Record(key: "x"), in: "other") }
        try expectCounts(7, 9, "after writing another keyspace")
    }
}
