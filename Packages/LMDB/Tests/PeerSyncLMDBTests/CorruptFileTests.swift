import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB
import PeerSyncLMDBBaseline

@Suite struct CorruptFileTests {
    /// Makes a valid store with a few hundred records and returns the size of its data file.
    @discardableResult
    func makeStore(_ dir: String) throws -> Int {
        let storage = try openStore(dir)
        try storage.write { w throws in
            for i in 0..<400 { try w.put(Record(key: "key-\(i)", body: [UInt8](repeating: UInt8(i % 251), count: 300)), in: "ks") }
        }
        try storage.close()
        let size = try FileManager.default.attributesOfItem(atPath: dir + "/data.mdb")[.size] as? Int
        return try #require(size)
    }

    func expectCorrupt(_ dir: String, _ comment: Comment) {
        let error = caughtError { _ = try openStore(dir) }
        #expect(error?.code == .corrupt, comment)
        #expect(EnvironmentRegistry.shared.isOpen(dir) == false)
    }

    func write(_ data: [UInt8], to path: String) throws {
        try Data(data).write(to: URL(fileURLWithPath: path))
    }

    func truncate(_ path: String, to size: Int) throws {
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.truncate(atOffset: UInt64(size))
        try handle.close()
    }

    @Test func zeroLengthFile() throws {
        try withTemporaryDirectory { dir in
            try write([], to: dir + "/data.mdb")
            #expect(LMDBStorageBackend().hasStore(in: dir))
            expectCorrupt(dir, "zero-length data.mdb")
            // Nothing was written over it.
            #expect(try FileManager.default.attributesOfItem(atPath: dir + "/data.mdb")[.size] as? Int == 0)
        }
    }

    @Test(arguments: [1, 100, 151, 4096, 65_536, 1 << 20])
    func randomGarbage(size: Int) throws {
        try withTemporaryDirectory { dir in
            var rng = SystemRandomNumberGenerator()
            try write((0..<size).map { _ in UInt8.random(in: 0...255, using: &rng) }, to: dir + "/data.mdb")
            expectCorrupt(dir, "random garbage of \(size) bytes")
        }
    }

    @Test func textFile() throws {
        try withTemporaryDirectory { dir in
            try write(Array(String(repeating: "not a database\n", count: 1000).utf8), to: dir + "/data.mdb")
            expectCorrupt(dir, "text file")
        }
    }

    @Test func truncatedFiles() throws {
        try withTemporaryDirectory { dir in
            let size = try makeStore(dir)
            #expect(size > 16 * 4096)
            let original = try Data(contentsOf: URL(fileURLWithPath: dir + "/data.mdb"))
            for cut in [size - 4096, size / 2, 3 * 4096, 2 * 4096, 4096 + 100, 4096, 100] {
                try original.write(to: URL(fileURLWithPath: dir + "/data.mdb"))
                try truncate(dir + "/data.mdb", to: cut)
                expectCorrupt(dir, "truncated to \(cut) of \(size) bytes")
            }
            // The intact file still opens.
            try original.write(to: URL(fileURLWithPath: dir + "/data.mdb"))
            let storage = try openStore(dir)
            #expect(try storage.read { try $0.count(in: "ks", includeDeleted: false) } == 400)
            try storage.close()
        }
    }

    /// Reads a little-endian integer out of the file bytes.
    func field(_ bytes: [UInt8], _ offset: Int, _ size: Int) -> UInt64 {
        (0..<size).reduce(UInt64(0)) { $0 | UInt64(bytes[offset + $1]) << (8 * UInt64($1)) }
    }

    @Test func garbageRootPage() throws {
        try withTemporaryDirectory { dir in
            try makeStore(dir)
            let path = dir + "/data.mdb"
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let pageSize = Int(field(bytes, 40, 4))
            let newest = field(bytes, pageSize + 144, 8) > field(bytes, 144, 8) ? pageSize : 0
            let root = Int(field(bytes, newest + 128, 8))
            #expect(root >= 2)
            for i in 0..<pageSize { bytes[root * pageSize + i] = UInt8(truncatingIfNeeded: i &* 131 &+ 7) }
            try write(bytes, to: path)
            expectCorrupt(dir, "main root page overwritten")
        }
    }

    @Test func rootPagePointingOutsideTheFile() throws {
        try withTemporaryDirectory { dir in
            try makeStore(dir)
            let path = dir + "/data.mdb"
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            for meta in [0, Int(field(bytes, 40, 4))] {
                for i in 0..<8 { bytes[meta + 128 + i] = 0x7F }  // main DB root
            }
            try write(bytes, to: path)
            expectCorrupt(dir, "root page beyond the end")
        }
    }

    @Test func foreignLMDBEnvironment() throws {
        try withTemporaryDirectory { dir in
            let raw = try LMDBRawBaseline(directory: dir, mapSize: 1 << 20)
            try raw.insert([Record(key: "someone-else", body: bytes("data"))])
            raw.close()
            expectCorrupt(dir, "an LMDB environment of another application")
        }
    }

    @Test func dataFileIsADirectory() throws {
        try withTemporaryDirectory { dir in
            try FileManager.default.createDirectory(atPath: dir + "/data.mdb", withIntermediateDirectories: false)
            expectCorrupt(dir, "data.mdb is a directory")
        }
    }

    /// Damages each byte of the newest meta page in turn, in a child process (so that a crash
    /// would be caught, not fatal): opening and reading must end in success or a typed error,
    /// never in a signal.
    @Test func damagedMetaPageNeverCrashes() throws {
        try withTemporaryDirectory { dir in
            let source = dir + "/source"
            try makeStore(source)
            let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source + "/data.mdb")))
            let pageSize = Int(field(original, 40, 4))
            let newest = field(original, pageSize + 144, 8) > field(original, 144, 8) ? pageSize : 0
            let target = dir + "/target"
            try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
            var outcomes: [Int32: Int] = [:]
            for offset in stride(from: 0, to: 152, by: 1) where offset < 24 || offset >= 32 {  // skip mm_address
                var damaged = original
                damaged[newest + offset] ^= 0xA5
                try write(damaged, to: target + "/data.mdb")
                try? FileManager.default.removeItem(atPath: target + "/lock.mdb")
                let child = try Child(["check", target])
                let result = child.finish()
                #expect(child.process.terminationReason == .exit, "byte \(offset): \(result.errors)")
                outcomes[result.status, default: 0] += 1
            }
            // Most damage is detected; some (e.g. in unused fields) is harmless.
            #expect(outcomes[1, default: 0] > 0)
        }
    }
}
