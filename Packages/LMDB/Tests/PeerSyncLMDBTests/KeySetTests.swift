import Foundation
import PeerSyncCore
import PeerSyncStorage
import Testing
@testable import PeerSyncLMDB

/// LMDB's ordered key sets: records without sequence index entries, under their own meta tag.
@Suite struct KeySetTests {
    /// Entries leave nothing in the sequences DB, key sets are not keyspaces, the integrity
    /// check accepts them, and every key set operation is replayed after the map grew.
    @Test func keySetOperationsAreReplayedAfterGrowthAndHaveNoSequenceIndex() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            defer { try? storage.close() }
            try storage.write { w throws in
                for i in 0..<20 { try w.putEntry("e\(i)", value: Array("v\(i)".utf8), inKeySet: "set") }
                try w.putEntry("gone", value: [], inKeySet: "dropme")
                try w.put(Record(key: "r"), in: "set")
            }
            try storage.write { w throws in
                try w.putEntry("e1", value: Array("new".utf8), inKeySet: "set")
                #expect(try w.removeEntry("e2", inKeySet: "set"))
                try w.dropKeySet("dropme")
                try w.putEntry("f", value: [1], inKeySet: "fresh")
                // Does not fit in the map: the transaction is replayed behind the scenes.
                try w.put(Record(key: "big", body: [UInt8](repeating: 7, count: 4 << 20)), in: "docs")
                try w.putEntry("e3", value: Array("after".utf8), inKeySet: "set")
            }
            try storage.read { r throws in
                #expect(try r.keyspaces() == ["docs", "set"])
                #expect(try r.entry("e1", inKeySet: "set") == Array("new".utf8))
                #expect(try r.entry("e2", inKeySet: "set") == nil)
                #expect(try r.entry("e3", inKeySet: "set") == Array("after".utf8))
                #expect(try r.entry("gone", inKeySet: "dropme") == nil)
                #expect(try r.entry("f", inKeySet: "fresh") == [1])
                var count = 0
                try r.enumerateEntries(inKeySet: "set", range: .all, descending: false) { _, _ in count += 1; return true }
                #expect(count == 19)
                #expect(try r.get("r", in: "set") != nil)
            }
            let indexed = try storage.read { r throws in try #require(r as? LMDBTransaction).sequenceIndexEntryCountForTesting() }
            #expect(indexed == 2, "only the two keyspace records are indexed")
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    /// Key-set puts are held back and written sorted at the commit: a map too small for them
    /// grows during that write-out, and the replay re-applies the entries written before it
    /// (and the transaction's other writes) exactly once, so every entry and the record are
    /// there afterwards, with the last value of a key put twice.
    @Test func heldBackPutsGrowTheMapWhenWrittenAtTheCommit() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            defer { try? storage.close() }
            let count = 20_000
            var keys = (0..<count).map { String(format: "k%06d", $0) }
            var generator = SystemRandomNumberGenerator()
            keys.shuffle(using: &generator)
            let value = [UInt8](repeating: 9, count: 100)
            try storage.write { w throws in
                try w.put(Record(key: "doc", body: [1]), in: "docs")
                for key in keys { try w.putEntry(key, value: value, inKeySet: "index") }
                try w.putEntry("k000005", value: [5], inKeySet: "index")
            }
            try storage.read { r throws in
                var seen: [String] = []
                try r.enumerateEntries(inKeySet: "index", range: .all, descending: false) { key, _ in
                    seen.append(key)
                    return true
                }
                #expect(seen == keys.sorted())
                #expect(try r.entry("k000005", inKeySet: "index") == [5])
                #expect(try r.entry("k000006", inKeySet: "index") == value)
                #expect(try r.get("doc", in: "docs")?.body == [1])
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    /// A transaction past ``PendingKeySetPuts/maxPendingPuts`` (written out early, each put
    /// journaled for a map growth's replay) leaves a store that passes LMDB's integrity check.
    /// What the transaction sees and keeps is the conformance case `manyKeySetPutsInOneTransaction`.
    @Test func heldBackPutsBeyondTheLimitKeepTheStoreIntact() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            let count = PendingKeySetPuts.maxPendingPuts + 1_000
            var keys = (0..<count).map { String(format: "k%06d", $0) }
            var generator = SystemRandomNumberGenerator()
            keys.shuffle(using: &generator)
            try storage.write { w throws in
                for (i, key) in keys.enumerated() { try w.putEntry(key, value: [UInt8(truncatingIfNeeded: i)], inKeySet: "big") }
            }
            try storage.read { r throws in #expect(try r.entry("k000000", inKeySet: "big") != nil) }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    /// Dropping a key set forgets its held-back puts (later puts start it afresh), puts of
    /// other key sets are unaffected, and a transaction that rolls back writes none of them.
    @Test func heldBackPutsAreForgottenByDropAndRollback() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            defer { try? storage.close() }
            try storage.write { w throws in
                try w.putEntry("a", value: [1], inKeySet: "dropped")
                try w.putEntry("b", value: [2], inKeySet: "kept")
                try w.dropKeySet("dropped")
                try w.putEntry("c", value: [3], inKeySet: "dropped")
                #expect(try w.entry("a", inKeySet: "dropped") == nil)
            }
            struct Rollback: Error {}
            #expect(throws: Rollback.self) {
                try storage.write { w throws in
                    try w.putEntry("x", value: [9], inKeySet: "kept")
                    try w.putEntry("y", value: [9], inKeySet: "new")
                    throw Rollback()
                }
            }
            try storage.read { r throws in
                #expect(try r.entry("a", inKeySet: "dropped") == nil)
                #expect(try r.entry("c", inKeySet: "dropped") == [3])
                #expect(try r.entry("b", inKeySet: "kept") == [2])
                #expect(try r.entry("x", inKeySet: "kept") == nil)
                #expect(try r.entry("y", inKeySet: "new") == nil)
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }
}
