import Foundation
import PeerSyncCore
import PeerSyncStorage

/// Open, close, reopen, `hasStore`, several handles on one directory.
enum LifecycleCases {
    static func reopenAfterClose(_ t: CaseContext) throws {
        let dir = t.directory()
        try t.check(!t.backend.hasStore(in: dir), "hasStore(in:) is false before the store exists")
        let store = try t.open(dir)
        let records = [Record(key: "a", flags: [.conflicted], version: [1], body: [2], extra: [3]),
                       Record(key: "b", body: "bee".bytes), Record(key: "c", body: "sea".bytes)]
        try store.write { w in
            for record in records { try w.put(record, in: "ks1") }   // 1, 2, 3
            try w.put(Record(key: "x", body: [9]), in: "ks2")          // 1
        }
        try store.write { w in
            _ = try w.delete("b", in: "ks1")                           // 4
            _ = try w.purge("c", in: "ks1")
            try w.put(Record(key: "tmp"), in: "ks2")                   // 2
        }
        try store.write { w in _ = try w.purge("tmp", in: "ks2") }
        try t.check(t.backend.hasStore(in: dir), "hasStore(in:) is true once a store was opened")

        try store.close()
        try store.close()  // idempotent
        try t.checkThrows(.closed, "read after close") { _ = try store.read { try $0.keyspaces() } }
        try t.checkThrows(.closed, "write after close") { _ = try store.write { try $0.put(Record(key: "late"), in: "ks1") } }
        try t.check(t.backend.hasStore(in: dir), "hasStore(in:) is true after close")

        let reopened = try t.open(dir, options: StorageOptions(create: false))
        try reopened.read { r in
            try t.checkEqual(try r.keyspaces(), ["ks1", "ks2"], "keyspaces() after reopening")
            try t.checkRecord(try r.get("a", in: "ks1"), records[0], sequence: 1, "a after reopening")
            try t.checkRecord(try r.get("b", in: "ks1"), Record(key: "b", flags: [.deleted]), sequence: 4,
                              "tombstone b after reopening")
            try t.checkEqual(try r.get("c", in: "ks1"), nil, "purged c after reopening")
            try t.checkEqual(try t.changes(r, "ks1"), [KeySeq("a", 1), KeySeq("b", 4)], "ks1 feed after reopening")
            try t.checkEqual(try t.changes(r, "ks2"), [KeySeq("x", 1)], "ks2 feed after reopening")
            try t.checkEqual(try r.lastSequence(in: "ks1"), 4, "ks1 lastSequence after reopening")
            try t.checkEqual(try r.lastSequence(in: "ks2"), 2,
                             "ks2 lastSequence after reopening (its newest record was purged)")
            try t.checkEqual(try r.count(in: "ks1", includeDeleted: false), 1, "ks1 live count after reopening")
            try t.checkEqual(try r.count(in: "ks1", includeDeleted: true), 2, "ks1 count after reopening")
        }
        try t.checkEqual(try reopened.write { try $0.put(Record(key: "d"), in: "ks1") }, 5, "sequences continue after reopening")
        try t.checkEqual(try reopened.write { try $0.put(Record(key: "y"), in: "ks2") }, 3, "ks2 sequences continue after reopening")

        // Several open/close rounds.
        try reopened.close()
        for round in 0..<5 {
            let s = try t.open(dir)
            try t.checkEqual(try s.write { try $0.put(Record(key: "round"), in: "ks1") }, UInt64(6 + round), "round \(round)")
            try s.close()
        }

        // create: false on an empty directory fails and creates nothing.
        let fresh = t.directory("fresh")
        try t.check(!t.backend.hasStore(in: fresh), "hasStore(in:) of a fresh directory")
        try t.checkThrows(nil, "open with create: false where there is no store") {
            _ = try t.backend.open(directory: fresh, options: StorageOptions(create: false)).close()
        }
        try t.check(!t.backend.hasStore(in: fresh), "a failed open with create: false must not create a store")
    }

    static func twoHandlesOneProcess(_ t: CaseContext) throws {
        // A generous busyTimeout: the two writer threads below wait for each other, and under a
        // sanitizer on a loaded machine 30 writes of one thread took longer than the default 10 s.
        let generous = StorageOptions(busyTimeout: .seconds(120))
        let first = try t.open(options: generous)
        let second = try t.open(options: generous)
        try first.write { try $0.put(Record(key: "a", body: [1]), in: "ks") }
        try t.checkEqual(try second.read { try $0.get("a", in: "ks")?.body }, [1], "the second handle sees the first's commit")
        try t.checkEqual(try second.write { try $0.put(Record(key: "b"), in: "ks") }, 2,
                         "the second handle continues the sequence")
        try t.checkEqual(try first.read { try $0.lastSequence(in: "ks") }, 2, "the first handle sees the second's commit")

        // Writers on both handles, from two threads, are serialized.
        let perThread = 30
        let workers = [first, second].enumerated().map { n, store in
            CaseThread(name: "handle-\(n)") { () throws -> [UInt64] in
                try (0..<perThread).map { i in
                    try store.write { w in
                        let value = Int(String(decoding: try w.get("counter", in: "ks")?.body ?? "0".bytes, as: UTF8.self)) ?? -1_000
                        try w.put(Record(key: "counter", body: "\(value + 1)".bytes), in: "ks")
                        return try w.put(Record(key: "h\(n)-\(i)"), in: "ks")
                    }
                }
            }
        }
        var sequences: [UInt64] = []
        for (n, worker) in workers.enumerated() { sequences += try t.join(worker, "writer on handle \(n)") }
        try t.checkEqual(Set(sequences).count, sequences.count, "sequences from two handles are unique")
        try first.read { r in
            try t.checkEqual(try r.get("counter", in: "ks")?.body, "\(2 * perThread)".bytes, "counter after writes on two handles")
            try t.checkEqual(try r.lastSequence(in: "ks"), UInt64(2 + 4 * perThread), "lastSequence after writes on two handles")
        }

        // Closing one handle leaves the other working.
        try first.close()
        try t.checkThrows(.closed, "read on the closed handle") { _ = try first.read { try $0.keyspaces() } }
        try t.checkEqual(try second.write { try $0.put(Record(key: "after"), in: "ks") }, UInt64(3 + 4 * perThread),
                         "the other handle still writes after one was closed")
    }
}
