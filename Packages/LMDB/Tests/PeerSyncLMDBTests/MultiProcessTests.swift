import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB

@Suite struct MultiProcessTests {
    @Test func anotherProcessGrowsTheMapAndThisOneAdoptsIt() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            defer { try? storage.close() }
            let lmdb = try #require(storage as? LMDBStorage)
            _ = try storage.write { w in try w.put(Record(key: "parent"), in: "ks") }
            #expect(try lmdb.environment.mapSize() == 1 << 20)
            // The child writes ~6 MB: far past this process's 1 MiB map.
            #expect(try runHelper(["grow", dir, "60", "100000"]) == "60")
            // The next transaction here gets MDB_MAP_RESIZED and adopts the new size.
            try storage.read { r throws in
                #expect(try r.count(in: "child", includeDeleted: false) == 60)
                #expect(try r.get("child-59", in: "child")?.body.count == 100_000)
                #expect(try r.get("parent", in: "ks") != nil)
            }
            #expect(try lmdb.environment.mapSize() > 6 << 20)
            _ = try storage.write { w in try w.put(Record(key: "parent-2", body: [UInt8](repeating: 1, count: 1 << 20)), in: "ks") }
            #expect(try storage.read { try $0.count(in: "ks", includeDeleted: false) } == 2)
        }
    }

    @Test func writersAreSerializedAcrossProcesses() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, busyTimeout: .seconds(60))
            defer { try? storage.close() }
            _ = try storage.write { w in try w.put(Record(key: "counter", body: bytes("0")), in: "shared") }
            let children = try (0..<2).map { _ in try Child(["increment", dir, "150"]) }
            for _ in 0..<150 {
                try storage.write { w throws in
                    let value = Int(String(decoding: try w.get("counter", in: "shared")?.body ?? [], as: UTF8.self)) ?? -1000
                    try w.put(Record(key: "counter", body: bytes(String(value + 1))), in: "shared")
                }
            }
            for child in children {
                let result = child.finish()
                #expect(result.status == 0, "\(result.errors)")
            }
            try storage.read { r throws in
                #expect(try r.get("counter", in: "shared")?.body == bytes("450"))
                #expect(try r.lastSequence(in: "shared") == 451)
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    @Test func anotherProcessHoldingTheWriteLockMakesWritesBusy() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, busyTimeout: .milliseconds(300))
            defer { try? storage.close() }
            _ = try storage.write { w in try w.put(Record(key: "mine"), in: "ks") }
            let child = try Child(["hold", dir, "3000"])
            #expect(child.readLine() == "locked")
            #expect(caughtError { _ = try storage.write { w in try w.put(Record(key: "blocked"), in: "ks") } }?.code == .busy)
            // Reading is not blocked, and does not see the uncommitted write.
            #expect(try storage.read { try $0.get("holder", in: "child") } == nil)
            let result = child.finish()
            #expect(result.status == 0, "\(result.errors)")
            #expect(try storage.read { try $0.get("holder", in: "child")?.body } == bytes("held"))
            _ = try storage.write { w in try w.put(Record(key: "after"), in: "ks") }
        }
    }

    /// Two LMDB environments on one store inside this process: one grows the map, the other
    /// gets `MDB_MAP_RESIZED` and adopts it. (LMDB does not support two environments on one
    /// store in one process — its POSIX locks are per process — so this is sequenced to stay
    /// within what works: neither environment runs a transaction after the other closed.)
    @Test func mapResizedAcrossTwoEnvironments() throws {
        try withTemporaryDirectory { dir in
            let first = try openStore(dir, initialSize: 1 << 20)
            let firstEnv = try #require(first as? LMDBStorage).environment
            _ = try first.write { w in try w.put(Record(key: "one"), in: "ks") }
            let options = StorageOptions(initialSize: 1 << 20)
            let secondEnv = try LMDBEnvironment(directory: dir, options: options)
            let second = LMDBStorage(environment: secondEnv, directory: dir, options: options, registered: false)
            let body = [UInt8](repeating: 7, count: 200_000)
            try second.write { w throws in
                for i in 0..<30 { try w.put(Record(key: "two-\(i)", body: body), in: "ks") }
            }
            #expect(try secondEnv.mapSize() > 4 << 20)
            #expect(try firstEnv.mapSize() == 1 << 20)
            try first.read { r throws in
                #expect(try r.count(in: "ks", includeDeleted: false) == 31)
                #expect(try r.get("two-29", in: "ks")?.body == body)
            }
            #expect(try firstEnv.mapSize() == secondEnv.mapSize())
            // Writes alternate between the two without losing anything.
            _ = try first.write { w in try w.put(Record(key: "three"), in: "ks") }
            _ = try second.write { w in try w.put(Record(key: "four"), in: "ks") }
            #expect(try first.read { try $0.lastSequence(in: "ks") } == 33)
            try first.close()
            try second.close()
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }
}
