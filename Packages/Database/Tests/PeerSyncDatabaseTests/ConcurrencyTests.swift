import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

/// One writer, concurrent readers: what may run while a read or a write transaction is open.
/// Reads are held open inside the storage by ``GatedBackend`` and writes inside `inBatch`, so
/// nothing here depends on timing: every wait is a deadlock guard.
@Suite struct ConcurrencyTests {
    @Test(arguments: Backend.available)
    func aReadHeldOpenBlocksNeitherOtherReadsNorWrites(_ backend: Backend) async throws {
        try await withGatedDatabase(backend) { db, gates in
            let c = try db.defaultCollection()
            var held = MutableDocument(id: "held", data: ["v": 1])
            try await c.save(document: &held)
            var other = MutableDocument(id: "other", data: ["v": 1])
            try await c.save(document: &other)

            let (heldRead, gate) = await startHeldRead(of: "held", in: c, gates: gates)
            defer { gate.open() }
            #expect(gate.isReached)

            // While that read transaction is open: another read, a write, a read of the write.
            #expect(try await c.document(id: "other")?.int(forKey: "v") == 1)
            held.setInt(2, forKey: "v")
            try await c.save(document: &held)
            #expect(try await c.document(id: "held")?.int(forKey: "v") == 2)

            gate.open()
            // The held read answers from the snapshot it started with.
            #expect(try await heldRead.value?.int(forKey: "v") == 1)
        }
    }

    @Test(arguments: Backend.available)
    func readsRunInParallel(_ backend: Backend) async throws {
        try await withGatedDatabase(backend, maximumReaderCount: 3) { db, gates in
            let c = try db.defaultCollection()
            let ids = ["r0", "r1", "r2"]
            try await db.inBatch { txn in
                for id in ids {
                    var doc = MutableDocument(id: id, data: ["id": .string(id)])
                    try txn.save(document: &doc, in: c)
                }
            }
            let held = ids.map { gates.arm($0) }
            defer { held.forEach { $0.open() } }
            let reads = ids.map { id in Task { try await c.document(id: id)?.string(forKey: "id") } }
            // All three are inside the storage at once: three read transactions in parallel.
            for gate in held { #expect(await gate.waitUntilReached()) }
            held.forEach { $0.open() }
            for (id, read) in zip(ids, reads) { #expect(try await read.value == id) }
        }
    }

    @Test(arguments: Backend.available)
    func readsBeyondTheReaderCountWaitTheirTurn(_ backend: Backend) async throws {
        try await withGatedDatabase(backend, maximumReaderCount: 1) { db, gates in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "first", data: ["n": 1])
            try await c.save(document: &doc)
            let (first, gate) = await startHeldRead(of: "first", in: c, gates: gates)
            defer { gate.open() }
            #expect(gate.isReached)
            let queued = (0..<5).map { _ in Task { try await c.count } }
            // A write is not a read: it does not wait for the one reader thread.
            var second = MutableDocument(id: "second", data: ["n": 2])
            try await c.save(document: &second)
            gate.open()
            #expect(try await first.value?.int(forKey: "n") == 1)
            for read in queued { #expect(try await read.value == 2) }
        }
    }

    @Test(arguments: Backend.available)
    func aWriteInProgressDoesNotBlockReads(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "d", data: ["v": 1])
            try await c.save(document: &doc)

            let inside = Gate()
            let batch = Task {
                try await db.inBatch { txn in
                    var edit = try txn.document(id: "d", in: c)!.toMutable()
                    edit.setInt(2, forKey: "v")
                    try txn.save(document: &edit, in: c)
                    var added = MutableDocument(id: "added", data: [:])
                    try txn.save(document: &added, in: c)
                    inside.stopHere()  // the write transaction stays open until the test opens it
                }
            }
            defer { inside.open() }
            #expect(await inside.waitUntilReached())
            // Reads go on, and see the committed state only.
            #expect(try await c.document(id: "d")?.int(forKey: "v") == 1)
            #expect(try await c.document(id: "added") == nil)
            #expect(try await c.count == 1)
            #expect(try await c.changes(since: 0).map(\.docID) == ["d"])
            inside.open()
            try await batch.value
            #expect(try await c.document(id: "d")?.int(forKey: "v") == 2)
            #expect(try await c.count == 2)
        }
    }

    @Test(arguments: Backend.available)
    func aReadIssuedAfterAWriteReturnedSeesIt(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            // Readers busy all along, so the reads below run beside other read transactions.
            let stop = LockedValue(false)
            let background = (0..<3).map { _ in
                Task {
                    while !stop.withLock({ $0 }) { _ = try await c.documentIDs() }
                }
            }
            var doc = MutableDocument(id: "counter", data: [:])
            for i in 1...50 {
                doc.setInt(i, forKey: "n")
                try await c.save(document: &doc)
                #expect(try await c.document(id: "counter")?.int(forKey: "n") == i)
                #expect(try await c.lastSequence == UInt64(i))
                // The same from another task that learns of the write only when it returned.
                let seen = try await Task.detached { try await c.document(id: "counter")?.int(forKey: "n") }.value
                #expect(seen == i)
            }
            let batchResult = try await db.inBatch { txn in
                var added = MutableDocument(id: "batch", data: ["b": true])
                try txn.save(document: &added, in: c)
                return added.revisionID
            }
            #expect(try await c.document(id: "batch")?.revisionID == batchResult)
            stop.withLock { $0 = true }
            for task in background { try await task.value }
        }
    }

    @Test(arguments: Backend.available)
    func closeWaitsForReadsInFlight(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let gated = GatedBackend(inner: backend.make())
        var config = makeConfig(backend, dir)
        config.backend = gated
        let db = try await Database(name: "test", config: config)
        let c = try db.defaultCollection()
        var doc = MutableDocument(id: "held", data: ["v": 1])
        try await c.save(document: &doc)

        let (heldRead, gate) = await startHeldRead(of: "held", in: c, gates: gated.gates)
        defer { gate.open() }
        #expect(gate.isReached)

        let closeReturned = LockedValue(false)
        let closing = Task {
            try await db.close()
            closeReturned.withLock { $0 = true }
        }
        // Once the database refuses new work, close() is waiting for the held read.
        var refused = false
        for _ in 0..<15_000 where !refused {
            do { _ = try await c.documentIDs() } catch let error as PeerSyncError where error.code == .closed { refused = true }
            if !refused { try await Task.sleep(for: .milliseconds(2)) }
        }
        #expect(refused)
        #expect(!db.isOpen)
        #expect(!closeReturned.withLock { $0 }, "close() returned while a read was still running")

        gate.open()
        // The read in flight completes normally, then close() returns.
        #expect(try await heldRead.value?.int(forKey: "v") == 1)
        try await closing.value
        #expect(closeReturned.withLock { $0 })
        await expectError(.closed) { try await c.document(id: "held") }
        await expectError(.closed) { try await db.inReadBatch { try $0.document(id: "held", in: c) } }
        await expectError(.closed) { try await c.save(document: &doc) }
        try await db.close()  // idempotent
    }
}
