import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB
import PeerSyncLMDBBaseline

@Suite struct BasicTests {
    @Test func backendIdentity() throws {
        try withTemporaryDirectory { dir in
            let backend = LMDBStorageBackend()
            #expect(backend.name == "lmdb")
            #expect(!backend.hasStore(in: dir))
            let storage = try openStore(dir)
            #expect(storage.backendName == "lmdb")
            #expect(storage.directory == dir)
            #expect(backend.hasStore(in: dir))
            #expect(FileManager.default.fileExists(atPath: dir + "/data.mdb"))
            try storage.close()
        }
    }

    @Test func putGetDeletePurgeAndSequences() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            let seqs = try storage.write { w -> [UInt64] in
                let a = try w.put(Record(key: "a", flags: .hasAttachments, version: bytes("1-a"), body: bytes("{\"x\":1}"),
                                         extra: bytes("tree")), in: "docs")
                let b = try w.put(Record(key: "b", sequence: 99, body: bytes("B")), in: "docs")
                let a2 = try w.put(Record(key: "a", version: bytes("2-a"), body: bytes("{\"x\":2}"), extra: bytes("tree2")),
                                   in: "docs")
                return [a, b, a2]
            }
            #expect(seqs == [1, 2, 3])
            try storage.read { r throws in
                let a = try #require(try r.get("a", in: "docs"))
                #expect(a == Record(key: "a", sequence: 3, version: bytes("2-a"), body: bytes("{\"x\":2}"), extra: bytes("tree2")))
                #expect(try r.get("b", in: "docs")?.sequence == 2)
                #expect(try r.get("zzz", in: "docs") == nil)
                #expect(try r.get("a", in: "nope") == nil)
                #expect(try r.lastSequence(in: "docs") == 3)
                #expect(try r.lastSequence(in: "nope") == 0)
                #expect(try r.count(in: "docs", includeDeleted: true) == 2)
                #expect(try r.keyspaces() == ["docs"])
            }
            try storage.write { w throws in
                #expect(try w.delete("a", in: "docs") == 4)
                #expect(try w.delete("missing", in: "docs") == nil)
                #expect(try w.delete("a", in: "missing-keyspace") == nil)
                let tomb = try #require(try w.get("a", in: "docs"))
                #expect(tomb == Record(key: "a", sequence: 4, flags: .deleted, version: bytes("2-a"), body: [],
                                       extra: bytes("tree2")))
                #expect(try w.count(in: "docs", includeDeleted: false) == 1)
                #expect(try w.count(in: "docs", includeDeleted: true) == 2)
                #expect(try w.purge("b", in: "docs"))
                #expect(try !w.purge("b", in: "docs"))
                #expect(try !w.purge("b", in: "missing-keyspace"))
                #expect(try w.count(in: "docs", includeDeleted: true) == 1)
                #expect(try w.lastSequence(in: "docs") == 4)
            }
            // A purge never lowers the last sequence; the next put continues from it.
            try storage.write { w throws in
                #expect(try w.purge("a", in: "docs"))
                #expect(try w.lastSequence(in: "docs") == 4)
                #expect(try w.put(Record(key: "c"), in: "docs") == 5)
            }
            try storage.read { r throws in
                var seen: [(String, UInt64)] = []
                try r.enumerate(in: "docs", since: 0) { seen.append(($0.key, $0.sequence)); return true }
                #expect(seen.map(\.0) == ["c"])
                #expect(seen.map(\.1) == [5])
                #expect(try r.keyspaces() == ["docs"])  // a keyspace that held records still exists
            }
        }
    }

    @Test func keyspacesAreIndependentAndDroppable() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                for ks in ["b", "a", "", "é", "c"] {
                    try w.put(Record(key: "k", body: bytes(ks)), in: ks)
                    try w.put(Record(key: "k2"), in: ks)
                }
            }
            try storage.read { r throws in
                #expect(try r.keyspaces() == ["", "a", "b", "c", "é"])
                #expect(try r.get("k", in: "é")?.body == bytes("é"))
                #expect(try r.lastSequence(in: "a") == 2)
            }
            try storage.write { w throws in
                try w.dropKeyspace("b")
                try w.dropKeyspace("never-existed")
                #expect(try w.keyspaces() == ["", "a", "c", "é"])
                #expect(try w.get("k", in: "b") == nil)
                #expect(try w.lastSequence(in: "b") == 0)
                #expect(try w.count(in: "b", includeDeleted: true) == 0)
                // A dropped keyspace starts over, sequences included.
                #expect(try w.put(Record(key: "new"), in: "b") == 1)
                #expect(try allRecords(w, "b").map(\.key) == ["new"])
            }
            try storage.read { r throws in
                #expect(try r.keyspaces() == ["", "a", "b", "c", "é"])
                #expect(try allRecords(r, "a").map(\.key) == ["k", "k2"])
                #expect(try allRecords(r, "b").map(\.key) == ["new"])
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    @Test func canonicallyEquivalentNamesAreDistinct() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            let composed = "\u{E9}t\u{E9}", decomposed = "e\u{301}te\u{301}"
            try storage.write { w throws in
                try w.put(Record(key: composed, body: bytes("1")), in: composed)
                try w.put(Record(key: decomposed, body: bytes("2")), in: decomposed)
                try w.put(Record(key: decomposed, body: bytes("3")), in: composed)
                #expect(try w.get(composed, in: decomposed) == nil)
            }
            try storage.read { r throws in
                #expect(try r.keyspaces().count == 2)
                #expect(try r.get(composed, in: composed)?.body == bytes("1"))
                #expect(try r.get(decomposed, in: composed)?.body == bytes("3"))
                #expect(try r.get(decomposed, in: decomposed)?.body == bytes("2"))
                #expect(try r.count(in: composed, includeDeleted: true) == 2)
                #expect(try r.lastSequence(in: decomposed) == 1)
            }
            try storage.write { w throws in try w.dropKeyspace(decomposed) }
            #expect(try storage.read { try $0.keyspaces().map { Array($0.utf8) } } == [Array(composed.utf8)])
        }
    }

    @Test func enumerationByKeyRange() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            // Byte order: "z" (0x7A) sorts before "é" (0xC3 0xA9).
            let allKeys = ["", "a", "ab", "abc", "b", "ba", "c", "z\u{10FFFF}", "é"]
            try storage.write { w throws in
                for k in allKeys.shuffled() { try w.put(Record(key: k), in: "ks") }
                try w.put(Record(key: "other"), in: "ks2")
                try w.put(Record(key: "a"), in: "ks0")
            }
            try storage.read { r throws in
                func keys(_ range: KeyRange, descending: Bool = false) throws -> [String] {
                    var out: [String] = []
                    try r.enumerate(in: "ks", range: range, descending: descending) { out.append($0.key); return true }
                    return out
                }
                #expect(try keys(.all) == allKeys)
                #expect(try keys(.all, descending: true) == allKeys.reversed())
                #expect(try keys(.prefix("a")) == ["a", "ab", "abc"])
                #expect(try keys(.prefix("a"), descending: true) == ["abc", "ab", "a"])
                #expect(try keys(KeyRange(from: "ab", to: "b")) == ["ab", "abc"])
                #expect(try keys(KeyRange(from: "ab", to: "b", includesUpperBound: true)) == ["ab", "abc", "b"])
                #expect(try keys(KeyRange(from: "ab", to: "b", includesUpperBound: true), descending: true) == ["b", "abc", "ab"])
                #expect(try keys(KeyRange(from: "ab", to: "b"), descending: true) == ["abc", "ab"])
                #expect(try keys(KeyRange(from: "b")) == ["b", "ba", "c", "z\u{10FFFF}", "é"])
                #expect(try keys(KeyRange(to: "a")) == [""])
                #expect(try keys(KeyRange(to: "a", includesUpperBound: true), descending: true) == ["a", ""])
                #expect(try keys(KeyRange(from: "c", to: "b")) == [])
                #expect(try keys(KeyRange(from: "b", to: "b")) == [])
                #expect(try keys(KeyRange(from: "b", to: "b", includesUpperBound: true)) == ["b"])
                #expect(try keys(KeyRange(from: "bb", to: "bz")) == [])
                #expect(try keys(KeyRange(from: "zz")) == ["z\u{10FFFF}", "é"])
                #expect(try keys(KeyRange(from: "zz", to: "é")) == ["z\u{10FFFF}"])
                #expect(try keys(KeyRange(from: "zz"), descending: true) == ["é", "z\u{10FFFF}"])
                #expect(try keys(KeyRange(from: "é\u{1}")) == [])
                #expect(try keys(KeyRange(from: "é\u{1}"), descending: true) == [])
                #expect(try keys(KeyRange(from: "0", to: "1"), descending: true) == [])
                // Bounds longer than LMDB's key limit still compare correctly.
                let long = "b" + String(repeating: "x", count: 600)
                #expect(try keys(KeyRange(from: long)) == ["c", "z\u{10FFFF}", "é"])
                #expect(try keys(KeyRange(to: long), descending: true) == ["ba", "b", "abc", "ab", "a", ""])
                #expect(try keys(KeyRange(from: "ba", to: long + "x", includesUpperBound: true), descending: true) == ["ba"])
                // Early stop.
                var first: [String] = []
                try r.enumerate(in: "ks", range: .all, descending: false) { first.append($0.key); return first.count < 2 }
                #expect(first == ["", "a"])
                // Missing keyspace.
                var none = 0
                try r.enumerate(in: "missing") { _ in none += 1; return true }
                #expect(none == 0)
                #expect(try allRecords(r, "ks2").map(\.key) == ["other"])
            }
        }
    }

    @Test func enumerationBySequence() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                for k in ["a", "b", "c", "d"] { try w.put(Record(key: k), in: "ks") }  // 1...4
                try w.put(Record(key: "b"), in: "ks")                                    // b → 5
                try w.delete("c", in: "ks")                                              // c → 6
                try w.purge("d", in: "ks")
            }
            try storage.read { r throws in
                func since(_ s: UInt64) throws -> [String] {
                    var out: [String] = []
                    try r.enumerate(in: "ks", since: s) { out.append("\($0.key)\($0.sequence)"); return true }
                    return out
                }
                #expect(try since(0) == ["a1", "b5", "c6"])
                #expect(try since(1) == ["b5", "c6"])
                #expect(try since(5) == ["c6"])
                #expect(try since(6) == [])
                #expect(try since(.max) == [])
                var stopped: [String] = []
                try r.enumerate(in: "ks", since: 0) { stopped.append($0.key); return false }
                #expect(stopped == ["a"])
            }
        }
    }

    @Test func throwingWriteRollsBack() throws {
        struct Boom: Error {}
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            _ = try storage.write { w in try w.put(Record(key: "kept"), in: "ks") }
            #expect(throws: Boom.self) {
                try storage.write { w throws in
                    try w.put(Record(key: "lost"), in: "ks")
                    try w.put(Record(key: "lost"), in: "new-keyspace")
                    try w.dropKeyspace("ks")
                    throw Boom()
                }
            }
            try storage.read { r throws in
                #expect(try allRecords(r, "ks").map(\.key) == ["kept"])
                #expect(try r.keyspaces() == ["ks"])
                #expect(try r.lastSequence(in: "ks") == 1)
            }
            #expect(try storage.write { w in try w.put(Record(key: "next"), in: "ks") } == 2)
        }
    }

    @Test func readersSeeASnapshot() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            _ = try storage.write { w in try w.put(Record(key: "a", body: bytes("1")), in: "ks") }
            try storage.read { r throws in
                #expect(try r.get("a", in: "ks")?.body == bytes("1"))
                // A writer on another thread commits while this snapshot is open.
                let done = DispatchSemaphore(value: 0)
                Thread {
                    _ = try? storage.write { w throws in
                        try w.put(Record(key: "a", body: bytes("2")), in: "ks")
                        try w.put(Record(key: "b"), in: "ks")
                    }
                    done.signal()
                }.start()
                done.wait()
                #expect(try r.get("a", in: "ks")?.body == bytes("1"))
                #expect(try r.get("b", in: "ks") == nil)
                #expect(try r.lastSequence(in: "ks") == 1)
            }
            try storage.read { r throws in
                #expect(try r.get("a", in: "ks")?.body == bytes("2"))
                #expect(try r.lastSequence(in: "ks") == 3)
            }
        }
    }

    @Test func writerSeesItsOwnChanges() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                try w.put(Record(key: "a"), in: "ks")
                #expect(try w.get("a", in: "ks")?.sequence == 1)
                #expect(try w.keyspaces() == ["ks"])
                #expect(try w.count(in: "ks", includeDeleted: false) == 1)
                #expect(try allRecords(w, "ks").map(\.key) == ["a"])
            }
        }
    }

    @Test func reopenKeepsEverything() throws {
        try withTemporaryDirectory { dir in
            var storage = try openStore(dir)
            try storage.write { w throws in
                for i in 0..<100 { try w.put(Record(key: "k\(i)", body: bytes("v\(i)")), in: "ks") }
                try w.delete("k5", in: "ks")
                try w.purge("k99", in: "ks")
            }
            try storage.close()
            #expect(EnvironmentRegistry.shared.isOpen(dir) == false)
            storage = try LMDBStorageBackend().open(directory: dir, options: StorageOptions(create: false))
            try storage.read { r throws in
                #expect(try r.count(in: "ks", includeDeleted: false) == 98)
                #expect(try r.count(in: "ks", includeDeleted: true) == 99)
                #expect(try r.lastSequence(in: "ks") == 101)
                #expect(try r.get("k42", in: "ks")?.body == bytes("v42"))
                #expect(try r.get("k5", in: "ks")?.flags == .deleted)
            }
            #expect(try storage.write { w in try w.put(Record(key: "more"), in: "ks") } == 102)
            try storage.close()
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    @Test func sharedEnvironmentWithinOneProcess() throws {
        try withTemporaryDirectory { dir in
            let one = try openStore(dir)
            let two = try openStore(dir)
            #expect(EnvironmentRegistry.shared.isOpen(dir))
            _ = try one.write { w in try w.put(Record(key: "a"), in: "ks") }
            #expect(try two.read { try $0.get("a", in: "ks") } != nil)
            try one.close()
            try one.close()  // idempotent
            #expect(caughtError { _ = try one.read { _ in 0 } }?.code == .closed)
            #expect(caughtError { try one.write { _ in } }?.code == .closed)
            // The other handle keeps working on the shared environment.
            _ = try two.write { w in try w.put(Record(key: "b"), in: "ks") }
            #expect(try two.read { try $0.count(in: "ks", includeDeleted: false) } == 2)
            try two.close()
            #expect(EnvironmentRegistry.shared.isOpen(dir) == false)
        }
    }

    @Test func badInputGetsTypedErrors() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            let longKey = String(repeating: "k", count: 508)
            let okKey = String(repeating: "k", count: 507)
            try storage.write { w throws in
                #expect(caughtError { try w.put(Record(key: longKey), in: "ks") }?.code == .tooLarge)
                #expect(caughtError { try w.put(Record(key: "a"), in: String(repeating: "n", count: 511)) }?.code == .tooLarge)
                // A rejected record leaves the transaction usable.
                #expect(try w.put(Record(key: okKey), in: "ks") == 1)
                #expect(try w.get(longKey, in: "ks") == nil)
                #expect(try w.delete(longKey, in: "ks") == nil)
                #expect(try !w.purge(longKey, in: "ks"))
            }
            #expect(try storage.read { try $0.get(okKey, in: "ks")?.sequence } == 1)
        }
    }

    @Test func escapedReaderAndWriterThrowClosed() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            let reader = try storage.read { $0 }
            #expect(caughtError { _ = try reader.get("a", in: "ks") }?.code == .closed)
            let writer = try storage.write { $0 }
            #expect(caughtError { try writer.put(Record(key: "a"), in: "ks") }?.code == .closed)
            #expect(caughtError { _ = try writer.keyspaces() }?.code == .closed)
        }
    }

    @Test func readTransactionRejectsWrites() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.read { r throws in
                let w = try #require(r as? any StorageWriter)
                #expect(caughtError { try w.put(Record(key: "a"), in: "ks") }?.code == .storage)
            }
            #expect(try storage.read { try $0.keyspaces() } == [])
        }
    }

    @Test func nestedWriteFailsAtOnce() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                try w.put(Record(key: "outer"), in: "ks")
                #expect(caughtError { try storage.write { _ in } }?.code == .storage)
                // A read inside a write is fine (it sees the last commit).
                #expect(try storage.read { try $0.get("outer", in: "ks") } == nil)
            }
            #expect(try storage.read { try $0.get("outer", in: "ks") } != nil)
        }
    }

    @Test func busyTimeoutBetweenThreads() throws {
        try withTemporaryDirectory { dir in
            let holder = try openStore(dir)
            let waiter = try openStore(dir, busyTimeout: .milliseconds(200))
            defer {
                try? waiter.close()
                try? holder.close()
            }
            let started = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            Thread {
                try? holder.write { w throws in
                    try w.put(Record(key: "held"), in: "ks")
                    started.signal()
                    release.wait()
                }
                finished.signal()
            }.start()
            started.wait()
            #expect(caughtError { _ = try waiter.write { w in try w.put(Record(key: "x"), in: "ks") } }?.code == .busy)
            // Readers are never blocked by the writer.
            #expect(try waiter.read { try $0.get("held", in: "ks") } == nil)
            release.signal()
            finished.wait()
            _ = try waiter.write { w in try w.put(Record(key: "x"), in: "ks") }
            #expect(try waiter.read { try $0.count(in: "ks", includeDeleted: false) } == 2)
        }
    }

    @Test func openWithoutCreate() throws {
        try withTemporaryDirectory { dir in
            var options = StorageOptions()
            options.create = false
            #expect(caughtError { _ = try LMDBStorageBackend().open(directory: dir + "/absent", options: options) }?.code == .notFound)
            #expect(caughtError { _ = try LMDBStorageBackend().open(directory: dir, options: options) }?.code == .notFound)
            #expect(!FileManager.default.fileExists(atPath: dir + "/data.mdb"))
            #expect(caughtError { _ = try LMDBStorageBackend().open(directory: "", options: StorageOptions()) }?.code == .invalidArgument)
            #expect(caughtError { _ = try LMDBStorageBackend().checkIntegrity(directory: dir) }?.code == .notFound)
        }
    }

    /// An LMDB environment without our DBs (a store whose creation was interrupted after
    /// `mdb_env_open`) is not complete: opening it takes the writer lock and creates the DBs,
    /// instead of reading it as a store.
    @Test func openingCompletesAnInterruptedCreation() throws {
        try withTemporaryDirectory { dir in
            let raw = try LMDBRawBaseline(directory: dir, mapSize: 1 << 20)
            raw.close()
            #expect(FileManager.default.fileExists(atPath: dir + "/data.mdb"))
            let storage = try openStore(dir)
            _ = try storage.write { w in try w.put(Record(key: "a"), in: "ks") }
            try storage.close()
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
            let reopened = try openStore(dir)
            defer { try? reopened.close() }
            #expect(try reopened.read { try $0.count(in: "ks", includeDeleted: true) } == 1)
        }
    }

    @Test func nonDurableStoreWorks() throws {
        try withTemporaryDirectory { dir in
            let fast = try openStore(dir, durable: false)
            let safe = try openStore(dir, durable: true)  // shares the environment; toggles MDB_NOSYNC per commit
            _ = try fast.write { w in try w.put(Record(key: "a"), in: "ks") }
            _ = try safe.write { w in try w.put(Record(key: "b"), in: "ks") }
            _ = try fast.write { w in try w.put(Record(key: "c"), in: "ks") }
            try fast.close()
            try safe.close()
            let again = try openStore(dir)
            #expect(try again.read { try allRecords($0, "ks").map(\.key) } == ["a", "b", "c"])
            try again.close()
        }
    }

    @Test func manyKeyspaces() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                for i in 0..<300 { try w.put(Record(key: "k"), in: "keyspace-\(i)") }
            }
            try storage.write { w throws in
                for i in stride(from: 0, to: 300, by: 2) { try w.dropKeyspace("keyspace-\(i)") }
            }
            try storage.read { r throws in
                #expect(try r.keyspaces().count == 150)
                #expect(try r.get("k", in: "keyspace-299")?.sequence == 1)
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }
}
