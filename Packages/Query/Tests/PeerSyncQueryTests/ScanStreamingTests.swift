import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// The scan's memory contract, by the documents it reads (not by time): a query without
/// `ORDER BY`, `GROUP BY`, aggregates or `DISTINCT` stops reading once it has its
/// `OFFSET + LIMIT` rows; one that must sort or group reads every document.
@Suite struct ScanStreamingTests {
    @Test(arguments: Backend.available)
    func aLimitStopsTheScanEarly(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "many")
            try await db.inBatch { txn in
                for i in 0..<2_000 {
                    var doc = MutableDocument(id: String(format: "d%05d", i), data: ["n": .int(Int64(i)), "tenth": .bool(i % 10 == 9)])
                    try txn.save(document: &doc, in: c)
                }
            }
            let first = try db.createQuery("SELECT meta().id FROM many LIMIT 5 OFFSET 2")
            #expect(try await first.execute().map { $0.string(at: 0)! } == ["d00002", "d00003", "d00004", "d00005", "d00006"])
            #expect(first.scanStatistics.documentsRead.withLock { $0 } == 7)

            // A filter: every tenth document matches, 3 rows are found in the first 30.
            let filtered = try db.createQuery("SELECT n FROM many WHERE tenth LIMIT 3")
            #expect(try await filtered.execute().map { $0.int(at: 0) } == [9, 19, 29])
            #expect(filtered.scanStatistics.documentsRead.withLock { $0 } == 30)

            // A join with a lookup reads one joined document per row.
            let joined = try db.createQuery("SELECT b.n FROM many AS a JOIN many AS b ON meta(b).id = a.next OR meta(b).id = meta(a).id LIMIT 4")
            _ = try await joined.execute()
            // (OR is no lookup: b is read once, whole, then 4 rows of a.)
            #expect(joined.scanStatistics.documentsRead.withLock { $0 } == 2_000 + 4)
            let lookup = try db.createQuery("SELECT b.n FROM many AS a JOIN many AS b ON meta(b).id = meta(a).id LIMIT 4")
            #expect(try await lookup.execute().map { $0.int(at: 0) } == [0, 1, 2, 3])
            #expect(lookup.scanStatistics.documentsRead.withLock { $0 } == 8)

            // Sorting needs every row: the whole collection is read.
            let sorted = try db.createQuery("SELECT n FROM many ORDER BY n DESC LIMIT 3")
            #expect(try await sorted.execute().map { $0.int(at: 0) } == [1999, 1998, 1997])
            #expect(sorted.scanStatistics.documentsRead.withLock { $0 } == 2_000)
        }
    }
}
