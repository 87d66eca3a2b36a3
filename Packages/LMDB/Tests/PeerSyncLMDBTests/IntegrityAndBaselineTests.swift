import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB
import PeerSyncLMDBBaseline

@Suite struct IntegrityAndBaselineTests {
    @Test func integrityCheckReportsADamagedIndex() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            try storage.write { w throws in
                for i in 0..<10 { try w.put(Record(key: "k\(i)"), in: "docs") }
                try w.delete("k3", in: "docs")
            }
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
            try storage.write { w throws in
                let transaction = try #require(w as? LMDBTransaction)
                try transaction.damageSequenceIndexForTesting(keyspace: "docs", sequence: 5)
            }
            let problems = try LMDBStorageBackend().checkIntegrity(directory: dir)
            #expect(problems.contains { $0.contains("`k4`") && $0.contains("missing from the sequence index") })
            #expect(problems.contains { $0.contains("9 sequence index entries for 10 records") })
            // The store stays open and usable while being checked.
            #expect(try storage.read { try $0.count(in: "docs", includeDeleted: true) } == 10)
            try storage.close()
        }
    }

    @Test func rawBaselineDoesTheSameWork() throws {
        try withTemporaryDirectory { dir in
            let records = (0..<1000).map { Record(key: "doc-\($0)", body: [UInt8](repeating: UInt8($0 % 256), count: 100)) }
            let raw = try LMDBRawBaseline(directory: dir + "/raw", mapSize: 16 << 20, durable: false)
            try raw.insert(records)
            #expect(try raw.get(records.map(\.key).shuffled()) == 1000)
            #expect(try raw.get(["missing", "doc-1"]) == 1)
            let scan = try raw.scan()
            #expect(scan.count == 1000)
            #expect(scan.bytes == 100_000)
            raw.close()
            raw.close()
            #expect(caughtError { _ = try raw.scan() }?.code == .closed)

            let small = try LMDBRawBaseline(directory: dir + "/small", mapSize: 1 << 20, durable: false)
            let big = (0..<20).map { Record(key: "big-\($0)", body: [UInt8](repeating: 1, count: 100_000)) }
            #expect(caughtError { try small.insert(big) }?.code == .tooLarge)
            #expect(try small.scan().count == 0)  // rolled back
            small.close()
        }
    }
}
