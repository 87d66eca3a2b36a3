import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// `Query.resultStream(pageSize:)`: the rows of `execute()`, in the same order, read a page
/// at a time; stopping iteration or cancelling the task stops the reading (counted in
/// documents read, never timed).
@Suite struct ResultStreamTests {
    static func fill(_ db: Database, _ count: Int) async throws -> Collection {
        let c = try await db.createCollection(name: "many")
        try await db.inBatch { txn in
            for i in 0..<count {
                var doc = MutableDocument(id: String(format: "d%05d", i),
                                          data: ["n": .int(Int64(i)), "k": .string("k\(i % 7)"), "tenth": .bool(i % 10 == 9)])
                try txn.save(document: &doc, in: c)
            }
        }
        return c
    }

    static func streamed(_ query: Query, pageSize: Int) async throws -> [Result] {
        var rows: [Result] = []
        for try await row in query.resultStream(pageSize: pageSize) { rows.append(row) }
        return rows
    }

    @Test(arguments: Backend.available)
    func givesTheRowsOfExecuteInOrder(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await Self.fill(db, 1_000)
            try await c.createIndex(withName: "byK", config: ValueIndexConfiguration(["k"]))
            let queries = [
                "SELECT meta().id, n FROM many",                                   // a scan, pages of 37
                "SELECT meta().id FROM many WHERE tenth",                         // a filter
                "SELECT n FROM many WHERE tenth LIMIT 50 OFFSET 13",              // limit and offset across pages
                "SELECT meta().id, n FROM many WHERE k = 'k3'",                   // through the index
                "SELECT meta().id FROM many WHERE k = 'k3' LIMIT 40 OFFSET 45",
                "SELECT n FROM many WHERE n < 0",                                 // nothing
                "SELECT n FROM many LIMIT 0",
                "SELECT * FROM many WHERE n < 100",                               // whole documents
                "SELECT n FROM many ORDER BY n DESC LIMIT 100",                   // sorted: held, handed out in pages
                "SELECT k, COUNT(*) AS c FROM many GROUP BY k",                   // grouped: held
                "SELECT DISTINCT k FROM many",
            ]
            for sql in queries {
                let query = try db.createQuery(sql)
                let expected = try await query.execute().allResults()
                #expect(try await Self.streamed(query, pageSize: 37) == expected, "\(sql)")
                #expect(try await Self.streamed(query, pageSize: 1) == expected, "\(sql)")
                #expect(try await Self.streamed(query, pageSize: 5_000) == expected, "\(sql)")
            }
            #expect(try db.createQuery("SELECT meta().id, n FROM many").resultStream().columnNames == ["id", "n"])
        }
    }

    /// Rows are produced as they are consumed: breaking out after 10 rows has read one page.
    @Test(arguments: Backend.available)
    func readsOnlyThePagesConsumed(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await Self.fill(db, 2_000)
            let query = try db.createQuery("SELECT meta().id FROM many")
            var seen: [String] = []
            for try await row in query.resultStream(pageSize: 50) {
                seen.append(row.string(at: 0) ?? "?")
                if seen.count == 10 { break }
            }
            #expect(seen == (0..<10).map { String(format: "d%05d", $0) })
            #expect(query.scanStatistics.documentsRead.withLock { $0 } == 50)

            // Each page reads on from where the last stopped: 120 rows, three pages of 50.
            let filtered = try db.createQuery("SELECT n FROM many WHERE tenth")
            var count = 0
            for try await _ in filtered.resultStream(pageSize: 50) {
                count += 1
                if count == 120 { break }
            }
            // 150 matching rows are the first 1,500 documents.
            #expect(filtered.scanStatistics.documentsRead.withLock { $0 } == 1_500)
        }
    }

    /// Cancelling the consuming task stops the scan at the next page: `CancellationError`,
    /// and the rest of the collection is never read.
    @Test(arguments: Backend.available)
    func cancellationStopsTheScan(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await Self.fill(db, 2_000)
            let query = try db.createQuery("SELECT meta().id FROM many")
            let consumer = Task { () -> (rows: Int, error: (any Error)?) in
                var rows = 0
                do {
                    for try await _ in query.resultStream(pageSize: 20) {
                        rows += 1
                        if rows == 30 { withUnsafeCurrentTask { $0?.cancel() } }
                    }
                    return (rows, nil)
                } catch {
                    return (rows, error)
                }
            }
            let (rows, error) = await consumer.value
            #expect(error is CancellationError, "\(String(describing: error))")
            #expect(rows == 40, "the page being consumed is finished, no other is read")
            #expect(query.scanStatistics.documentsRead.withLock { $0 } == 40)
        }
    }
}
