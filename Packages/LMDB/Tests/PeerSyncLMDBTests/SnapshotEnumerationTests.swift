import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB

/// An enumeration inside a write transaction sees the keyspace as it was when the enumeration
/// began, whatever its body writes (like the in-memory backend, which walks a snapshot).
@Suite struct SnapshotEnumerationTests {
    func seeded(_ dir: String, _ keys: [String]) throws -> any Storage {
        let storage = try openStore(dir)
        try storage.write { w in for k in keys { try w.put(Record(key: k, body: bytes("v-" + k)), in: "ks") } }
        return storage
    }

    @Test(arguments: [false, true])
    func insertsAheadAreNotVisited(descending: Bool) throws {
        try withTemporaryDirectory { dir in
            let storage = try seeded(dir, ["b", "d", "f"])
            defer { try? storage.close() }
            var visited: [String] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks", range: .all, descending: descending) { record in
                    visited.append(record.key)
                    try w.put(Record(key: record.key + "x"), in: "ks")   // just after this key
                    try w.put(Record(key: "a" + record.key), in: "ks")   // before every key
                    try w.put(Record(key: "e"), in: "ks")                // in between
                    return true
                }
            }
            #expect(visited == (descending ? ["f", "d", "b"] : ["b", "d", "f"]))
            #expect(try storage.read { try $0.count(in: "ks", includeDeleted: false) } == 10)
        }
    }

    @Test(arguments: [false, true])
    func changesAheadShowTheOriginalRecords(descending: Bool) throws {
        try withTemporaryDirectory { dir in
            let keys = ["a", "b", "c", "d", "e"]
            let storage = try seeded(dir, keys)
            defer { try? storage.close() }
            var visited: [String] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks", range: .all, descending: descending) { record in
                    visited.append("\(record.key)=\(String(decoding: record.body, as: UTF8.self))@\(record.sequence)")
                    if record.key == (descending ? "e" : "a") {
                        try w.delete("c", in: "ks")
                        #expect(try w.purge("d", in: "ks"))
                        try w.put(Record(key: "b", body: bytes("changed")), in: "ks")
                        try w.dropKeyspace("other")
                    }
                    try w.put(Record(key: record.key, body: bytes("seen")), in: "ks")  // the current one
                    return true
                }
            }
            let expected = ["a=v-a@1", "b=v-b@2", "c=v-c@3", "d=v-d@4", "e=v-e@5"]
            #expect(visited == (descending ? expected.reversed() : expected))
            try storage.read { r throws in
                #expect(try r.get("c", in: "ks")?.body == bytes("seen"))
                #expect(try r.get("d", in: "ks")?.body == bytes("seen"))
                #expect(try r.count(in: "ks", includeDeleted: true) == 5)
            }
        }
    }

    @Test func rangeEnumerationWithWritesStaysInRange() throws {
        try withTemporaryDirectory { dir in
            let storage = try seeded(dir, ["a1", "a2", "a3", "b1"])
            defer { try? storage.close() }
            var visited: [String] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks", range: .prefix("a"), descending: false) { record in
                    visited.append(record.key)
                    try w.purge("a3", in: "ks")
                    try w.put(Record(key: "a25"), in: "ks")
                    try w.put(Record(key: "b0"), in: "ks")
                    return true
                }
            }
            #expect(visited == ["a1", "a2", "a3"])
        }
    }

    @Test func droppingTheKeyspaceDuringItsEnumeration() throws {
        try withTemporaryDirectory { dir in
            let storage = try seeded(dir, ["a", "b", "c"])
            defer { try? storage.close() }
            var visited: [String] = []
            var bySequence: [UInt64] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks", since: 0) { record in
                    bySequence.append(record.sequence)
                    return true
                }
                try w.enumerate(in: "ks") { record in
                    visited.append(record.key)
                    if record.key == "a" {
                        try w.dropKeyspace("ks")
                        try w.put(Record(key: "z"), in: "ks")  // a new keyspace of the same name
                    }
                    return true
                }
                #expect(try allRecords(w, "ks").map(\.key) == ["z"])
            }
            #expect(visited == ["a", "b", "c"])
            #expect(bySequence == [1, 2, 3])
        }
    }

    @Test func bySequenceWithChangesAhead() throws {
        try withTemporaryDirectory { dir in
            let storage = try seeded(dir, ["a", "b", "c", "d"])  // sequences 1...4
            defer { try? storage.close() }
            var visited: [String] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks", since: 0) { record in
                    visited.append("\(record.key)@\(record.sequence)")
                    if record.key == "a" {
                        try w.put(Record(key: "c", body: bytes("new")), in: "ks")  // c: 3 → 5
                        try w.purge("d", in: "ks")
                        try w.put(Record(key: "e"), in: "ks")                      // 6
                    }
                    try w.put(record, in: "ks")  // the current one moves to the end
                    return true
                }
                try w.enumerate(in: "ks", since: 0) { record in
                    try w.dropKeyspace("ks")
                    _ = record
                    return true
                }
            }
            #expect(visited == ["a@1", "b@2", "c@3", "d@4"])
        }
    }

    @Test func nestedEnumerations() throws {
        try withTemporaryDirectory { dir in
            let storage = try seeded(dir, ["a", "b", "c"])
            defer { try? storage.close() }
            var pairs: [String] = []
            try storage.write { w throws in
                try w.enumerate(in: "ks") { outer in
                    try w.enumerate(in: "ks") { inner in
                        pairs.append(outer.key + inner.key)
                        try w.put(Record(key: outer.key + inner.key), in: "ks")
                        return true
                    }
                    return true
                }
            }
            // Each walk sees the keys that existed when it began.
            #expect(pairs.prefix(3) == ["aa", "ab", "ac"])
            #expect(pairs.count == 3 + 6 + 12)
        }
    }
}
