import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB

@Suite struct MapGrowthTests {
    func mapSize(_ storage: any Storage) throws -> Int {
        try #require(storage as? LMDBStorage).environment.mapSize()
    }

    func pattern(_ seed: UInt8, _ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var x = UInt32(seed) &* 2_654_435_761 | 1
        for i in 0..<count {
            x ^= x << 13; x ^= x >> 17; x ^= x << 5
            out[i] = UInt8(truncatingIfNeeded: x)
        }
        return out
    }

    @Test func hugeBodiesGrowTheMapAndTheClosureRunsOnce() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            let before = try mapSize(storage)
            #expect(before == 1 << 20)
            let bodies = (0..<3).map { pattern(UInt8($0), 16 << 20) }
            var runs = 0
            let seqs = try storage.write { w -> [UInt64] in
                runs += 1
                var seqs: [UInt64] = []
                try w.put(Record(key: "small", body: bytes("x")), in: "ks")
                for (i, body) in bodies.enumerated() {
                    seqs.append(try w.put(Record(key: "big\(i)", version: bytes("v\(i)"), body: body), in: "ks"))
                    #expect(try w.get("big\(i)", in: "ks")?.body == body)
                }
                return seqs
            }
            #expect(runs == 1)
            #expect(seqs == [2, 3, 4])
            #expect(try mapSize(storage) >= 48 << 20)
            try storage.read { r throws in
                for (i, body) in bodies.enumerated() {
                    let record = try #require(try r.get("big\(i)", in: "ks"))
                    #expect(record.body == body)
                    #expect(record.sequence == UInt64(i + 2))
                }
                #expect(try r.count(in: "ks", includeDeleted: false) == 4)
            }
            // Replacing a huge body with a small one and back keeps the data right.
            try storage.write { w throws in
                try w.put(Record(key: "big0", body: bytes("tiny")), in: "ks")
                try w.put(Record(key: "small", body: bodies[1]), in: "ks")
            }
            try storage.close()
            let reopened = try openStore(dir)
            #expect(try mapSize(reopened) >= 48 << 20)  // the grown size persisted
            try reopened.read { r throws in
                #expect(try r.get("big0", in: "ks")?.body == bytes("tiny"))
                #expect(try r.get("small", in: "ks")?.body == bodies[1])
                #expect(try r.get("big2", in: "ks")?.body == bodies[2])
            }
            try reopened.close()
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    @Test func replayAfterGrowthRepeatsEveryKindOfOperation() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            defer { try? storage.close() }
            try storage.write { w throws in
                for i in 0..<20 { try w.put(Record(key: "k\(i)", body: bytes("old\(i)")), in: "docs") }
                try w.put(Record(key: "gone"), in: "dropme")
            }
            var log: [String] = []
            try storage.write { w throws in
                log.append("put \(try w.put(Record(key: "k1", body: bytes("new1")), in: "docs"))")
                log.append("delete \(try w.delete("k2", in: "docs") ?? 0)")
                log.append("purge \(try w.purge("k3", in: "docs"))")
                try w.dropKeyspace("dropme")
                log.append("fresh \(try w.put(Record(key: "f"), in: "fresh"))")
                // This one does not fit in the map: the transaction is replayed behind the scenes.
                log.append("big \(try w.put(Record(key: "big", body: pattern(7, 4 << 20)), in: "docs"))")
                log.append("after \(try w.put(Record(key: "k4", body: bytes("new4")), in: "docs"))")
                log.append("fresh2 \(try w.put(Record(key: "g"), in: "fresh"))")
                #expect(try w.keyspaces() == ["docs", "fresh"])
                #expect(try w.get("k1", in: "docs")?.body == bytes("new1"))
            }
            #expect(log == ["put 21", "delete 22", "purge true", "fresh 1", "big 23", "after 24", "fresh2 2"])
            try storage.read { r throws in
                #expect(try r.keyspaces() == ["docs", "fresh"])
                #expect(try r.get("k1", in: "docs")?.body == bytes("new1"))
                #expect(try r.get("k2", in: "docs")?.flags == .deleted)
                #expect(try r.get("k3", in: "docs") == nil)
                #expect(try r.get("k4", in: "docs")?.sequence == 24)
                #expect(try r.get("big", in: "docs")?.body.count == 4 << 20)
                #expect(try r.lastSequence(in: "docs") == 24)
                #expect(try r.count(in: "docs", includeDeleted: true) == 20)
                #expect(try r.count(in: "docs", includeDeleted: false) == 19)
                #expect(try allRecords(r, "fresh").map(\.sequence) == [1, 2])
            }
            #expect(try mapSize(storage) > 1 << 20)
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }

    @Test func extremeInitialSizesAreClamped() throws {
        try withTemporaryDirectory { dir in
            let huge = try openStore(dir + "/huge", initialSize: Int.max)
            #expect(try mapSize(huge) == Layout.maximumMapSize)
            _ = try huge.write { w in try w.put(Record(key: "a"), in: "ks") }
            try huge.close()
            let tiny = try openStore(dir + "/tiny", initialSize: 1)
            #expect(try mapSize(tiny) == Layout.minimumMapSize)
            try tiny.close()
            let negative = try openStore(dir + "/negative", initialSize: -5, busyTimeout: .seconds(-1))
            #expect(try mapSize(negative) == Layout.defaultMapSize)
            _ = try negative.write { w in try w.put(Record(key: "a"), in: "ks") }
            try negative.close()
        }
    }

    @Test func manySmallTransactionsGrowTheMap() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20, durable: false)
            defer { try? storage.close() }
            let body = pattern(3, 20_000)
            for t in 0..<100 {
                try storage.write { w throws in
                    for i in 0..<5 { try w.put(Record(key: "t\(t)-\(i)", body: body), in: "ks") }
                }
            }
            #expect(try mapSize(storage) >= 8 << 20)
            #expect(try storage.read { try $0.count(in: "ks", includeDeleted: false) } == 500)
            #expect(try storage.read { try $0.get("t99-4", in: "ks")?.body } == body)
        }
    }

    @Test func growthIsNotStarvedByBusyReaders() throws {
        final class Flag: @unchecked Sendable {
            private let lock = NSLock()
            private var value = false
            private var errors: [String] = []
            var isSet: Bool { lock.withLock { value } }
            func set() { lock.withLock { value = true } }
            func record(_ error: String) { lock.withLock { errors.append(error) } }
            var recorded: [String] { lock.withLock { errors } }
        }
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20, durable: false, busyTimeout: .seconds(30))
            defer { try? storage.close() }
            _ = try storage.write { w in try w.put(Record(key: "seed"), in: "ks") }
            let stop = Flag()
            let finished = DispatchGroup()
            for _ in 0..<3 {
                finished.enter()
                Thread {
                    defer { finished.leave() }
                    while !stop.isSet {
                        do {
                            try storage.read { r in
                                // Overlapping snapshots, each consistent with itself.
                                let count = try r.count(in: "ks", includeDeleted: false)
                                if try r.lastSequence(in: "ks") != UInt64(count) { stop.record("inconsistent snapshot") }
                                usleep(200)
                            }
                        } catch {
                            stop.record("\(error)")
                        }
                    }
                }.start()
            }
            let body = pattern(9, 300_000)
            for i in 0..<40 {
                _ = try storage.write { w in try w.put(Record(key: "big\(i)", body: body), in: "ks") }
            }
            stop.set()
            finished.wait()
            #expect(stop.recorded.isEmpty, "\(stop.recorded.prefix(3))")
            #expect(try mapSize(storage) >= 12 << 20)
            #expect(try storage.read { try $0.count(in: "ks", includeDeleted: false) } == 41)
        }
    }

    @Test func growthInTheMiddleOfAnEnumeration() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir, initialSize: 1 << 20)
            defer { try? storage.close() }
            let keys = (0..<50).map { String(format: "k%03d", $0) }
            try storage.write { w in for k in keys { try w.put(Record(key: k, body: bytes(k)), in: "src") } }
            var visited: [String] = []
            var visitedBySequence: [UInt64] = []
            try storage.write { w throws in
                try w.enumerate(in: "src") { record in
                    visited.append(record.key)
                    #expect(record.body == bytes(record.key))
                    // Large copies into another keyspace force several map growths mid-walk.
                    try w.put(Record(key: record.key, body: pattern(1, 200_000)), in: "copy")
                    return true
                }
                try w.enumerate(in: "src", since: 0) { record in
                    visitedBySequence.append(record.sequence)
                    try w.put(Record(key: record.key + "-2", body: pattern(2, 200_000)), in: "copy")
                    return true
                }
            }
            #expect(visited == keys)
            #expect(visitedBySequence == Array(1...50))
            #expect(try storage.read { try $0.count(in: "copy", includeDeleted: false) } == 100)
            #expect(try mapSize(storage) >= 16 << 20)
        }
    }
}

/// The map's pages a process read do not stay in its resident set: LMDB maps the whole file,
/// and without a release every page ever touched counted in RSS (0.4–2 GB for a process that
/// replicated 1,000,000 documents, with a heap under 50 MB).
@Suite struct MappedPagesTests {
    /// The resident kilobytes of this process's mappings of `file` (`/proc/self/smaps`).
    func residentKilobytes(of file: String) throws -> Int {
        // procfs files report a size of 0: read them to the end, not by their size.
        let handle = try #require(FileHandle(forReadingAtPath: "/proc/self/smaps"))
        defer { try? handle.close() }
        let smaps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        var total = 0
        var inFile = false
        for line in smaps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), fields.count >= 5 {
                inFile = fields.count >= 6 && fields[5...].joined(separator: " ") == file
            } else if inFile, fields.first == "Rss:", fields.count >= 2, let kb = Int(fields[1]) {
                total += kb
            }
        }
        return total
    }

    @Test func pagesReadAreReleasedFromTheResidentSet() throws {
        try withTemporaryDirectory { dir in
            let storage = try openStore(dir)
            let body = [UInt8](repeating: 0x5A, count: 4000)
            try storage.write { w throws in
                for i in 0..<8_000 { try w.put(Record(key: "k\(i)", body: body), in: "ks") }  // ~32 MB
            }
            let file = try #require(URL(fileURLWithPath: dir).appendingPathComponent("data.mdb").path
                .withCString { String(cString: realpath($0, nil)) })
            // Reading every record maps its pages (measured before the transaction ends: a
            // release happens only as a transaction ends).
            let afterRead = try storage.read { r throws in
                for i in 0..<8_000 { _ = try r.get("k\(i)", in: "ks") }
                return try residentKilobytes(of: file)
            }
            #expect(afterRead >= 16_000, "the test's measurement: \(afterRead) kB of data.mdb resident after reading ~32 MB")
            // Once the interval has passed, the next transaction to end releases them.
            Thread.sleep(forTimeInterval: Double(LMDBEnvironment.mappedPagesReleaseInterval.components.seconds) + 0.6)
            try storage.read { r throws in _ = try r.get("k0", in: "ks") }
            let afterRelease = try residentKilobytes(of: file)
            #expect(afterRelease < 2_000, "\(afterRelease) kB of data.mdb still resident (was \(afterRead) kB)")
            // And the data is intact.
            try storage.read { r throws in
                #expect(try r.get("k7999", in: "ks")?.body == body)
                #expect(try r.count(in: "ks", includeDeleted: false) == 8_000)
            }
            try storage.close()
        }
    }
}
