import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Indexing) @testable import PeerSyncDatabase

/// `Database.inShortReadBatch`: a short read runs on the caller's thread when the storage can
/// begin it without waiting (`Storage.readWithoutWaiting`), else it hops to a reader thread as
/// `inReadBatch` does. Either way: one snapshot with every write that returned, none in
/// progress. ``GatedBackend`` counts where the reads ran; every wait is a deadlock guard.
@Suite struct InlineReadTests {
    /// Polls `condition` (a deadlock guard of 60 s, not a measurement); returns whether it held.
    private func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while !condition() {
            if ContinuousClock.now > deadline { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }

    @Test(arguments: Backend.available)
    func shortReadsRunOnTheCallersThreadAndSeeEveryWriteThatReturnedAndNoneInProgress(_ backend: Backend) async throws {
        try await withGatedDatabase(backend) { db, _, inline in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "d", data: ["v": 1])
            try await c.save(document: &doc)
            // A read on a reader thread first: SQLite opens reader connections there, never inline.
            _ = try await c.document(id: "d")

            #expect(try await db.inShortReadBatch { try $0.document(id: "d", in: c)?.int(forKey: "v") } == 1)
            #expect(inline.ran == 1)

            // A write transaction in progress (held inside `inBatch` on the writer queue).
            let inside = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let write = Task {
                try await db.inBatch { txn in
                    var changed = MutableDocument(id: "d", data: ["v": 2])
                    try txn.save(document: &changed, in: c)
                    var added = MutableDocument(id: "e", data: ["v": 3])
                    try txn.save(document: &added, in: c)
                    inside.signal()
                    _ = release.wait(timeout: .now() + 120)
                }
            }
            defer { release.signal() }
            #expect(await eventually { inside.wait(timeout: .now()) == .success })
            let during = try await db.inShortReadBatch { txn in
                (try txn.document(id: "d", in: c)?.int(forKey: "v"), try txn.document(id: "e", in: c) == nil)
            }
            #expect(during.0 == 1, "a short read saw a write in progress")
            #expect(during.1, "a short read saw a write in progress")
            #expect(inline.ran == 2, "the short read waited for the writer or hopped")
            release.signal()
            try await write.value

            // The write returned: the next short read sees all of it.
            let after = try await db.inShortReadBatch { txn in
                (try txn.document(id: "d", in: c)?.int(forKey: "v"), try txn.document(id: "e", in: c)?.int(forKey: "v"))
            }
            #expect(after.0 == 2 && after.1 == 3)
            #expect(inline.ran == 3)
            #expect(inline.declined == 0)
        }
    }

    @Test(arguments: Backend.available)
    func aShortReadHopsToAReaderThreadWhenTheStorageDeclines(_ backend: Backend) async throws {
        try await withGatedDatabase(backend) { db, gates, inline in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "d", data: ["v": 1])
            try await c.save(document: &doc)
            inline.declineAll = true
            // The read is held at a gate: it runs on a reader thread (had it run inline, this
            // task would be stuck in it and never reach `waitUntilReached`).
            let gate = gates.arm("d")
            defer { gate.open() }
            let read = Task { try await db.inShortReadBatch { try $0.document(id: "d", in: c)?.int(forKey: "v") } }
            #expect(await gate.waitUntilReached())
            gate.open()
            #expect(try await read.value == 1)
            #expect(inline.ran == 0)
            #expect(inline.declined == 1)
            // Errors come back from either path unchanged.
            await #expect(throws: PeerSyncError.self) {
                try await db.inShortReadBatch { txn in try txn.document(id: "", in: c) }
            }
            inline.declineAll = false
            await #expect(throws: PeerSyncError.self) {
                try await db.inShortReadBatch { txn in try txn.document(id: "", in: c) }
            }
        }
    }

    /// SQLite runs an inline read only on an idle reader connection: with every one taken by
    /// reads held open, the short read declines and hops — to a free lane, which opens a
    /// connection of its own — while those reads are still held. How many connections are idle
    /// depends on the reads before (SQLite keeps up to four, and a background read of the
    /// database may hold one for a moment), so reads are held one more at a time until a short
    /// read declines; every short read returns the right document either way.
    @Test(arguments: Backend.available.filter { $0 == .sqlite })
    func aShortReadHopsWhenEveryReaderConnectionIsTaken(_ backend: Backend) async throws {
        try await withGatedDatabase(backend, maximumReaderCount: 12) { db, gates, inline in
            let c = try db.defaultCollection()
            let held = (0..<10).map { "h\($0)" }
            try await db.inBatch { txn in
                for id in held + ["d"] {
                    var doc = MutableDocument(id: id, data: ["id": .string(id)])
                    try txn.save(document: &doc, in: c)
                }
            }
            var gateList: [Gate] = []
            var reads: [Task<String?, any Error>] = []
            defer { gateList.forEach { $0.open() } }
            for id in held where inline.declined == 0 {
                let (read, gate) = await startHeldRead(of: id, in: c, gates: gates)
                gateList.append(gate)
                reads.append(Task { try await read.value?.string(forKey: "id") })
                #expect(gate.isReached)
                #expect(try await db.inShortReadBatch { try $0.document(id: "d", in: c)?.string(forKey: "id") } == "d")
            }
            #expect(inline.declined == 1, "a short read ran inline with \(gateList.count) reader connections taken")

            gateList.forEach { $0.open() }
            for (id, read) in zip(held, reads) { #expect(try await read.value == id) }
            // Connections are idle again: the next short read runs inline.
            let ranBefore = inline.ran
            #expect(try await db.inShortReadBatch { try $0.document(id: "d", in: c)?.string(forKey: "id") } == "d")
            #expect(inline.ran == ranBefore + 1)
        }
    }

    /// After an inline read the task yields when no such yield happened on its thread for
    /// `InlineReadYield.interval` (not after every read: each yield hands the task to another
    /// thread of the pool). Synchronous, so every call runs on the test's one thread.
    @Test func anInlineReadYieldsAtMostOncePerIntervalOnAThread() {
        let interval = InlineReadYield.interval
        let start: UInt64 = 1 << 62   // later than any stamp a real read left (146 years of uptime)
        #expect(InlineReadYield.isDue(at: start))                       // none yet from here on
        #expect(!InlineReadYield.isDue(at: start))                      // just yielded
        #expect(!InlineReadYield.isDue(at: start + interval - 1))
        #expect(InlineReadYield.isDue(at: start + interval))            // an interval later
        #expect(!InlineReadYield.isDue(at: start + interval + 1))
        // Another thread keeps its own stamp: it yields at once. (`async`, not `sync`, which
        // may run the block on this very thread.)
        let otherRan = LockedValue<Bool?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue(label: "peersync.test.inline-yield").async {
            otherRan.withLock { $0 = InlineReadYield.isDue(at: start + interval + 2) }
            done.signal()
        }
        done.wait()
        #expect(otherRan.withLock { $0 } == true)
        #expect(!InlineReadYield.isDue(at: start + interval + 3))
    }

    @Test func aShortReadOfAClosedDatabaseThrowsClosed() async throws {
        try await withGatedDatabase(.memory) { db, _, inline in
            try await db.close()
            await #expect {
                try await db.inShortReadBatch { _ in 1 }
            } throws: { ($0 as? PeerSyncError)?.code == .closed }
            #expect(inline.ran == 0)
        }
    }
}
