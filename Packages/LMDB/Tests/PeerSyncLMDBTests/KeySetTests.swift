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
}
