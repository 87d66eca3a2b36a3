import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncSQLite
import PeerSyncSQLiteBaseline

@Suite("SQLite storage backend", .serialized)
struct SQLiteStorageTests {
    // MARK: Basics, files, reopen

    @Test func backendIdentity() throws {
        let dir = try TempDirectory()
        #expect(backend.name == "sqlite")
        #expect(!backend.hasStore(in: dir.path))
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        #expect(storage.backendName == "sqlite")
        #expect(storage.directory == dir.path)
        #expect(backend.hasStore(in: dir.path))
        try storage.close()
    }

    /// Two openers of one new store at the same moment (an app and its extension starting
    /// together) both succeed: switching the new file to WAL can be refused at once with
    /// `SQLITE_BUSY`, without the busy handler, and is tried again within the busy timeout.
    @Test func twoOpenersOfANewStoreAtOnceBothSucceed() throws {
        for round in 0..<30 {
            let dir = try TempDirectory()
            let results = LockedValue<[Result<any Storage, any Error>]>([])
            let start = DispatchSemaphore(value: 0), done = DispatchGroup()
            for _ in 0..<2 {
                done.enter()
                Thread {
                    start.wait()
                    let result = Result<any Storage, any Error> { try backend.open(directory: dir.path, options: StorageOptions()) }
                    results.withLock { $0.append(result) }
                    done.leave()
                }.start()
            }
            start.signal()
            start.signal()
            #expect(done.wait(timeout: .now() + 60) == .success, "round \(round): an opener did not finish")
            for result in results.withLock({ $0 }) {
                switch result {
                case .success(let storage): try storage.close()
                case .failure(let error): Issue.record("round \(round): \(error)")
                }
            }
        }
    }

    @Test func opensInNewNestedDirectory() throws {
        let dir = try TempDirectory()
        let nested = dir.file("a/b/c")
        let storage = try backend.open(directory: nested, options: StorageOptions())
        try storage.write { _ = try $0.put(Record(key: "k"), in: "ks") }
        try storage.close()
        #expect(backend.hasStore(in: nested))
    }

    @Test func roundTripAndReopen() throws {
        let dir = try TempDirectory()
        var storage = try backend.open(directory: dir.path, options: StorageOptions())
        let record = Record(key: "doc1", flags: [.conflicted, .hasAttachments], version: [1, 2, 3],
                            body: Array(#"{"a":1}"#.utf8), extra: [9, 8])
        let sequence = try storage.write { writer throws in
            try writer.put(Record(key: "other"), in: "ks2")
            return try writer.put(record, in: "ks1")
        }
        #expect(sequence == 1)
        try storage.close()

        storage = try backend.open(directory: dir.path, options: StorageOptions(create: false))
        defer { try? storage.close() }
        try storage.read { reader throws in
            let loaded = try #require(try reader.get("doc1", in: "ks1"))
            #expect(loaded.key == "doc1")
            #expect(loaded.sequence == 1)
            #expect(loaded.flags == [.conflicted, .hasAttachments])
            #expect(loaded.version == [1, 2, 3])
            #expect(loaded.body == Array(#"{"a":1}"#.utf8))
            #expect(loaded.extra == [9, 8])
            #expect(try reader.get("missing", in: "ks1") == nil)
            #expect(try reader.get("doc1", in: "no-such-keyspace") == nil)
            #expect(try reader.keyspaces() == ["ks1", "ks2"])
            #expect(try reader.lastSequence(in: "ks1") == 1)
            #expect(try reader.lastSequence(in: "ks2") == 1)
            #expect(try reader.count(in: "ks1", includeDeleted: true) == 1)
        }
    }

    @Test func walModeFilesAndCleanClose() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 10)
        _ = try storage.read { try $0.count(in: "docs", includeDeleted: true) }
        #expect(FileManager.default.fileExists(atPath: dir.databasePath + "-wal"))
        #expect(FileManager.default.fileExists(atPath: dir.databasePath + "-shm"))
        let sqlite = try #require(storage as? SQLiteStorage)
        #expect(try sqlite.writerPragma("journal_mode") == "wal")
        // Header bytes 18 and 19 (file format write/read version) are 2 in WAL mode.
        let header = try #require(FileManager.default.contents(atPath: dir.databasePath))
        #expect(header.count >= 100 && header[18] == 2 && header[19] == 2)
        try storage.close()
        // The last connection (writer and every pooled reader) closed: SQLite checkpointed
        // and removed the WAL.
        #expect(!FileManager.default.fileExists(atPath: dir.databasePath + "-wal"))
        let reopened = try backend.open(directory: dir.path, options: StorageOptions())
        #expect(try reopened.read { try $0.count(in: "docs", includeDeleted: true) } == 10)
        try reopened.close()
    }

    @Test(arguments: [true, false])
    func durableSelectsSynchronousMode(durable: Bool) throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions(durable: durable))
        defer { try? storage.close() }
        let sqlite = try #require(storage as? SQLiteStorage)
        // PRAGMA synchronous: 1 = NORMAL, 2 = FULL.
        #expect(try sqlite.writerPragma("synchronous") == (durable ? "2" : "1"))
    }

    @Test func emptyFileBecomesAStore() throws {
        let dir = try TempDirectory()
        #expect(FileManager.default.createFile(atPath: dir.databasePath, contents: Data()))
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try storage.write { _ = try $0.put(Record(key: "k"), in: "ks") }
        try storage.close()
    }

    @Test func createFalseRequiresAStore() throws {
        let dir = try TempDirectory()
        expectError(.notFound) { _ = try backend.open(directory: dir.file("missing"), options: StorageOptions(create: false)) }
        #expect(!FileManager.default.fileExists(atPath: dir.file("missing")))
        expectError(.notFound) { _ = try backend.open(directory: dir.path, options: StorageOptions(create: false)) }
        #expect(!backend.hasStore(in: dir.path))
    }

    @Test func directoryPathThatIsAFile() throws {
        let dir = try TempDirectory()
        #expect(FileManager.default.createFile(atPath: dir.file("plain"), contents: Data("x".utf8)))
        expectError(.io) { _ = try backend.open(directory: dir.file("plain"), options: StorageOptions()) }
    }

    // MARK: Damaged files

    @Test func fileThatIsNotADatabase() throws {
        let dir = try TempDirectory()
        let text = String(repeating: "this is not a database, just some text\n", count: 200)
        #expect(FileManager.default.createFile(atPath: dir.databasePath, contents: Data(text.utf8)))
        expectError(.corrupt) { _ = try backend.open(directory: dir.path, options: StorageOptions()) }
        expectError(.corrupt) { _ = try backend.checkIntegrity(directory: dir.path) }
        // Untouched: we never write into a file we do not understand.
        #expect(FileManager.default.contents(atPath: dir.databasePath) == Data(text.utf8))
    }

    @Test(arguments: [0.5, 0.9])
    func truncatedDatabase(fraction: Double) throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 2_000)
        try storage.close()
        let size = try fileSize(dir.databasePath)
        #expect(size > 1_000_000)
        let handle = try #require(FileHandle(forWritingAtPath: dir.databasePath))
        try handle.truncate(atOffset: UInt64(Double(size) * fraction))
        try handle.close()
        expectError(.corrupt) { _ = try backend.open(directory: dir.path, options: StorageOptions()) }
    }

    @Test func truncatedToLessThanAHeader() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 10)
        try storage.close()
        let handle = try #require(FileHandle(forWritingAtPath: dir.databasePath))
        try handle.truncate(atOffset: 60)
        try handle.close()
        expectError(.corrupt) { _ = try backend.open(directory: dir.path, options: StorageOptions()) }
    }

    @Test func damagedHeader() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 10)
        try storage.close()
        try overwrite(dir.databasePath, at: 0, with: Array("Not SQLite at all".utf8))
        expectError(.corrupt) { _ = try backend.open(directory: dir.path, options: StorageOptions()) }
    }

    @Test func damagedDataPagesAreReportedNotCrashed() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 3_000)
        try storage.close()
        #expect(try backend.checkIntegrity(directory: dir.path) == [])
        let size = try fileSize(dir.databasePath)
        // Garbage over ~20 pages in the middle of the file (page 1 and the schema intact).
        let garbage = (0..<(20 * 4096)).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) }
        try overwrite(dir.databasePath, at: (size / 2) & ~4095, with: garbage)

        do {
            let damaged = try backend.open(directory: dir.path, options: StorageOptions())
            defer { try? damaged.close() }
            expectError(.corrupt) {
                try damaged.read { reader throws in
                    try reader.enumerate(in: "docs") { _ in true }
                    try reader.enumerate(in: "docs", since: 0) { _ in true }
                }
            }
        } catch let error as PeerSyncError {
            #expect(error.code == .corrupt)
        }
        let problems = try backend.checkIntegrity(directory: dir.path)
        #expect(!problems.isEmpty)
    }

    @Test func sqliteDatabaseOfAnotherApplication() throws {
        let dir = try TempDirectory()
        let raw = try SQLiteRawBaseline(path: dir.databasePath)
        try raw.insert(count: 3) { ("k\($0)", [1, 2, 3]) }
        try raw.close()
        expectError(.corrupt) { _ = try backend.open(directory: dir.path, options: StorageOptions()) }
        let problems = try backend.checkIntegrity(directory: dir.path)
        #expect(problems.count == 1 && problems[0].contains("not a PeerSync store"))
    }

    @Test func integrityCheckOfHealthyStore() throws {
        let dir = try TempDirectory()
        expectError(.notFound) { _ = try backend.checkIntegrity(directory: dir.path) }
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try fill(storage, count: 200, keyspace: "a")
        try fill(storage, count: 20, keyspace: "b")
        try storage.write { writer throws in
            _ = try writer.purge("doc-000199", in: "a")
            _ = try writer.delete("doc-000001", in: "b")
        }
        // Works while the store is open in this process.
        #expect(try backend.checkIntegrity(directory: dir.path) == [])
        #expect(try backend.checkIntegrity(directory: dir.path, quick: true) == [])
        try storage.close()
        #expect(try backend.checkIntegrity(directory: dir.path) == [])
    }

    // MARK: Transactions and locking

    @Test func busyTimeoutAcrossConnections() throws {
        let dir = try TempDirectory()
        let first = try backend.open(directory: dir.path, options: StorageOptions())
        let second = try backend.open(directory: dir.path, options: StorageOptions(busyTimeout: .milliseconds(200)))
        defer { try? first.close(); try? second.close() }
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        holdWriteTransaction(first, entered: entered, release: release, done: done) { writer in
            try writer.put(Record(key: "from-first"), in: "ks")
        }
        entered.wait()
        let start = ContinuousClock.now
        expectError(.busy) { try second.write { _ = try $0.put(Record(key: "from-second"), in: "ks") } }
        #expect(ContinuousClock.now - start >= .milliseconds(150))
        // Readers are not blocked by the writer.
        #expect(try second.read { try $0.count(in: "ks", includeDeleted: true) } == 0)
        release.signal()
        done.wait()
        try second.write { _ = try $0.put(Record(key: "from-second"), in: "ks") }
        #expect(try first.read { try $0.count(in: "ks", includeDeleted: true) } == 2)
        #expect(try second.read { try $0.lastSequence(in: "ks") } == 2)
    }

    @Test func busyTimeoutWithinOneStore() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions(busyTimeout: .milliseconds(200)))
        defer { try? storage.close() }
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        holdWriteTransaction(storage, entered: entered, release: release, done: done)
        entered.wait()
        expectError(.busy) { try storage.write { _ = try $0.put(Record(key: "k"), in: "ks") } }
        release.signal()
        done.wait()
        try storage.write { _ = try $0.put(Record(key: "k"), in: "ks") }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3"),
                   "needs the sqlite3 command-line shell"))
    func busyTimeoutAgainstAnotherProcess() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions(busyTimeout: .milliseconds(300)))
        defer { try? storage.close() }
        try storage.write { _ = try $0.put(Record(key: "k"), in: "ks") }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [dir.databasePath]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() }; process.waitUntilExit() }
        input.fileHandleForWriting.write(Data("BEGIN IMMEDIATE;\nSELECT 'locked';\n".utf8))
        var seen = ""
        while !seen.contains("locked") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        #expect(seen.contains("locked"))
        expectError(.busy) { try storage.write { _ = try $0.put(Record(key: "k2"), in: "ks") } }
        input.fileHandleForWriting.write(Data("COMMIT;\n.quit\n".utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        try storage.write { _ = try $0.put(Record(key: "k2"), in: "ks") }
        #expect(try storage.read { try $0.lastSequence(in: "ks") } == 2)
    }

    @Test func writersAreSerializedAcrossStores() throws {
        let dir = try TempDirectory()
        let stores = try (0..<2).map { _ in try backend.open(directory: dir.path, options: StorageOptions(durable: false)) }
        defer { for store in stores { try? store.close() } }
        let threads = 4, increments = 50
        let group = DispatchGroup()
        for t in 0..<threads {
            let store = stores[t % stores.count]
            DispatchQueue.global().async(group: group) {
                for _ in 0..<increments {
                    do {
                        try store.write { writer throws in
                            let current = try writer.get("counter", in: "ks").map { Int($0.body[0]) + Int($0.body[1]) * 256 } ?? 0
                            let next = current + 1
                            try writer.put(Record(key: "counter", body: [UInt8(next & 255), UInt8(next >> 8)]), in: "ks")
                        }
                    } catch {
                        Issue.record("write failed: \(error)")
                    }
                }
            }
        }
        group.wait()
        let final = try stores[0].read { try $0.get("counter", in: "ks") }
        #expect(final.map { Int($0.body[0]) + Int($0.body[1]) * 256 } == threads * increments)
        #expect(final?.sequence == UInt64(threads * increments))
    }

    @Test func readSeesASnapshot() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.write { _ = try $0.put(Record(key: "a", body: [1]), in: "ks") }
        try storage.read { reader throws in
            #expect(try reader.get("a", in: "ks")?.body == [1])
            // A write from inside the read (another connection) commits...
            try storage.write { writer throws in
                try writer.put(Record(key: "a", body: [2]), in: "ks")
                try writer.put(Record(key: "b", body: [3]), in: "ks")
                try writer.put(Record(key: "c"), in: "new-keyspace")
            }
            // ...but this snapshot does not see it.
            #expect(try reader.get("a", in: "ks")?.body == [1])
            #expect(try reader.get("b", in: "ks") == nil)
            #expect(try reader.lastSequence(in: "ks") == 1)
            #expect(try reader.keyspaces() == ["ks"])
            #expect(try reader.count(in: "new-keyspace", includeDeleted: true) == 0)
        }
        try storage.read { reader throws in
            #expect(try reader.get("a", in: "ks")?.body == [2])
            #expect(try reader.lastSequence(in: "ks") == 3)
            #expect(try reader.keyspaces() == ["ks", "new-keyspace"])
        }
    }

    @Test func writerSeesItsOwnChanges() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.write { writer throws in
            try writer.put(Record(key: "a", body: [1]), in: "ks")
            #expect(try writer.get("a", in: "ks")?.body == [1])
            #expect(try writer.lastSequence(in: "ks") == 1)
            #expect(try writer.keyspaces() == ["ks"])
            var keys: [String] = []
            try writer.enumerate(in: "ks", since: 0) { keys.append($0.key); return true }
            #expect(keys == ["a"])
        }
    }

    @Test func throwingWriteRollsBack() throws {
        struct Boom: Error {}
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.write { _ = try $0.put(Record(key: "kept", body: [1]), in: "ks") }
        #expect(throws: Boom.self) {
            try storage.write { writer throws in
                try writer.put(Record(key: "kept", body: [9]), in: "ks")
                try writer.put(Record(key: "lost"), in: "ks")
                try writer.put(Record(key: "lost"), in: "created-then-rolled-back")
                try writer.dropKeyspace("ks")
                throw Boom()
            }
        }
        try storage.read { reader throws in
            #expect(try reader.keyspaces() == ["ks"])
            #expect(try reader.get("kept", in: "ks")?.body == [1])
            #expect(try reader.get("lost", in: "ks") == nil)
            #expect(try reader.lastSequence(in: "ks") == 1)
        }
        // The writer's caches were reset: the next write continues from the committed state.
        let sequence = try storage.write { writer throws in
            try writer.put(Record(key: "x"), in: "created-then-rolled-back")
            return try writer.put(Record(key: "next"), in: "ks")
        }
        #expect(sequence == 2)
        #expect(try storage.read { try $0.lastSequence(in: "created-then-rolled-back") } == 1)
    }

    @Test func misuseIsReportedNotDeadlocked() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        try storage.write { writer throws in
            expectError(.storage) { try storage.write { _ in } }
            expectError(.storage) { try storage.close() }
            try writer.put(Record(key: "a"), in: "ks")
        }
        // An escaped reader or writer is dead once its closure returned.
        let escapedReader = try storage.read { $0 }
        expectError(.closed) { _ = try escapedReader.get("a", in: "ks") }
        let escapedWriter = try storage.write { $0 }
        expectError(.closed) { try escapedWriter.put(Record(key: "b"), in: "ks") }
        // A read-only transaction cast to a writer cannot write.
        try storage.read { reader throws in
            let writer = try #require(reader as? any StorageWriter)
            expectError(.storage) { try writer.put(Record(key: "c"), in: "ks") }
        }
        try storage.close()
        try storage.close()  // idempotent
        expectError(.closed) { _ = try storage.read { try $0.keyspaces() } }
        expectError(.closed) { try storage.write { _ = try $0.put(Record(key: "d"), in: "ks") } }
    }

    @Test func anotherStoreSeesDropAndRecreate() throws {
        let dir = try TempDirectory()
        let first = try backend.open(directory: dir.path, options: StorageOptions())
        let second = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? first.close(); try? second.close() }
        try first.write { writer throws in
            try writer.put(Record(key: "a", body: [1]), in: "x")
            try writer.put(Record(key: "b", body: [2]), in: "y")
        }
        // The second store caches the keyspaces' tables on its connections...
        try second.read { reader throws in #expect(try reader.get("a", in: "x")?.body == [1]) }
        try second.write { _ = try $0.put(Record(key: "c"), in: "x") }
        // ...which the first store then drops and recreates under other ids.
        try first.write { writer throws in
            try writer.dropKeyspace("x")
            try writer.dropKeyspace("y")
            try writer.put(Record(key: "y-new", body: [4]), in: "y")
            try writer.put(Record(key: "x-new", body: [3]), in: "x")
        }
        try second.read { reader throws in
            #expect(try reader.get("a", in: "x") == nil)
            #expect(try reader.get("x-new", in: "x")?.body == [3])
            #expect(try reader.get("y-new", in: "y")?.body == [4])
            #expect(try reader.lastSequence(in: "x") == 1)
        }
        let sequence = try second.write { try $0.put(Record(key: "x-2"), in: "x") }
        #expect(sequence == 2)
        #expect(try backend.checkIntegrity(directory: dir.path) == [])
    }

    @Test func lastSequenceSurvivesPurgeAndReopen() throws {
        let dir = try TempDirectory()
        var storage = try backend.open(directory: dir.path, options: StorageOptions())
        try storage.write { writer throws in
            try writer.put(Record(key: "a"), in: "ks")
            try writer.put(Record(key: "b"), in: "ks")
            #expect(try writer.purge("b", in: "ks"))
            #expect(try !writer.purge("b", in: "ks"))
        }
        try storage.write { writer throws in #expect(try writer.purge("a", in: "ks")) }
        try storage.close()
        storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.read { reader throws in
            #expect(try reader.lastSequence(in: "ks") == 2)
            #expect(try reader.count(in: "ks", includeDeleted: true) == 0)
            #expect(try reader.keyspaces() == ["ks"])
        }
        #expect(try storage.write { try $0.put(Record(key: "c"), in: "ks") } == 3)
        try storage.write { try $0.dropKeyspace("ks") }
        #expect(try storage.write { try $0.put(Record(key: "c"), in: "ks") } == 1)
    }

    @Test func purgeOfNewestRecordInAnotherStoreKeepsTheCounter() throws {
        let dir = try TempDirectory()
        let first = try backend.open(directory: dir.path, options: StorageOptions())
        let second = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? first.close(); try? second.close() }
        try first.write { writer throws in
            try writer.put(Record(key: "a"), in: "ks")
            try writer.put(Record(key: "b"), in: "ks")
            _ = try writer.delete("a", in: "ks")  // a -> 3, the newest
        }
        #expect(try second.write { try $0.purge("a", in: "ks") })
        #expect(try first.read { try $0.lastSequence(in: "ks") } == 3)
        #expect(try first.write { try $0.put(Record(key: "c"), in: "ks") } == 4)
        #expect(try second.read { try $0.lastSequence(in: "ks") } == 4)
    }

    @Test func tombstones() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.write { writer throws in
            try writer.put(Record(key: "a", flags: [.hasAttachments], version: [7], body: [1, 2], extra: [8]), in: "ks")
            try writer.put(Record(key: "b"), in: "ks")
            #expect(try writer.delete("a", in: "ks") == 3)
            #expect(try writer.delete("missing", in: "ks") == nil)
            #expect(try writer.delete("a", in: "missing-keyspace") == nil)
        }
        try storage.read { reader throws in
            let tombstone = try #require(try reader.get("a", in: "ks"))
            #expect(tombstone.flags == [.hasAttachments, .deleted])
            #expect(tombstone.body.isEmpty && tombstone.version == [7] && tombstone.extra == [8])
            #expect(tombstone.sequence == 3)
            #expect(try reader.count(in: "ks", includeDeleted: true) == 2)
            #expect(try reader.count(in: "ks", includeDeleted: false) == 1)
            #expect(try reader.keyspaces() == ["ks"])
        }
    }

    // MARK: Keys and enumeration

    /// Held-back puts are written many rows per statement: a key put twice lands twice in one
    /// statement, and the later put wins; a group's empty values and keys stay empty, not NULL.
    @Test func heldBackPutsOfOneKeyInOneStatement() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        let count = 3 * SQLiteTransaction.putsPerStatement + 5
        try storage.write { w in
            for i in 0..<count { try w.putEntry(String(format: "k%03d", i), value: [1], inKeySet: "set") }
            try w.putEntry("k010", value: [2], inKeySet: "set")
            try w.putEntry("k010", value: [3], inKeySet: "set")
            try w.putEntry("", value: [], inKeySet: "set")
            try w.putEntry("k011", value: [], inKeySet: "set")
        }
        try storage.read { r in
            var entries: [String: [UInt8]] = [:]
            try r.enumerateEntries(inKeySet: "set", range: .all, descending: false) { key, value in
                entries[key] = value
                return true
            }
            #expect(entries.count == count + 1)
            #expect(entries["k010"] == [3])
            #expect(entries["k011"] == [])
            #expect(entries[""] == [])
            #expect(entries["k000"] == [1])
        }
    }

    /// The sort of held-back puts is by UTF-8 bytes, SQLite's order (not `String`'s `<`).
    @Test func heldBackPutsSortByUTF8Bytes() {
        let keys = ["b", "a\u{0}", "a", "\u{7F}", "é", "e\u{301}", "\u{FFFD}", "\u{10000}", "A", ""]
        let bytes = keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(keys.sorted { compareUTF8($0, $1) < 0 } == bytes)
        #expect(compareUTF8("é", "e\u{301}") != 0)
        #expect(compareUTF8("abc", "abc") == 0)
    }

    @Test func keysAreOrderedByUTF8Bytes() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        let keys = ["", "a", "B", "é", "e\u{301}", "z", "\u{10FFFF}", "😀", "\u{7F}", "ab", "a\u{0}b", "a\u{0}",
                    "\u{FFFF}", "日本"]
        try storage.write { writer throws in
            for key in keys.shuffled() { try writer.put(Record(key: key, body: Array(key.utf8)), in: "ks") }
        }
        let expected = keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        try storage.read { reader throws in
            var seen: [String] = []
            try reader.enumerate(in: "ks") { seen.append($0.key); #expect($0.body == Array($0.key.utf8)); return true }
            #expect(seen == expected)
            seen = []
            try reader.enumerate(in: "ks", range: .all, descending: true) { seen.append($0.key); return true }
            #expect(seen == expected.reversed())
            for key in keys { #expect(try reader.get(key, in: "ks")?.key == key) }

            let ranges: [KeyRange] = [.prefix("a"), KeyRange(from: "a", to: "z"), KeyRange(from: "a", to: "z", includesUpperBound: true),
                                      KeyRange(from: "é"), KeyRange(to: "a\u{0}"), KeyRange(to: "a\u{0}", includesUpperBound: true),
                                      KeyRange(from: "z", to: "a"), .prefix(""), .prefix("\u{10FFFF}")]
            for range in ranges {
                for descending in [false, true] {
                    var got: [String] = []
                    try reader.enumerate(in: "ks", range: range, descending: descending) { got.append($0.key); return true }
                    let want = expected.filter { range.contains($0) }
                    #expect(got == (descending ? want.reversed() : want), "range \(range) descending \(descending)")
                }
            }
            var first: [String] = []
            try reader.enumerate(in: "ks") { first.append($0.key); return first.count < 3 }
            #expect(first == Array(expected.prefix(3)))
        }
    }

    @Test func enumerateBySequence() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.write { writer throws in
            for key in ["a", "b", "c", "d"] { try writer.put(Record(key: key), in: "ks") }  // 1...4
            try writer.put(Record(key: "b"), in: "ks")   // b -> 5
            _ = try writer.delete("c", in: "ks")         // c -> 6
            _ = try writer.purge("d", in: "ks")
        }
        try storage.read { reader throws in
            var seen: [(String, UInt64)] = []
            try reader.enumerate(in: "ks", since: 0) { seen.append(($0.key, $0.sequence)); return true }
            #expect(seen.map(\.0) == ["a", "b", "c"])
            #expect(seen.map(\.1) == [1, 5, 6])
            seen = []
            try reader.enumerate(in: "ks", since: 5) { seen.append(($0.key, $0.sequence)); return true }
            #expect(seen.map(\.0) == ["c"])
            for since: UInt64 in [6, 7, UInt64(Int64.max), UInt64(Int64.max) + 1, .max] {
                try reader.enumerate(in: "ks", since: since) { _ in Issue.record("unexpected record"); return true }
            }
            try reader.enumerate(in: "missing", since: 0) { _ in Issue.record("unexpected record"); return true }
        }
    }

    @Test func reputDuringSequenceEnumerationTerminates() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try fill(storage, count: 20, size: 10)
        var visited = 0
        try storage.write { writer throws in
            try writer.enumerate(in: "docs", since: 0) { record in
                visited += 1
                try writer.put(Record(key: record.key, body: [1]), in: "docs")  // moves it to a new sequence
                return true
            }
            #expect(try writer.lastSequence(in: "docs") == 40)
        }
        #expect(visited == 20)
    }

    @Test func nestedEnumerationsAndCallbacks() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try fill(storage, count: 5, size: 4)
        try storage.write { writer throws in
            var pairs = 0
            try writer.enumerate(in: "docs") { outer in
                // Same statement shape, re-entered from the callback.
                try writer.enumerate(in: "docs") { inner throws in
                    pairs += 1
                    #expect(try writer.get(inner.key, in: "docs") != nil)
                    return true
                }
                #expect(try writer.count(in: "docs", includeDeleted: true) == 5)
                expectError(.storage) { try writer.dropKeyspace("docs") }
                expectError(.storage) { try writer.dropKeyspace("other") }
                _ = outer
                return true
            }
            #expect(pairs == 25)
            try writer.dropKeyspace("docs")  // fine once no enumeration runs
            try writer.dropKeyspace("never-existed")
        }
        #expect(try storage.read { try $0.keyspaces() } == [])
    }

    @Test func errorFromCallbackPropagatesAndStatementIsReusable() throws {
        struct Stop: Error {}
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try fill(storage, count: 5, size: 4)
        for _ in 0..<3 {
            #expect(throws: Stop.self) {
                try storage.read { reader throws in
                    try reader.enumerate(in: "docs") { _ in throw Stop() }
                }
            }
        }
        #expect(try storage.read { reader throws in
            var count = 0
            try reader.enumerate(in: "docs") { _ in count += 1; return true }
            return count
        } == 5)
    }

    @Test func largeValuesAndManyKeyspaces() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        let big = body(1, size: 3_000_000)
        try storage.write { writer throws in
            try writer.put(Record(key: String(repeating: "k", count: 10_000), body: big), in: "big")
            for i in 0..<50 { try writer.put(Record(key: "k"), in: "keyspace \(i) with 'quotes\" and ; DROP TABLE") }
        }
        try storage.read { reader throws in
            #expect(try reader.get(String(repeating: "k", count: 10_000), in: "big")?.body == big)
            #expect(try reader.keyspaces().count == 51)
            #expect(try reader.lastSequence(in: "keyspace 7 with 'quotes\" and ; DROP TABLE") == 1)
        }
    }

    @Test func moreKeyspacesThanTheTableCacheHolds() throws {
        let dir = try TempDirectory()
        var storage = try backend.open(directory: dir.path, options: StorageOptions())
        let names = (0..<(3 * SQLiteTransaction.maxCachedTables)).map { "ks-\($0)" }
        try storage.write { writer throws in
            for name in names {
                try writer.put(Record(key: "a"), in: name)
                try writer.put(Record(key: "b"), in: name)
                #expect(try writer.purge("b", in: name))  // the counter (2) must be written at commit
            }
            for name in names { try writer.put(Record(key: "c", body: Array(name.utf8)), in: name) }  // -> 3
            for name in names { #expect(try writer.purge("c", in: name)) }
        }
        try storage.close()
        storage = try backend.open(directory: dir.path, options: StorageOptions())
        defer { try? storage.close() }
        try storage.read { reader throws in
            #expect(try reader.keyspaces().count == names.count)
            for name in names {
                #expect(try reader.lastSequence(in: name) == 3)
                #expect(try reader.get("a", in: name)?.sequence == 1)
            }
        }
        try storage.write { writer throws in
            for name in names.reversed() { #expect(try writer.put(Record(key: "d"), in: name) == 4) }
        }
        #expect(try backend.checkIntegrity(directory: dir.path) == [])
    }

    @Test func concurrentReadersAndWriter() throws {
        let dir = try TempDirectory()
        let storage = try backend.open(directory: dir.path, options: StorageOptions(durable: false))
        defer { try? storage.close() }
        /// One round: every record gets the body `[round]`.
        @Sendable func write(round: UInt8) throws {
            try storage.write { writer throws in
                for i in 0..<100 { try writer.put(Record(key: String(format: "doc-%06d", i), body: [round]), in: "docs") }
            }
        }
        try write(round: .max)  // a reader may see this round before the writer's first
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            for round in 0..<20 {
                do {
                    try write(round: UInt8(round))
                } catch { Issue.record("write failed: \(error)") }
            }
        }
        for _ in 0..<6 {
            DispatchQueue.global().async(group: group) {
                for _ in 0..<30 {
                    do {
                        try storage.read { reader throws in
                            // Every snapshot holds exactly one round: all bodies equal.
                            var bodies = Set<[UInt8]>()
                            try reader.enumerate(in: "docs") { bodies.insert($0.body); return true }
                            #expect(bodies.count == 1)
                            #expect(try reader.count(in: "docs", includeDeleted: true) == 100)
                        }
                    } catch { Issue.record("read failed: \(error)") }
                }
            }
        }
        group.wait()
        #expect(try storage.read { try $0.lastSequence(in: "docs") } == 2_100)
    }

    // MARK: README

    /// The example of Packages/SQLite/README.md, kept compiling and correct here.
    @Test func readmeExample() throws {
        var lines: [String] = []
        func print(_ items: Any...) { lines.append(items.map { "\($0)" }.joined(separator: " ")) }
        // --- README example ---
        let backend = SQLiteStorageBackend()
        let directory = NSTemporaryDirectory() + "peersync-sqlite-readme"
        let store = try backend.open(directory: directory, options: StorageOptions(durable: true, busyTimeout: .seconds(5)))

        try store.write { w in
            try w.put(Record(key: "doc1", version: Array("1-a".utf8), body: Array(#"{"title":"milk"}"#.utf8)), in: "tasks")
            try w.put(Record(key: "doc2", version: Array("1-b".utf8), body: Array(#"{"title":"eggs"}"#.utf8)), in: "tasks")
            try w.delete("doc1", in: "tasks")                     // a tombstone at sequence 3
        }
        try store.read { r in
            try r.enumerate(in: "tasks", since: 0) { record in    // the changes feed
                print(record.sequence, record.key, "deleted=\(record.flags.contains(.deleted))")
                return true
            }
        }
        try store.close()
        print("problems:", try backend.checkIntegrity(directory: directory))
        try FileManager.default.removeItem(atPath: directory)
        // --- end ---
        #expect(lines == ["2 doc2 deleted=false", "3 doc1 deleted=true", "problems: []"])
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    // MARK: Raw baseline

    @Test func rawBaselineDoesTheWork() throws {
        let dir = try TempDirectory()
        let raw = try SQLiteRawBaseline(path: dir.file("raw.sqlite3"), durable: false)
        try raw.insert(count: 500) { i in (String(format: "key-%05d", i), body(i, size: 100)) }
        #expect(try raw.pointReads(["key-00000", "key-00499", "key-00250", "missing"]) == 3)
        let (records, bytes) = try raw.scan()
        #expect(records == 500)
        #expect(bytes == 500 * 100)
        try raw.close()
        expectError(.closed) { _ = try raw.scan() }
    }
}

