import Foundation
import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import PeerSyncTestSupport
import Testing
@testable import PeerSyncQuery

/// The stale-index path: a process that writes documents without ever using this package
/// (`database-test-child`, which links the database only and never touches a query or index
/// API, so no `DocumentIndexer` is installed there) cannot compute index entries; its write
/// marks the collection's indexes stale in the same transaction. A query here must then never
/// read the out-of-date entries, and rebuilds the index before using it.
@Suite(.serialized) struct StaleIndexTests {
    static var childPath: String { Products.path("database-test-child") }

    /// Runs the child: it saves `child-0` … `child-<count-1>` (`n` = 0 … count-1) into the
    /// default collection of the database at `path` and exits.
    static func childWrites(_ backend: Backend, _ path: String, count: Int, prefix: String = "child-") async throws {
        let child = try ChildProcess(executable: childPath, [backend.rawValue, "write", path, prefix, "\(count)", "0"],
                                     standardError: .inherited)
        let status = await child.waitForExit()
        #expect(status == 0, "child output: \(child.output.suffix(3))")
    }

    static func definition(_ c: Collection, _ name: String) async throws -> IndexDefinition {
        try #require(try await c.indexDefinitions().first { $0.name == name })
    }

    /// The IDs `WHERE n = value`, as a scan finds them (every document read and tested here).
    static func scanIDs(_ c: Collection, n value: Int64) async throws -> [String] {
        try await c.allDocuments().filter { $0.properties["n"] == .int(value) }.map(\.id).sorted()
    }

    @Test func childExecutableIsBuilt() {
        #expect(FileManager.default.isExecutableFile(atPath: Self.childPath),
                "the child must be built next to the tests: \(Self.childPath)")
    }

    /// (a) the child's write marks the index stale (and really leaves its entries behind);
    /// (c) while stale, the planner never chooses it; (b) `explain()` rebuilds it and shows it
    /// used, and the query returns the rows of a scan; again with `execute()` first.
    @Test(arguments: Backend.onDisk)
    func aWriteWithoutTheQueryModuleMarksIndexesStaleAndTheNextQueryRebuildsThem(_ backend: Backend) async throws {
        try await withTemporaryDirectory(prefix: "peersync-stale-index") { dir in
            let path = dir + "/shared.peersync"
            let config = DatabaseConfiguration(directory: dir, backend: backend.make(), durable: false,
                                               changePollInterval: .milliseconds(20))
            let db = try await Database(path: path, config: config)
            let c = try db.defaultCollection()
            for i in 0..<10 {
                _ = try await c.save(document: MutableDocument(id: "p\(i)", data: ["n": .int(Int64(i)), "writer": "parent"]))
            }
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            #expect(try await Self.definition(c, "byN").isStale == false)
            let sql = "SELECT meta().id FROM _ WHERE n = 3 ORDER BY meta().id"
            #expect(try await IndexTests.ids(db, sql) == ["p3"])

            // (a) Another process, without the query module, saves 40 documents.
            try await Self.childWrites(backend, path, count: 40)
            #expect(try await c.count == 50)
            #expect(try await Self.definition(c, "byN").isStale, "the child's write must mark the index stale")
            // The entries are really out of date: the child's documents are not in the index,
            // so a query reading it would miss them.
            #expect(try await IndexTests.storedEntries(c, "byN").count == 10)

            // (c) In a snapshot showing the stale index, the planner scans, and says so.
            let plan = try SQLParser.parse(sql)
            let (access, sawStale) = try await db.inReadBatch { transaction in
                try QueryAccess.path(plan, parameters: [:], collection: c, transaction: transaction)
            }
            #expect(sawStale)
            #expect(Planner.describe(access, plan: plan, collection: c.fullName).hasPrefix("SCAN"),
                    "a stale index must not be chosen")
            #expect(try await Self.definition(c, "byN").isStale, "planning alone must not rebuild")

            // (b) explain() rebuilds it first and shows it used; the rows are a scan's.
            let explained = try await db.createQuery(sql).explain()
            #expect(explained.contains("USING INDEX byN"), "\(explained)")
            #expect(try await Self.definition(c, "byN").isStale == false)
            try await IndexTests.expectConsistent(c, "byN", ["n"])
            #expect(try await IndexTests.ids(db, sql) == ["child-3", "p3"])
            #expect(try await IndexTests.ids(db, sql) == Self.scanIDs(c, n: 3))

            // Again, stale, then execute() first: it rebuilds and returns the scan's rows.
            try await Self.childWrites(backend, path, count: 5, prefix: "again-")
            #expect(try await Self.definition(c, "byN").isStale)
            #expect(try await IndexTests.ids(db, sql) == ["again-3", "child-3", "p3"])
            #expect(try await IndexTests.ids(db, sql) == Self.scanIDs(c, n: 3))
            #expect(try await Self.definition(c, "byN").isStale == false)
            try await IndexTests.expectConsistent(c, "byN", ["n"])
            let ordered = "SELECT meta().id FROM _ WHERE n >= 2 ORDER BY n, meta().id LIMIT 4"
            #expect(try await IndexTests.ids(db, ordered) == ["again-2", "child-2", "p2", "again-3"])
            try await db.close()
        }
    }

    /// (c) end to end: however a run's snapshot shows the index (stale, or rebuilt), its rows
    /// are the scan's: the planner and `DocumentScan` together, over a stale index, never
    /// return the index's out-of-date rows.
    @Test(arguments: Backend.onDisk)
    func aStaleIndexIsNeverReadForAResult(_ backend: Backend) async throws {
        try await withTemporaryDirectory(prefix: "peersync-stale-index") { dir in
            let path = dir + "/shared.peersync"
            let config = DatabaseConfiguration(directory: dir, backend: backend.make(), durable: false)
            let db = try await Database(path: path, config: config)
            let c = try db.defaultCollection()
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            try await Self.childWrites(backend, path, count: 30)
            #expect(try await IndexTests.storedEntries(c, "byN").isEmpty)
            let plan = try SQLParser.parse("SELECT meta().id FROM _ WHERE n BETWEEN 5 AND 7 ORDER BY n")
            // One snapshot, the stale index in it: plan and run as `execute()` would, without
            // the rebuild.
            let rows = try await db.inReadBatch { transaction in
                let (path, sawStale) = try QueryAccess.path(plan, parameters: [:], collection: c, transaction: transaction)
                #expect(sawStale)
                let scan = DocumentScan(plan: plan, main: c, joins: [], parameters: [:], path: path)
                return try Executor(plan: plan, parameters: [:]).run(ordered: path.order != nil) { visit in
                    try scan.run(transaction, visit)
                }
            }
            #expect(rows.map { $0[0] } == [.string("child-5"), .string("child-6"), .string("child-7")])
            try await db.close()
        }
    }
}
