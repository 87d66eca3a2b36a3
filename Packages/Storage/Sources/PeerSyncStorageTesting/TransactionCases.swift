import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// Rollback, a writer's view of its own changes, snapshot isolation, concurrent writers.
enum TransactionCases {
    static func rollbackOnThrow(_ t: CaseContext) throws {
        let store = try t.open()
        try store.write { w in
            try w.put(Record(key: "a", body: [1]), in: "ks")      // 1
            try w.put(Record(key: "b", body: [2]), in: "ks")      // 2
            try w.put(Record(key: "x", body: [3]), in: "ks2")     // 1
        }
        func checkUnchanged(_ after: String, file: StaticString = #fileID, line: UInt = #line) throws {
            try store.read { r in
                try t.checkRecord(try r.get("a", in: "ks"), Record(key: "a", body: [1]), sequence: 1, "a \(after)",
                                  file: file, line: line)
                try t.checkRecord(try r.get("b", in: "ks"), Record(key: "b", body: [2]), sequence: 2, "b \(after)",
                                  file: file, line: line)
                try t.checkEqual(try r.get("c", in: "ks"), nil, "c \(after)", file: file, line: line)
                try t.checkRecord(try r.get("x", in: "ks2"), Record(key: "x", body: [3]), sequence: 1, "ks2/x \(after)",
                                  file: file, line: line)
                try t.checkEqual(try r.keyspaces(), ["ks", "ks2"], "keyspaces \(after)", file: file, line: line)
                try t.checkEqual(try r.lastSequence(in: "ks"), 2, "lastSequence \(after)", file: file, line: line)
                try t.checkEqual(try r.count(in: "ks", includeDeleted: true), 2, "count \(after)", file: file, line: line)
                try t.checkEqual(try t.changes(r, "ks"), [KeySeq("a", 1), KeySeq("b", 2)], "feed \(after)",
                                 file: file, line: line)
            }
        }

        // Every kind of change, then a throw: the same error comes out and nothing is kept.
        do {
            try store.write { w in
                try w.put(Record(key: "c", body: [4]), in: "ks")
                try w.put(Record(key: "a", body: [5]), in: "ks")
                _ = try w.delete("b", in: "ks")
                try w.put(Record(key: "new"), in: "brand-new")
                try w.dropKeyspace("ks2")
                try t.checkEqual(try w.get("c", in: "ks")?.body, [4], "the transaction sees its own put before the throw")
                throw IntentionalRollback(tag: 1)
            }
            throw t.failure("write did not rethrow the closure's error", file: #fileID, line: #line)
        } catch let error as IntentionalRollback {
            try t.checkEqual(error, IntentionalRollback(tag: 1), "the closure's error is rethrown unchanged")
        }
        try checkUnchanged("after a rolled-back transaction")

        do {
            try store.write { w in
                _ = try w.purge("a", in: "ks")
                _ = try w.purge("x", in: "ks2")
                throw PeerSyncError(.conflict, "test")
            }
            throw t.failure("write did not rethrow a PeerSyncError", file: #fileID, line: #line)
        } catch let error as PeerSyncError {
            try t.checkEqual(error.code, .conflict, "a PeerSyncError from the closure is rethrown unchanged")
        }
        try checkUnchanged("after rolling back purges")

        // An error thrown by an enumeration body inside a write, left to propagate.
        do {
            try store.write { w in
                try w.put(Record(key: "c"), in: "ks")
                try w.enumerate(in: "ks") { _ in throw IntentionalRollback(tag: 2) }
            }
            throw t.failure("an error from an enumeration inside write was swallowed", file: #fileID, line: #line)
        } catch is IntentionalRollback {}
        try checkUnchanged("after an enumeration error inside write")

        // Rolled-back transactions consume no sequences.
        try t.checkEqual(try store.write { try $0.put(Record(key: "c"), in: "ks") }, 3,
                         "the first committed put after rollbacks gets lastSequence + 1 of the committed state")
        try t.checkEqual(try store.write { try $0.put(Record(key: "y"), in: "ks2") }, 2,
                         "a keyspace dropped in a rolled-back transaction keeps its counter")
        try t.checkEqual(try store.write { try $0.put(Record(key: "n"), in: "brand-new") }, 1,
                         "a keyspace created in a rolled-back transaction starts at 1")

        // A store stays usable after many rollbacks (no leaked locks).
        for i in 0..<20 {
            _ = try? store.write { w -> Void in
                try w.put(Record(key: "r\(i)"), in: "ks")
                throw IntentionalRollback(tag: i)
            }
        }
        try t.checkEqual(try store.write { try $0.put(Record(key: "d"), in: "ks") }, 4, "put after 20 rollbacks")
    }

    static func writerSeesOwnChanges(_ t: CaseContext) throws {
        let store = try t.open()
        try store.write { w in
            try w.put(Record(key: "a", body: [1]), in: "ks")
            try w.put(Record(key: "b", body: [2]), in: "ks")
            try w.put(Record(key: "z"), in: "gone")
        }
        try store.write { w in
            try w.put(Record(key: "c", body: [3]), in: "ks")
            try w.put(Record(key: "a", body: [9]), in: "ks")
            try t.checkEqual(try w.get("a", in: "ks")?.body, [9], "get sees the transaction's own put")
            try t.checkEqual(try w.get("a", in: "ks")?.sequence, 4, "get sees the new sequence")
            try t.checkEqual(try t.keys(w, "ks"), ["a", "b", "c"], "key enumeration sees own puts")
            try t.checkEqual(try t.changes(w, "ks"), [KeySeq("b", 2), KeySeq("c", 3), KeySeq("a", 4)],
                             "sequence enumeration sees own puts")
            try t.checkEqual(try w.lastSequence(in: "ks"), 4, "lastSequence sees own puts")
            try t.checkEqual(try w.count(in: "ks", includeDeleted: true), 3, "count sees own puts")

            _ = try w.delete("b", in: "ks")
            try t.check(try w.get("b", in: "ks")?.flags.contains(.deleted) == true, "get sees own delete")
            try t.checkEqual(try w.count(in: "ks", includeDeleted: false), 2, "count sees own delete")
            _ = try w.purge("c", in: "ks")
            try t.checkEqual(try w.get("c", in: "ks"), nil, "get sees own purge")
            try t.checkEqual(try t.changes(w, "ks"), [KeySeq("a", 4), KeySeq("b", 5)], "feed sees own delete and purge")

            try w.put(Record(key: "n"), in: "new")
            try t.checkEqual(try w.keyspaces(), ["gone", "ks", "new"], "keyspaces() sees a new keyspace")
            try w.dropKeyspace("gone")
            try t.checkEqual(try w.keyspaces(), ["ks", "new"], "keyspaces() sees a dropped keyspace")
            try t.checkEqual(try w.get("z", in: "gone"), nil, "records of a dropped keyspace are gone")
            try t.checkEqual(try w.lastSequence(in: "gone"), 0, "a dropped keyspace's counter is gone")
            try t.checkEqual(try w.put(Record(key: "z2"), in: "gone"), 1, "a keyspace re-created after a drop starts at 1")
        }
        try store.read { r in
            try t.checkEqual(try r.keyspaces(), ["gone", "ks", "new"], "keyspaces() after commit")
            try t.checkEqual(try t.changes(r, "gone"), [KeySeq("z2", 1)], "re-created keyspace after commit")
            try t.checkEqual(try t.changes(r, "ks"), [KeySeq("a", 4), KeySeq("b", 5)], "feed after commit")
        }
    }

    static func snapshotIsolation(_ t: CaseContext) throws {
        let store = try t.open(options: StorageOptions(busyTimeout: .seconds(20)))
        try store.write { w in
            try w.put(Record(key: "a", body: "v1".bytes), in: "ks")
            try w.put(Record(key: "b", body: "b".bytes), in: "ks")
        }

        // 1. A reader that started before a commit keeps its snapshot.
        try store.read { r in
            try t.checkEqual(try r.get("a", in: "ks")?.body, "v1".bytes, "the reader's first read")
            let writer = CaseThread(name: "snapshot-writer") {
                try store.write { w in
                    try w.put(Record(key: "a", body: "v2".bytes), in: "ks")
                    try w.put(Record(key: "c", body: "c".bytes), in: "ks")
                    _ = try w.delete("b", in: "ks")
                    try w.put(Record(key: "n"), in: "new")
                }
            }
            try t.join(writer, "a writer committing while a reader is open (readers must not block writers)")
            try t.checkEqual(try r.get("a", in: "ks")?.body, "v1".bytes, "the reader still sees the old value")
            try t.checkEqual(try r.get("c", in: "ks"), nil, "the reader does not see a record added after it started")
            try t.checkEqual(try r.get("b", in: "ks")?.flags.contains(.deleted), false, "the reader does not see the delete")
            try t.checkEqual(try t.keys(r, "ks"), ["a", "b"], "the reader's key enumeration")
            try t.checkEqual(try t.changes(r, "ks"), [KeySeq("a", 1), KeySeq("b", 2)], "the reader's feed")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: false), 2, "the reader's count")
            try t.checkEqual(try r.lastSequence(in: "ks"), 2, "the reader's lastSequence")
            try t.checkEqual(try r.keyspaces(), ["ks"], "the reader's keyspaces()")
        }
        try store.read { r in
            try t.checkEqual(try r.get("a", in: "ks")?.body, "v2".bytes, "a new reader sees the commit")
            try t.checkEqual(try t.changes(r, "ks"), [KeySeq("a", 3), KeySeq("c", 4), KeySeq("b", 5)], "a new reader's feed")
        }

        // 2. Uncommitted changes are invisible to other readers, and an open writer does not
        //    block them.
        let inside = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let writer = CaseThread(name: "open-writer") { () throws -> Bool in
            try store.write { w in
                try w.put(Record(key: "d", body: "uncommitted".bytes), in: "ks")
                inside.signal()
                // Bounded, so a failed check on the other side cannot leave this thread stuck.
                return proceed.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success
            }
        }
        defer { proceed.signal() }
        guard inside.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success else {
            throw t.failure("the writer never started its transaction", file: #fileID, line: #line)
        }
        let reader = CaseThread(name: "reader-during-write") {
            try store.read { r in (try r.get("d", in: "ks"), try r.lastSequence(in: "ks")) }
        }
        let (seen, lastSeen) = try t.join(reader, "a read while another thread's write is open (writers must not block readers)")
        try t.checkEqual(seen, nil, "an uncommitted put is invisible to other readers")
        try t.checkEqual(lastSeen, 5, "lastSequence does not show uncommitted sequences")
        proceed.signal()
        try t.checkEqual(try t.join(writer, "the open writer"), true, "the writer finished its transaction")
        try t.checkEqual(try store.read { try $0.get("d", in: "ks")?.body }, "uncommitted".bytes, "visible after commit")

        // 3. Several readers on other threads while writes continue: each sees a consistent
        //    snapshot (the counter equals the number of items).
        try store.write { w in try w.put(Record(key: "counter", body: "0".bytes), in: "items") }
        let writes = CaseThread(name: "item-writer") {
            for i in 1...40 {
                try store.write { w in
                    try w.put(Record(key: String(format: "item-%03d", i)), in: "items")
                    try w.put(Record(key: "counter", body: "\(i)".bytes), in: "items")
                }
            }
        }
        let readers = (0..<3).map { n in
            CaseThread(name: "consistent-reader-\(n)") { () throws -> String? in
                for _ in 0..<40 {
                    let problem: String? = try store.read { r in
                        let counter = Int(String(decoding: try r.get("counter", in: "items")?.body ?? [], as: UTF8.self)) ?? -1
                        var items = 0
                        try r.enumerate(in: "items", range: .prefix("item-"), descending: false) { _ in items += 1; return true }
                        let total = try r.count(in: "items", includeDeleted: true)
                        if counter != items || total != items + 1 {
                            return "counter \(counter), \(items) items, count \(total) in one snapshot"
                        }
                        return nil
                    }
                    if let problem { return problem }
                }
                return nil
            }
        }
        try t.join(writes, "the item writer")
        for reader in readers {
            if let problem = try t.join(reader, "a consistent reader") {
                throw t.failure("a reader saw a torn snapshot: \(problem)", file: #fileID, line: #line)
            }
        }
    }

    /// A writer that cannot get the write lock within `busyTimeout` throws `.busy`, on the
    /// same handle and on a second handle, and the store keeps working afterwards. The holder
    /// keeps the lock until the waiter has given up, so nothing depends on timing.
    static func busyTimeout(_ t: CaseContext) throws {
        let options = StorageOptions(busyTimeout: .milliseconds(200))
        let store = try t.open(options: options)
        let other = try t.open(options: options)
        try store.write { try $0.put(Record(key: "a"), in: "ks") }
        for (name, waiterStore) in [("the same handle", store), ("a second handle", other)] {
            let holding = DispatchSemaphore(value: 0)
            let waiterDone = DispatchSemaphore(value: 0)
            let holder = CaseThread(name: "lock-holder") { () throws -> Bool in
                try store.write { w in
                    try w.put(Record(key: "held"), in: "ks")
                    holding.signal()
                    return waiterDone.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success
                }
            }
            defer { waiterDone.signal() }
            guard holding.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success else {
                throw t.failure("the lock holder never started its transaction", file: #fileID, line: #line)
            }
            let waiter = CaseThread(name: "lock-waiter") { () throws -> PeerSyncError.Code? in
                do {
                    try waiterStore.write { try $0.put(Record(key: "waiter"), in: "ks") }
                    return nil
                } catch let error as PeerSyncError {
                    return error.code
                }
            }
            let code = try t.join(waiter, "a writer waiting on \(name) past busyTimeout")
            try t.checkEqual(code?.rawValue, PeerSyncError.Code.busy.rawValue,
                             "a write on \(name) while another thread holds the write lock past busyTimeout")
            waiterDone.signal()
            try t.checkEqual(try t.join(holder, "the lock holder"), true, "the lock holder committed")
        }
        try store.read { r in
            try t.checkEqual(try r.get("waiter", in: "ks"), nil, "the writer that timed out wrote nothing")
            try t.checkEqual(try r.lastSequence(in: "ks"), 3, "sequences after two busy timeouts")
        }
        try t.checkEqual(try other.write { try $0.put(Record(key: "after"), in: "ks") }, 4,
                         "the store works after busy timeouts")
    }

    static func concurrentWriters(_ t: CaseContext) throws {
        let store = try t.open()
        let threads = 6, perThread = 40
        try store.write { w in try w.put(Record(key: "counter", body: "0".bytes), in: "ks") }  // sequence 1
        let workers = (0..<threads).map { n in
            CaseThread(name: "writer-\(n)") { () throws -> [UInt64] in
                var sequences: [UInt64] = []
                for i in 0..<perThread {
                    let pair = try store.write { w -> [UInt64] in
                        // Read-modify-write: a lost update shows up as a wrong final counter.
                        let body = try w.get("counter", in: "ks")?.body ?? []
                        let value = Int(String(decoding: body, as: UTF8.self)) ?? -1_000_000
                        let a = try w.put(Record(key: "t\(n)-\(i)", body: [UInt8(n), UInt8(i)]), in: "ks")
                        let b = try w.put(Record(key: "counter", body: "\(value + 1)".bytes), in: "ks")
                        return [a, b]
                    }
                    sequences += pair
                }
                return sequences
            }
        }
        var all: [UInt64] = [1]
        for (n, worker) in workers.enumerated() {
            let sequences = try t.join(worker, "writer thread \(n)")
            try t.check(zip(sequences, sequences.dropFirst()).allSatisfy { $0 < $1 },
                        "one thread's successive sequences must increase")
            all += sequences
        }
        let total = threads * perThread
        try t.checkEqual(all.sorted(), Array(1...UInt64(1 + 2 * total)), "every assigned sequence is unique, with no gaps")
        try store.read { r in
            try t.checkEqual(try r.get("counter", in: "ks")?.body, "\(total)".bytes, "the counter after \(total) increments (lost update?)")
            try t.checkEqual(try r.count(in: "ks", includeDeleted: true), total + 1, "records after concurrent writes")
            for n in 0..<threads {
                for i in 0..<perThread {
                    try t.checkEqual(try r.get("t\(n)-\(i)", in: "ks")?.body, [UInt8(n), UInt8(i)], "record t\(n)-\(i)")
                }
            }
            try t.checkEqual(try r.lastSequence(in: "ks"), UInt64(1 + 2 * total), "lastSequence after concurrent writes")
            let feed = try t.changes(r, "ks")
            try t.check(zip(feed, feed.dropFirst()).allSatisfy { $0.sequence < $1.sequence }, "the feed is strictly increasing")
            try t.checkEqual(feed.count, total + 1, "the feed has every record once")
        }
    }
}
