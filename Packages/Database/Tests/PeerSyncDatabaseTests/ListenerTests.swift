import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncDatabase

@Suite struct ListenerTests {
    @Test(arguments: Backend.available)
    func collectionListenerSeesSavesDeletesAndPurges(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let other = try await db.createCollection(name: "other")
            let seen = Collected<CollectionChange>()
            let token = c.addChangeListener { seen.append($0) }

            var a = MutableDocument(id: "a", data: [:])
            try await c.save(document: &a)
            var elsewhere = MutableDocument(id: "elsewhere", data: [:])
            try await other.save(document: &elsewhere)
            #expect(await seen.wait { $0.count >= 1 })
            #expect(seen.all.first?.documentIDs == ["a"])
            #expect(seen.all.first?.collection == c)

            try await c.delete(document: a)
            #expect(await seen.wait { $0.count >= 2 })
            var b = MutableDocument(id: "b", data: [:])
            try await c.save(document: &b)
            try await c.purge(id: "b")
            #expect(await seen.wait { $0.flatMap(\.documentIDs) == ["a", "a", "b", "b"] }, "\(seen.all.map(\.documentIDs))")
            #expect(!seen.all.flatMap(\.documentIDs).contains("elsewhere"))

            token.remove()
            token.remove()  // idempotent
            let countAfterRemove = seen.all.count
            var c2 = MutableDocument(id: "c", data: [:])
            try await c.save(document: &c2)
            try await Task.sleep(for: .milliseconds(100))
            #expect(seen.all.count == countAfterRemove, "a removed listener gets nothing")
        }
    }

    @Test func listenerRunsOnTheGivenQueue() async throws {
        try await withDatabase(.memory) { db, _ in
            let c = try db.defaultCollection()
            let queue = DispatchQueue(label: "test.listener")
            let key = DispatchSpecificKey<Int>()
            queue.setSpecific(key: key, value: 42)
            let onQueue = Collected<Bool>()
            let token = c.addChangeListener(queue: queue) { _ in onQueue.append(DispatchQueue.getSpecific(key: key) == 42) }
            defer { token.remove() }
            var doc = MutableDocument(id: "q", data: [:])
            try await c.save(document: &doc)
            #expect(await onQueue.wait { !$0.isEmpty })
            #expect(onQueue.all == [true])
        }
    }

    @Test(arguments: Backend.available)
    func changeStreamDeliversAndEndsOnClose(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let db = try await Database(name: "s", config: makeConfig(backend, dir))
        let c = try db.defaultCollection()
        let stream = c.changes
        let consumer = Task { () -> [String] in
            var ids: [String] = []
            for await change in stream { ids += change.documentIDs }
            return ids
        }
        // The stream registers its listener synchronously; saves after this point are seen.
        for i in 0..<5 {
            var doc = MutableDocument(id: "s\(i)", data: [:])
            try await c.save(document: &doc)
        }
        try await db.inBatch { txn in
            for i in 5..<8 {
                var doc = MutableDocument(id: "s\(i)", data: [:])
                try txn.save(document: &doc, in: c)
            }
        }
        try await Task.sleep(for: .milliseconds(50))
        try await db.close()
        let ids = await consumer.value
        #expect(ids == (0..<8).map { "s\($0)" })
    }

    @Test func streamConsumerCancellationRemovesTheListener() async throws {
        try await withDatabase(.memory) { db, _ in
            let c = try db.defaultCollection()
            let stream = c.changeStream()
            #expect(db.notifier.listenerCount == 1)
            let consumer = Task {
                for await _ in stream {}
            }
            consumer.cancel()
            await consumer.value
            let removed = Collected<Int>()
            #expect(await removed.wait { _ in db.notifier.listenerCount == 0 })
        }
    }

    @Test(arguments: Backend.available)
    func documentListenersOnlySeeTheirDocument(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let seen = Collected<String>()
            let token = c.addDocumentChangeListener(id: "watched") { seen.append($0.documentID) }
            defer { token.remove() }
            let stream = c.documentChangeStream(id: "watched")
            let streamed = Task { () -> Int in
                var n = 0
                for await change in stream {
                    #expect(change.documentID == "watched")
                    n += 1
                    if n == 2 { break }
                }
                return n
            }
            var other = MutableDocument(id: "other", data: [:])
            try await c.save(document: &other)
            var watched = MutableDocument(id: "watched", data: ["v": 1])
            try await c.save(document: &watched)
            watched.setInt(2, forKey: "v")
            try await c.save(document: &watched)
            #expect(await seen.wait { $0.count >= 2 })
            #expect(seen.all == ["watched", "watched"])
            #expect(await streamed.value == 2)
        }
    }

    @Test(arguments: Backend.available)
    func anotherDatabaseInstanceSeesTheChanges(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let first = try await Database(name: "shared", config: makeConfig(backend, dir))
        let second = try await Database(name: "shared", config: makeConfig(backend, dir))
        let seen = Collected<String>()
        let token = try second.defaultCollection().addChangeListener { change in
            for id in change.documentIDs { seen.append(id) }
        }
        let c = try first.defaultCollection()
        // Let the listener's registration take effect before writing.
        _ = try await second.defaultCollection().lastSequence
        for i in 0..<20 {
            var doc = MutableDocument(id: "x\(i)", data: ["i": .int(Int64(i))])
            try await c.save(document: &doc)
        }
        #expect(await seen.wait { Set($0).count >= 20 })
        #expect(Set(seen.all) == Set((0..<20).map { "x\($0)" }))
        try await c.purge(id: "x0")
        #expect(await seen.wait { $0.filter { $0 == "x0" }.count >= 2 }, "the purge is noticed too")
        #expect(try await second.defaultCollection().count == 19)
        token.remove()
        try await first.close()
        try await second.close()
    }
}

@Suite struct ListenerLifecycleTests {
    /// A listener added while a write is committing gets that write, even when the caller's
    /// own read (right after adding it) came before the commit: the race that once left a
    /// continuous pull without a document written over REST while its changes feed started.
    @Test(arguments: Backend.available)
    func listenerAddedWhileAWriteCommitsGetsThatWrite(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let engine = c.engine
            let insideWrite = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            // A save that stops inside its write transaction (on the writer queue, not a
            // cooperative thread) until the test lets it commit.
            let write = Task {
                try await db.write { writer in
                    insideWrite.signal()
                    _ = release.wait(timeout: .now() + 120)
                    var doc = MutableDocument(id: "racing", data: ["n": 1])
                    return try engine.save(&doc, concurrencyControl: .lastWriteWins, deleting: false, writer)
                }
            }
            let deadline = ContinuousClock.now + .seconds(60)
            while insideWrite.wait(timeout: .now()) == .timedOut, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(2))
            }
            let seen = Collected<CollectionChange>()
            let token = c.addChangeListener { seen.append($0) }
            #expect(try await c.document(id: "racing") == nil, "the caller's read comes before the commit")
            release.signal()
            #expect(try await write.value)
            #expect(await seen.wait { $0.flatMap(\.documentIDs).contains("racing") }, "\(seen.all.map(\.documentIDs))")
            token.remove()
        }
    }

    /// Polls cost nothing while nobody listens: a database with no listener does not read its
    /// storage on each timer tick (each open database ticks every 50 ms by default; a mesh of
    /// 64 peers or a test process with hundreds of databases spent most of its time there).
    /// Its first listener takes the collection's mark once; removing the last one drops it.
    @Test func pollsReadNothingWithoutListeners() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let backend = CountingBackend()
        let db = try await Database(name: "idle", config: DatabaseConfiguration(
            directory: dir.path, backend: backend, durable: false, changePollInterval: .milliseconds(5)))
        let c = try db.defaultCollection()
        try await c.save(document: MutableDocument(id: "a", data: ["n": 1]))
        let before = backend.reads, start = ContinuousClock.now
        // ~100 ticks (5 ms each); only the expiry bookkeeping reads, a few times a second at most.
        try await Task.sleep(for: .milliseconds(500))
        let reads = backend.reads - before, elapsed = ContinuousClock.now - start
        let seconds = Int(elapsed.components.seconds) + 1
        #expect(reads <= 3 * (seconds + 1), "\(reads) reads in \(elapsed) of idle ticks every 5 ms")
        let seen = Collected<CollectionChange>()
        let token = c.addChangeListener { seen.append($0) }
        #expect(db.notifier.watchedCollectionCount == 1)
        try await c.save(document: MutableDocument(id: "b", data: ["n": 2]))
        #expect(await seen.wait { $0.flatMap(\.documentIDs) == ["b"] }, "\(seen.all.map(\.documentIDs))")
        token.remove()
        #expect(db.notifier.watchedCollectionCount == 0)
        try await db.close()
    }

    @Test func streamsOnAClosedDatabaseEndAtOnce() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let db = try await Database(name: "closed", config: makeConfig(.memory, dir))
        let c = try db.defaultCollection()
        try await db.close()
        var count = 0
        for await _ in c.changeStream() { count += 1 }
        for await _ in c.documentChangeStream(id: "x") { count += 1 }
        #expect(count == 0)
        #expect(db.notifier.listenerCount == 0)
    }

    @Test func deletingAMemoryDatabaseForgetsItsData() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let db = try await Database(name: "m", config: makeConfig(.memory, dir))
        var doc = MutableDocument(id: "a", data: [:])
        try await db.defaultCollection().save(document: &doc)
        try await db.delete()
        let reopened = try await Database(name: "m", config: makeConfig(.memory, dir))
        // `Collection` here is PeerSyncDatabase's, not the standard library protocol.
        let collection: Collection = try reopened.defaultCollection()
        #expect(try await collection.count == 0)
        try await reopened.delete()
    }
}
