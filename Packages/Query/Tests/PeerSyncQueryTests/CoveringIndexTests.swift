import Foundation
import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// Covering index reads (rows built from index entries, no document read) and the plan a
/// `Query` keeps between runs.
@Suite struct CoveringIndexTests {
    /// Rows as canonical JSON text, in order.
    func rows(_ query: Query) async throws -> [String] {
        try await query.execute().map { $0.toJSON() }
    }

    /// The same query on a collection without indexes: the scan's rows, the reference.
    func scanned(_ db: Database, _ sql: String, collection: String) async throws -> [String] {
        try await rows(db.createQuery(sql.replacingOccurrences(of: "FROM docs", with: "FROM \(collection)")))
    }

    func save(_ c: Collection, _ id: String, _ data: [String: JSONValue]) async throws {
        _ = try await c.save(document: MutableDocument(id: id, data: data))
    }

    @Test(arguments: Backend.available)
    func coveredQueriesReadTheIndexAndMatchTheScan(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "docs")
            let plain = try await db.createCollection(name: "plain")
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            try await c.createIndex(withName: "byKN", config: ValueIndexConfiguration(["k", "n"]))
            // Values of every kind the key encoding holds, as a stored body reads them back.
            let values: [JSONValue?] = [
                .int(3), .double(2.5), .int(-7), .double(-0.25), .int(0), .int(9_007_199_254_740_993), .int(Int64.max),
                .int(Int64.min), .double(1.5e300), .double(9.5e18), .double(-1e19), .string("a\u{0}b\u{1}c"), .string("日本"),
                .string(""), .null, .bool(true), .bool(false), nil, .array([.int(1), .string("x"), .array([])]),
                .object(["p": .int(1)]), .array([.object(["q": .null])]), .int(12),
            ]
            for (i, value) in values.enumerated() {
                var data: [String: JSONValue] = ["k": .string(i % 2 == 0 ? "even" : "odd"), "other": .int(Int64(i))]
                if let value { data["n"] = value }
                try await save(c, String(format: "d%02d", i), data)
                try await save(plain, String(format: "d%02d", i), data)
            }
            let queries = [
                "SELECT meta().id, n FROM docs WHERE n >= 0 ORDER BY n LIMIT 50",
                "SELECT meta().id, n FROM docs WHERE n < 100 ORDER BY n DESC LIMIT 5 OFFSET 2",
                "SELECT n, meta().id AS id FROM docs WHERE n BETWEEN -10 AND 10",
                "SELECT meta().id FROM docs WHERE n IN (3, 2.5, 'x', 12)",
                "SELECT n.p, n[0], n FROM docs WHERE n >= 'a' OR n > 1 AND n IS VALUED ORDER BY n LIMIT 30",
                "SELECT meta().id, k, n FROM docs WHERE k = 'even' AND n > -100 ORDER BY n",
                "SELECT k, COUNT(*) AS c, MAX(n) AS m FROM docs WHERE k = 'odd' GROUP BY k",
                "SELECT DISTINCT k FROM docs WHERE k >= 'a'",
                "SELECT meta().id, n FROM docs ORDER BY n LIMIT 4",
            ]
            for sql in queries {
                let query = try db.createQuery(sql)
                let explain = try await query.explain()
                #expect(explain.contains("; COVERING INDEX (values read from the index, no document fetched)"), "\(sql)\n\(explain)")
                // An ORDER BY is either read from the index or sorted, and the plan says which, once.
                #expect(!sql.contains("ORDER BY") || explain.contains("ORDER BY FROM THE INDEX") != explain.contains("SORT BY"),
                        "\(sql)\n\(explain)")
                #expect(try await rows(query) == (try await scanned(db, sql, collection: "plain")), "\(sql)")
            }
            // Anything else read, or meta() beyond the ID: documents are fetched.
            for sql in ["SELECT meta().id, other FROM docs WHERE n > 1", "SELECT meta().sequence FROM docs WHERE n > 1",
                        "SELECT * FROM docs AS d WHERE n > 1", "SELECT meta().revisionID, n FROM docs WHERE n = 3"] {
                let query = try db.createQuery(sql)
                let explain = try await query.explain()
                #expect(explain.contains("USING INDEX") && !explain.contains("COVERING"), "\(sql)\n\(explain)")
                #expect(explain.contains("documents fetched") || explain.contains("ORDER BY FROM THE INDEX"), "\(explain)")
                #expect(try await rows(query) == (try await scanned(db, sql, collection: "plain")), "\(sql)")
            }
        }
    }

    @Test(arguments: Backend.available)
    func coveredQueriesSkipDeletedPurgedAndExpiredDocuments(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "docs")
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            for i in 0..<8 { try await save(c, "d\(i)", ["n": .int(Int64(i))]) }
            let query = try db.createQuery("SELECT meta().id, n FROM docs WHERE n >= 0 ORDER BY n")
            let unordered = try db.createQuery("SELECT meta().id FROM docs WHERE n IN (1, 2, 3, 4, 5)")
            #expect(try await query.explain().contains("COVERING INDEX"))
            #expect(try await unordered.explain().contains("COVERING INDEX"))
            #expect(try await query.execute().count == 8)

            let d1 = try #require(try await c.document(id: "d1"))
            #expect(try await c.delete(document: d1))
            try await c.purge(id: "d2")
            try await save(c, "d3", ["n": .string("moved")])
            try await c.setDocumentExpiration(id: "d4", expiration: Date().addingTimeInterval(0.2))
            let deadline = ContinuousClock.now + .seconds(60)
            while try await c.document(id: "d4") != nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            #expect(try await c.document(id: "d4") == nil)

            // d3's new value is a string: after every number in the collation.
            #expect(try await query.execute().map { $0.string(at: 0) ?? "?" } == ["d0", "d5", "d6", "d7", "d3"])
            #expect(try await unordered.execute().map { $0.string(at: 0) ?? "?" } == ["d5"])
            // A deletion undone by a new save is seen again.
            try await save(c, "d1", ["n": .int(1)])
            #expect(try await unordered.execute().map { $0.string(at: 0) ?? "?" } == ["d1", "d5"])
            // A query over deleted documents scans (deleted documents have no entry).
            let withDeleted = try db.createQuery("SELECT meta().id FROM docs WHERE n >= 0 AND meta().deleted = false")
            #expect(try await withDeleted.explain().contains("SCAN COLLECTION"))
        }
    }

    @Test(arguments: Backend.available)
    func aQueryKeepsItsPlanUntilTheIndexDefinitionsOrParametersChange(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "docs")
            for i in 0..<10 {
                try await save(c, "d\(i)", ["n": .int(Int64(i)), "m": .int(Int64(100 - i)), "s": .string("s\(9 - i)")])
            }
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            let query = try db.createQuery("SELECT meta().id, n FROM docs WHERE n >= $low ORDER BY n LIMIT 3")
            let parameters = Parameters()
            parameters.setValue(.int(4), forName: "low")
            query.parameters = parameters
            let expected = ["{\"id\":\"d4\",\"n\":4}", "{\"id\":\"d5\",\"n\":5}", "{\"id\":\"d6\",\"n\":6}"]
            #expect(try await rows(query) == expected)
            #expect(try await rows(query) == expected)
            _ = try await query.resultStream().reduce(0) { n, _ in n + 1 }
            #expect(query.planCache.plansMade.withLock { $0 } == 1)

            // The same name, other expressions (Couchbase Lite's replace): a plan kept by the
            // index's name would read `s` keys as if they were `n`'s.
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["s"]))
            #expect(try await rows(query) == expected)
            #expect(query.planCache.plansMade.withLock { $0 } == 2)
            #expect(try await query.explain().contains("SCAN COLLECTION"))

            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n", "m"]))
            #expect(try await rows(query) == expected)
            #expect(try await query.explain().contains("USING INDEX byN (n, m)"))
            #expect(query.planCache.plansMade.withLock { $0 } == 3)

            // Other parameters: planned again (the ranges come from them).
            parameters.setValue(.int(8), forName: "low")
            query.parameters = parameters
            #expect(try await rows(query) == ["{\"id\":\"d8\",\"n\":8}", "{\"id\":\"d9\",\"n\":9}"])
            #expect(query.planCache.plansMade.withLock { $0 } == 4)

            // Dropped: the next run scans.
            try await c.deleteIndex(forName: "byN")
            #expect(try await rows(query) == ["{\"id\":\"d8\",\"n\":8}", "{\"id\":\"d9\",\"n\":9}"])
            #expect(try await query.explain().contains("SCAN COLLECTION"))
        }
    }

    /// What a stored body reads back as: the value through canonical JSON.
    static func stored(_ value: JSONValue) throws -> JSONValue {
        try JSONValue(parsing: JSONValue.array([value]).canonicalData).arrayValue![0]
    }

    /// The value's cases, recursively (`.int(1)` and `.double(1)` are `==`, not the same).
    static func shape(_ value: JSONValue?) -> String {
        guard let value else { return "missing" }
        switch value {
        case .null: return "null"
        case .bool(let b): return "\(b)"
        case .int(let i): return "int(\(i))"
        case .double(let d): return "double(\(d.bitPattern))"
        case .string(let s): return "string(\(Array(s.utf8)))"
        case .array(let a): return "[" + a.map { shape($0) }.joined(separator: ",") + "]"
        case .object(let o): return "{" + o.keys.sorted().map { "\($0):\(shape(o[$0]))" }.joined(separator: ",") + "}"
        }
    }

    @Test func entryKeysDecodeToTheStoredValuesOrToNothing() throws {
        var values: [JSONValue] = [
            .null, .bool(true), .bool(false), .int(0), .double(-0.0), .int(1), .double(1), .double(0.1), .double(-2.75),
            .int(9_007_199_254_740_993), .int(-9_007_199_254_740_993), .int(Int64.max), .int(Int64.min), .int(Int64.max - 1),
            .int(9_200_000_000_000_000_001), .double(9.2e18), .double(9.1e18), .double(-9.3e18), .double(1e19), .double(1.7e308),
            .double(-Double.leastNonzeroMagnitude), .double(0x1p63), .string(""), .string("a\u{0}\u{1}\u{2}b"), .string("ünï🙂"), .array([]),
            .array([.int(1), .array([.string("x"), .null])]), .object([:]), .object(["a": .int(1)]), .array([.object([:])]),
        ]
        var rng = SplitMix64(seed: 7)
        for _ in 0..<2000 {
            let bits = UInt64.random(in: .min ... .max, using: &rng)
            let d = Double(bitPattern: bits)
            if d.isFinite { values.append(.double(d)) }
            values.append(.int(Int64(bitPattern: bits)))
            values.append(.double(Double(Int64.random(in: -1_000_000...1_000_000, using: &rng)) / 8))
        }
        var decoded = 0
        for value in values {
            let stored = try CoveringIndexTests.stored(value)
            for missingFirst in [false, true] {
                let key = IndexKey.entryKey(missingFirst ? [nil, stored] : [stored, .int(5)], documentID: "doc\u{1}")
                let bytes = Array(key.utf8)
                guard let read = IndexKey.decodeStoredValues(bytes, count: 2, positions: missingFirst ? [0, 1] : [0]) else {
                    // Only objects and integral numbers ≥ 9.2e18 whose case the key cannot tell are refused.
                    let refused: Bool
                    switch stored {
                    case .object: refused = true
                    case .array(let items): refused = items.contains { if case .object = $0 { return true }; return false }
                    case .double(let d): refused = d.rounded() == d && abs(d) >= 9.2e18
                    case .int(let i): refused = abs(Double(i)) >= 9.2e18 && Int64(exactly: Double(i)) == i
                    default: refused = false
                    }
                    #expect(refused, "\(CoveringIndexTests.shape(stored))")
                    continue
                }
                decoded += 1
                let expected: [JSONValue?] = missingFirst ? [nil, stored] : [stored]
                #expect(read.map(CoveringIndexTests.shape) == expected.map(CoveringIndexTests.shape))
            }
        }
        #expect(decoded > values.count)
        // Not this encoding's keys: nothing.
        #expect(IndexKey.decodeStoredValues(Array("\u{6}12".utf8), count: 1, positions: [0]) == nil)
        #expect(IndexKey.decodeStoredValues(Array("\u{7}ab".utf8), count: 1, positions: [0]) == nil)
        #expect(IndexKey.decodeStoredValues(Array("\u{3}\u{3}".utf8), count: 1, positions: [0]) == nil)
    }
}
