import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncStorage
import Synchronization
import Testing
@testable import PeerSyncQuery

/// What a live query reported: each result as the list of its rows' first column (strings),
/// or "error: …".
final class Reports: Sendable {
    let items = Mutex<[[String]]>([])

    func record(_ change: QueryChange) {
        let item: [String]
        if let results = change.results {
            item = results.map { $0.value(at: 0).map { $0.stringValue ?? $0.canonicalString } ?? "MISSING" }
        } else {
            item = ["error: \(change.error.map { String(describing: $0) } ?? "none")"]
        }
        items.withLock { $0.append(item) }
    }

    var all: [[String]] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
    var last: [String]? { items.withLock { $0.last } }

    /// Waits until a report equals `expected`.
    func waitFor(_ expected: [String]) async throws -> Bool {
        try await eventually { self.all.contains(expected) }
    }
}

/// Opens the collection `tasks` with t1 (open, 2026-01-03), t2 (done), t3 (open, 2026-01-02).
private func tasks(_ db: Database) async throws -> Collection {
    let c = try await db.createCollection(name: "tasks")
    try await put(c, "t1", ["title": "Buy milk", "done": false, "date": "2026-01-03"])
    try await put(c, "t2", ["title": "Call Ann", "done": true, "date": "2026-01-01"])
    try await put(c, "t3", ["title": "Write report", "done": false, "date": "2026-01-02"])
    return c
}

private func put(_ c: Collection, _ id: String, _ body: [String: JSONValue]) async throws {
    _ = try await c.save(document: MutableDocument(id: id, data: body))
}

/// Open tasks by date: `SELECT meta().id FROM tasks WHERE done = false ORDER BY date`.
private func openTasks(_ c: Collection) -> Query {
    QueryBuilder.select(SelectResult.expression(Meta.id))
        .from(DataSource.collection(c))
        .where(Expression.property("done").equalTo(.boolean(false)))
        .orderBy(Ordering.property("date"))
}

@Suite struct LiveQueryTests {
    @Test(arguments: Backend.available)
    func firstReportIsTheCurrentResultThenLocalSavesReRunIt(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = openTasks(c)
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["t3", "t1"]))
            #expect(reports.all.first == ["t3", "t1"])
            try await put(c, "t4", ["title": "New", "done": false, "date": "2026-01-01"])
            #expect(try await reports.waitFor(["t4", "t3", "t1"]))
            try await put(c, "t3", ["title": "Write report", "done": true, "date": "2026-01-02"])
            #expect(try await reports.waitFor(["t4", "t1"]))
            _ = try await c.delete(document: try #require(try await c.document(id: "t1")))
            #expect(try await reports.waitFor(["t4"]))
            #expect(reports.all == [["t3", "t1"], ["t4", "t3", "t1"], ["t4", "t1"], ["t4"]])
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func nothingIsReportedForAnUnchangedResultOrAnotherCollection(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let other = try await db.createCollection(name: "other")
            let query = openTasks(c)
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["t3", "t1"]))
            // A commit to another collection, and one that leaves the result as it is (t2 stays
            // done; t1's title is not selected).
            try await put(other, "x", ["done": false, "date": "2020"])
            try await put(c, "t2", ["title": "Call Bo", "done": true, "date": "2026-01-01"])
            try await put(c, "t1", ["title": "Buy oat milk", "done": false, "date": "2026-01-03"])
            // Then one that changes it: reports come in order, so one for the commits before
            // would be here before this one.
            try await put(c, "t2", ["title": "Call Bo", "done": false, "date": "2026-01-04"])
            #expect(try await reports.waitFor(["t3", "t1", "t2"]))
            #expect(reports.all == [["t3", "t1"], ["t3", "t1", "t2"]])
            // Only the query's collection is watched.
            #expect(try await query.resolveCollections().map(\.fullName) == ["_default.tasks"])
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func aCommitOfAnotherDatabaseHandleReRunsIt(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = openTasks(c)
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["t3", "t1"]))
            // A second `Database` on the same folder: its commits are noticed by polling, as
            // another process's are.
            let second = try await Database(name: db.name, config: DatabaseConfiguration(
                directory: db.config.directory, backend: backend.make(), durable: false))
            let c2 = try #require(try await second.collection(name: "tasks"))
            try await put(c2, "t0", ["title": "Other process", "done": false, "date": "2025-12-31"])
            #expect(try await reports.waitFor(["t0", "t3", "t1"]))
            try await second.close()
            token.remove()
        }
    }

    @Test func aReplicatedRevisionReRunsIt() async throws {
        try await withPeers(2) { peers in
            let (writer, reader) = (peers[0], peers[1])
            try reader.listen()
            let query = try reader.db.createQuery("SELECT meta().id FROM _ WHERE done = false ORDER BY meta().id")
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor([]))
            try await put(writer.defaultCollection, "a", ["done": false])
            try await put(writer.defaultCollection, "b", ["done": true])
            let status = try await replicate(writer, to: reader, type: .push)
            #expect(status.error == nil)
            #expect(try await reports.waitFor(["a"]))
            #expect(reports.all == [[], ["a"]])
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func commitsDuringAWaitCostOneRun(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = openTasks(c)
            // The re-run after the first change waits on a gate the test opens after 20 more
            // commits: all 21 are read by that one run.
            let gate = Gate()
            let waiting = Mutex(0)
            query.live.beforeRerun.withLock {
                $0 = { waiting.withLock { $0 += 1 }; await gate.wait() }
            }
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["t3", "t1"]))
            for i in 0...20 {
                try await put(c, "n\(String(format: "%02d", i))", ["done": false, "date": "2027-01-01"])
                if i == 0 { #expect(try await eventually { waiting.withLock { $0 } == 1 }) }
            }
            gate.open()
            let expected = ["t3", "t1"] + (0...20).map { "n\(String(format: "%02d", $0))" }
            #expect(try await reports.waitFor(expected))
            #expect(reports.all == [["t3", "t1"], expected])
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func aBurstOfSavesIsCoalescedAndTheLastReportIsRight(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = try db.createQuery("SELECT COUNT(*) FROM tasks WHERE done = false")
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["2"]))
            for i in 0..<100 {
                try await put(c, "n\(i)", ["done": false])
            }
            #expect(try await reports.waitFor(["102"]))
            // Every count reported grows (no stale result after a newer one), and at most one
            // report per save.
            let counts = reports.all.map { Int($0[0])! }
            #expect(counts == counts.sorted() && Set(counts).count == counts.count)
            #expect(reports.count <= 101)
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func removingTheTokenStopsTheReports(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = openTasks(c)
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            let witness = Reports()
            let witnessToken = query.addChangeListener { witness.record($0) }
            #expect(try await reports.waitFor(["t3", "t1"]))
            #expect(query.live.count == 2)
            query.removeChangeListener(withToken: token)
            token.remove()  // idempotent
            #expect(query.live.count == 1)
            try await put(c, "t4", ["done": false, "date": "2026-01-09"])
            // The listener still registered sees the change; the removed one never does.
            #expect(try await witness.waitFor(["t3", "t1", "t4"]))
            #expect(reports.all == [["t3", "t1"]])
            witnessToken.remove()
            #expect(query.live.count == 0)
        }
    }

    @Test(arguments: Backend.available)
    func changingParametersReRunsIt(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await tasks(db)
            let query = try db.createQuery("SELECT meta().id FROM tasks WHERE done = $done ORDER BY meta().id")
            let p = Parameters()
            p.setBoolean(false, forName: "done")
            query.parameters = p
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await reports.waitFor(["t1", "t3"]))
            p.setBoolean(true, forName: "done")  // a copy was taken: nothing changes …
            query.parameters = p                 // … until they are set again
            #expect(try await reports.waitFor(["t2"]))
            #expect(reports.all == [["t1", "t3"], ["t2"]])
            token.remove()
        }
    }

    @Test(arguments: Backend.available)
    func theStreamReportsAndEndsWhenItsTaskIsCancelled(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await tasks(db)
            let query = openTasks(c)
            let reports = Reports()
            let consumer = Task {
                for await change in query.changes() { reports.record(change) }
            }
            #expect(try await reports.waitFor(["t3", "t1"]))
            try await put(c, "t4", ["done": false, "date": "2026-01-09"])
            #expect(try await reports.waitFor(["t3", "t1", "t4"]))
            consumer.cancel()
            await consumer.value  // the loop ended
            #expect(try await eventually { query.live.count == 0 })
        }
    }

    @Test(arguments: Backend.available)
    func theStreamEndsWhenTheDatabaseCloses(_ backend: Backend) async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-livetest-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        defer {
            try? FileManager.default.removeItem(atPath: path)
            MemoryStorageBackend().removeStore(in: path)
        }
        let db = try await Database(name: "live", config: DatabaseConfiguration(directory: path, backend: backend.make(), durable: false))
        let c = try await tasks(db)
        let query = openTasks(c)
        let reports = Reports()
        let consumer = Task {
            for await change in query.changes() { reports.record(change) }
        }
        #expect(try await reports.waitFor(["t3", "t1"]))
        try await db.close()
        await consumer.value
        #expect(try await eventually { query.live.count == 0 })
        #expect(reports.all == [["t3", "t1"]])
    }

    @Test(arguments: Backend.available)
    func anErrorIsReported(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let query = try db.createQuery("SELECT meta().id FROM nowhere")
            let reports = Reports()
            let token = query.addChangeListener { reports.record($0) }
            #expect(try await eventually { reports.last?.first?.contains("no such collection") == true })
            token.remove()
        }
    }
}

/// A gate tasks wait on until it is opened.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(c)
                return false
            }
            if resumeNow { c.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }
}
