import Foundation
import PeerSyncCore
@_spi(Indexing) @_spi(Replication) import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import PeerSyncStorage
import Testing
@testable import PeerSyncQuery

/// Value indexes: the API (Couchbase Lite's names), upkeep on every path that changes a
/// document's current revision, what a second handle sees, and the planner's choices.
@Suite struct IndexTests {
    /// The stored entry keys of index `name`, in key order.
    static func storedEntries(_ collection: Collection, _ name: String) async throws -> [String] {
        try await collection.database.inReadBatch { transaction in
            var keys: [String] = []
            try transaction.forEachIndexEntry(index: name, in: collection, range: .all, descending: false) { key, id in
                #expect(Array(key.utf8).suffix(id.utf8.count).elementsEqual(id.utf8))
                keys.append(key)
                return true
            }
            return keys
        }
    }

    /// The entry keys index `name` on `expressions` should hold: one per live document.
    static func expectedEntries(_ collection: Collection, _ expressions: [String]) async throws -> [String] {
        let nodes = try expressions.map { try QueryIndexer.installed.compile($0) }
        let evaluator = Evaluator(parameters: [:])
        return try await collection.allDocuments().map { document in
            let doc = QueryDocument(id: document.id, sequence: 0, revisionID: "", isDeleted: false, expiration: nil,
                                    properties: document.properties)
            return IndexKey.entryKey(try nodes.map { try evaluator.evaluate($0, doc) }, documentID: document.id)
        }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    static func expectConsistent(_ collection: Collection, _ name: String, _ expressions: [String],
                                 sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let stored = try await storedEntries(collection, name)
        let expected = try await expectedEntries(collection, expressions)
        #expect(stored == expected, sourceLocation: sourceLocation)
    }

    static func ids(_ db: Database, _ sql: String, _ parameters: [String: JSONValue] = [:]) async throws -> [String] {
        let query = try db.createQuery(sql)
        if !parameters.isEmpty {
            let p = Parameters()
            for (k, v) in parameters { p.setValue(v, forName: k) }
            query.parameters = p
        }
        return try await query.execute().map { $0.string(at: 0) ?? "?" }
    }

    @Test(arguments: Backend.available)
    func createListReplaceAndDelete(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "tasks")
            for i in 0..<20 {
                _ = try await c.save(document: MutableDocument(id: "t\(i)", data: ["type": i % 2 == 0 ? "a" : "b", "n": .int(Int64(i))]))
            }
            #expect(try await c.indexes() == [])
            try await c.createIndex(withName: "byType", config: ValueIndexConfiguration(["type", "n"]))
            try await c.createIndex(IndexBuilder.valueIndex(items: .property("n")), name: "byN")
            #expect(try await c.indexes() == ["byN", "byType"])
            #expect(try await c.index(withName: "byType")?.expressions == ["type", "n"])
            #expect(try await c.index(withName: "nope") == nil)
            try await IndexTests.expectConsistent(c, "byType", ["type", "n"])
            try await IndexTests.expectConsistent(c, "byN", ["n"])

            // Same name and configuration: nothing happens (the entries stay, none rebuilt).
            let before = try await c.database.inReadBatch { try $0.indexDefinitions(of: c) }
            try await c.createIndex(withName: "byType", config: ValueIndexConfiguration(["type", "n"]))
            #expect(try await c.database.inReadBatch { try $0.indexDefinitions(of: c) } == before)
            // Same name, other configuration: replaced.
            try await c.createIndex(withName: "byType", config: ValueIndexConfiguration(["lower(type)"]))
            #expect(try await c.index(withName: "byType")?.expressions == ["lower(type)"])
            try await IndexTests.expectConsistent(c, "byType", ["lower(type)"])

            try await c.deleteIndex(forName: "byType")
            try await c.deleteIndex(forName: "byType")   // again: nothing
            #expect(try await c.indexes() == ["byN"])
            #expect(try await IndexTests.storedEntries(c, "byType") == [])

            // Bad definitions.
            await #expect(throws: PeerSyncError.self) { try await c.createIndex(withName: "x", config: ValueIndexConfiguration([])) }
            await #expect(throws: PeerSyncError.self) { try await c.createIndex(withName: "", config: ValueIndexConfiguration(["n"])) }
            await #expect(throws: PeerSyncError.self) { try await c.createIndex(withName: "x", config: ValueIndexConfiguration(["n ="])) }
            // A parse error names the expression, not a position in the query wrapped around it.
            let unparsable = await #expect(throws: PeerSyncError.self) {
                try await c.createIndex(withName: "x", config: ValueIndexConfiguration(["lower("]))
            }
            #expect(unparsable?.message == "the index expression 'lower(' does not parse as one SQL++ expression")
            await #expect(throws: PeerSyncError.self) { try await c.createIndex(withName: "x", config: ValueIndexConfiguration(["meta().id"])) }
            await #expect(throws: PeerSyncError.self) { try await c.createIndex(withName: "x", config: ValueIndexConfiguration(["$p"])) }
            #expect(try await c.indexes() == ["byN"])

            // Deleting the collection drops its indexes; a new one of that name starts empty.
            try await db.deleteCollection(name: "tasks")
            let again = try await db.createCollection(name: "tasks")
            #expect(try await again.indexes() == [])
            #expect(try await IndexTests.storedEntries(again, "byN") == [])
        }
    }

    /// A run of an indexed query reads the index definitions first, and a definition found
    /// stands for the collection's existence check: a deleted collection (its definitions
    /// dropped with it) is still "no such collection", a recreated one is read anew, and a
    /// batch's reads of another collection still check it.
    @Test(arguments: Backend.available)
    func theDefinitionsReadChecksThatTheCollectionExists(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "tasks")
            for i in 0..<10 {
                _ = try await c.save(document: MutableDocument(id: "t\(i)", data: ["type": i % 2 == 0 ? "a" : "b", "n": .int(Int64(i))]))
            }
            try await c.createIndex(withName: "byType", config: ValueIndexConfiguration(["type"]))
            let query = try db.createQuery("SELECT meta().id FROM tasks WHERE type = 'a'")
            #expect(try await query.explain().contains("USING INDEX byType"))
            #expect(try await query.execute().count == 5)
            let built = QueryBuilder.select(SelectResult.expression(Meta.id)).from(DataSource.collection(c))
                .where(Expression.property("type").equalTo(Expression.string("a")))
            #expect(try await built.execute().count == 5)

            try await db.deleteCollection(name: "tasks")
            let error = await #expect(throws: PeerSyncError.self) { try await query.execute() }
            #expect(error?.code == .invalidQuery)
            #expect(error?.context["collection"] == "_default.tasks")
            let builtError = await #expect(throws: PeerSyncError.self) { try await built.execute() }
            #expect(builtError?.code == .notFound)
            let inBatch = await #expect(throws: PeerSyncError.self) {
                try await db.inReadBatch { try $0.storedIndexDefinitions(of: c) }
            }
            #expect(inBatch?.code == .notFound)

            // Recreated with another index and one document: the query plans and reads it anew.
            let again = try await db.createCollection(name: "tasks")
            try await again.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            _ = try await again.save(document: MutableDocument(id: "x", data: ["type": "a", "n": 1]))
            #expect(try await query.execute().map { $0.string(at: 0) } == ["x"])
            #expect(try await query.explain().contains("no index"))

            // In one batch: definitions found for one collection, another one missing.
            let other = try await db.createCollection(name: "other")
            try await db.deleteCollection(name: "other")
            let (names, first, missing, second, contains) = try await db.inReadBatch { transaction in
                let names = try transaction.storedIndexDefinitions(of: again).map(\.name)
                let first = try transaction.document(id: "x", in: again) != nil
                var missing: PeerSyncError?
                do { _ = try transaction.document(id: "x", in: other) } catch let error as PeerSyncError { missing = error }
                return (names, first, missing, try transaction.document(id: "x", in: again) != nil,
                        try transaction.contains(other))
            }
            #expect(names == ["byN"])
            #expect(first && second)
            #expect(missing?.code == .notFound)
            #expect(contains == false)
        }
    }

    @Test(arguments: Backend.available)
    func maintainedOnEveryWritePath(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "docs")
            let expressions = ["k", "n"]
            try await c.createIndex(withName: "kn", config: ValueIndexConfiguration(expressions))
            func check(_ location: SourceLocation = #_sourceLocation) async throws {
                try await IndexTests.expectConsistent(c, "kn", expressions, sourceLocation: location)
            }
            // Save: new, changed, unchanged indexed values, a value removed (MISSING).
            var d1 = try await c.save(document: MutableDocument(id: "d1", data: ["k": "a", "n": 1]))
            _ = try await c.save(document: MutableDocument(id: "d2", data: ["k": "b", "n": 2.5]))
            try await check()
            d1.setValue(.int(5), forKey: "n")
            d1 = try await c.save(document: d1)
            d1.setValue(.string("other"), forKey: "unindexed")
            d1 = try await c.save(document: d1)
            d1.removeValue(forKey: "k")
            d1 = try await c.save(document: d1)
            try await check()
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE n = 5") == ["d1"])
            // Delete: the entry goes; saving again brings it back.
            #expect(try await c.delete(document: d1))
            try await check()
            #expect(try await IndexTests.storedEntries(c, "kn").count == 1)
            _ = try await c.save(document: MutableDocument(id: "d1", data: ["k": "c", "n": 7]))
            try await check()
            // Purge.
            try await c.purge(id: "d2")
            try await check()
            #expect(try await IndexTests.storedEntries(c, "kn").count == 1)
            // A batch: several changes in one transaction, and a rolled-back one changes nothing.
            try await db.inBatch { t in
                for i in 0..<5 {
                    var doc = MutableDocument(id: "b\(i)", data: ["k": "batch", "n": .int(Int64(i))])
                    try t.save(document: &doc, in: c)
                }
                try t.purge(id: "b0", in: c)
            }
            try await check()
            await #expect(throws: PeerSyncError.self) {
                try await db.inBatch { t in
                    var doc = MutableDocument(id: "rolledBack", data: ["k": "x"])
                    try t.save(document: &doc, in: c)
                    throw PeerSyncError(.invalidArgument, "roll back")
                }
            }
            try await check()
            // A replicated revision: a new document, then a conflicting branch that wins.
            try await c.insertRevision(docID: "r", revID: RevisionID(generation: 1, digest: "aa"), history: [],
                                       body: ["k": "pulled", "n": 1], deleted: false)
            try await check()
            try await c.insertRevision(docID: "r", revID: RevisionID(generation: 2, digest: "bb"),
                                       history: [RevisionID(generation: 1, digest: "aa")],
                                       body: ["k": "pulled", "n": 2], deleted: false)
            try await c.insertRevision(docID: "r", revID: RevisionID(generation: 3, digest: "cc"),
                                       history: [RevisionID(generation: 2, digest: "b0"), RevisionID(generation: 1, digest: "aa")],
                                       body: ["k": "branch", "n": 3], deleted: false)
            try await check()
            // A conflicting pulled branch stays a conflict (the current revision is unchanged)…
            #expect(try await c.document(id: "r")?.revisionID == "2-bb")
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE k = 'branch'") == [])
            // … until the conflict is resolved: the remote branch wins with a merged body.
            try await c.closeConflict(docID: "r", winningRevisionID: RevisionID(generation: 3, digest: "cc"),
                                      losingRevisionID: RevisionID(generation: 2, digest: "bb"), mergedBody: ["k": "merged", "n": 9])
            try await check()
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE k = 'merged'") == ["r"])
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE k = 'pulled'") == [])
            // A replicated deletion.
            let current = try #require(try await c.document(id: "r")?.revisionID).asRevisionID
            try await c.insertRevision(docID: "r", revID: RevisionID(generation: current.generation + 1, digest: "dd"),
                                       history: [current], body: [:], deleted: true)
            #expect(try await c.document(id: "r") == nil)
            try await check()
            // Expiry: the database purges the document when it expires.
            try await c.setDocumentExpiration(id: "b1", expiration: Date().addingTimeInterval(0.2))
            let deadline = ContinuousClock.now + .seconds(60)
            while try await c.document(id: "b1") != nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
            #expect(try await c.document(id: "b1") == nil)
            try await check()
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE k = 'batch' ORDER BY n") == ["b2", "b3", "b4"])
        }
    }

    /// Runs `body` with two handles on one on-disk database (as two processes would have),
    /// then closes both and deletes the folder.
    static func withTwoHandles(_ backend: Backend, _ body: (Database, Database) async throws -> Void) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-idx-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let config = DatabaseConfiguration(directory: dir, backend: backend.make(), durable: false)
        let first = try await Database(name: "shared", config: config)
        let second = try await Database(name: "shared", config: config)
        do {
            try await body(first, second)
        } catch {
            try? await second.close()
            try? await first.close()
            throw error
        }
        try await second.close()
        try await first.close()
    }

    @Test(arguments: Backend.onDisk)
    func aSecondHandleSeesAndMaintainsTheIndex(_ backend: Backend) async throws {
        try await IndexTests.withTwoHandles(backend) { first, second in
            let c1 = try await first.createCollection(name: "items")
            for i in 0..<30 { _ = try await c1.save(document: MutableDocument(id: "i\(i)", data: ["g": .int(Int64(i % 3))])) }
            try await c1.createIndex(withName: "byG", config: ValueIndexConfiguration(["g"]))
            let c2 = try #require(try await second.collection(name: "items"))
            #expect(try await c2.indexes() == ["byG"])
            let query = try second.createQuery("SELECT meta().id FROM items WHERE g = 1 ORDER BY meta().id")
            #expect(try await query.explain().contains("USING INDEX byG"))
            // Writes through the second handle keep the index the first created up to date.
            _ = try await c2.save(document: MutableDocument(id: "new", data: ["g": 1]))
            try await c2.purge(id: "i1")
            try await IndexTests.expectConsistent(c1, "byG", ["g"])
            #expect(try await IndexTests.ids(first, "SELECT meta().id FROM items WHERE g = 1").contains("new"))
            try await c2.deleteIndex(forName: "byG")
            #expect(try await c1.indexes() == [])
        }
    }

    /// The database prepares a collection's index definitions once per write transaction
    /// (`IndexUpkeepCache`): what one transaction prepared must not outlive it, or a handle
    /// that wrote before another handle (or process) created an index would go on writing
    /// without it.
    @Test(arguments: Backend.onDisk)
    func writesAfterAnotherHandleCreatedAnIndexAreIndexedInBatchesToo(_ backend: Backend) async throws {
        try await IndexTests.withTwoHandles(backend) { first, second in
            let c1 = try await first.createCollection(name: "items")
            let c2 = try #require(try await second.collection(name: "items"))
            // The second handle writes while the collection has no index, singly and in a batch.
            _ = try await c2.save(document: MutableDocument(id: "before", data: ["g": 1]))
            try await second.inBatch { t in
                var doc = MutableDocument(id: "before2", data: ["g": 2])
                try t.save(document: &doc, in: c2)
            }
            try await c1.createIndex(withName: "byG", config: ValueIndexConfiguration(["g"]))
            // Then saves, replaces and deletes in one batch: every change reaches the index.
            try await second.inBatch { t in
                for i in 0..<20 {
                    var doc = MutableDocument(id: "b\(i)", data: ["g": .int(Int64(i % 3))])
                    try t.save(document: &doc, in: c2)
                }
                var replaced = MutableDocument(id: "b0", data: ["g": 7])
                try t.save(document: &replaced, in: c2)
                let doomed = try #require(try t.document(id: "b1", in: c2))
                try t.delete(document: doomed, in: c2)
                var again = MutableDocument(id: "before", data: ["g": 8])
                try t.save(document: &again, in: c2)
            }
            try await IndexTests.expectConsistent(c1, "byG", ["g"])
            #expect(try await IndexTests.ids(first, "SELECT meta().id FROM items WHERE g = 7") == ["b0"])
            #expect(try await IndexTests.ids(first, "SELECT meta().id FROM items WHERE g = 8") == ["before"])
            // An index replaced by the first handle (other expressions) between the second's batches.
            try await c1.createIndex(withName: "byG", config: ValueIndexConfiguration(["h"]))
            try await second.inBatch { t in
                var doc = MutableDocument(id: "h1", data: ["h": "x"])
                try t.save(document: &doc, in: c2)
            }
            try await IndexTests.expectConsistent(c1, "byG", ["h"])
            #expect(try await IndexTests.ids(first, "SELECT meta().id FROM items WHERE h = 'x'") == ["h1"])
        }
    }

    /// Document IDs are distinct by their bytes: "\u{E9}" and "e\u{301}" are two documents
    /// (equal as Swift strings). An index range whose entries come out of ID order is sorted
    /// and deduplicated by bytes, so both stay (a `String ==` dedupe dropped one).
    @Test(arguments: Backend.available)
    func canonicallyEqualIDsAreTwoDocumentsThroughAnIndex(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "t")
            _ = try await c.save(document: MutableDocument(id: "\u{E9}", data: ["n": 1]))
            _ = try await c.save(document: MutableDocument(id: "e\u{301}", data: ["n": 2]))
            _ = try await c.save(document: MutableDocument(id: "a", data: ["n": 3]))
            let sql = "SELECT meta().id FROM t WHERE n >= 1"
            let scanned = try await IndexTests.ids(db, sql)
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            #expect(try await db.createQuery(sql).explain().contains("USING INDEX byN "))
            let indexed = try await IndexTests.ids(db, sql)
            #expect(indexed.map { Array($0.utf8) } == scanned.map { Array($0.utf8) })
            #expect(indexed.map { Array($0.utf8) } == [Array("a".utf8), Array("e\u{301}".utf8), Array("\u{E9}".utf8)])
        }
    }

    @Test(arguments: Backend.available)
    func plannerUsesIndexesAndGivesTheScansResults(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "t")
            var rng = SplitMix64(seed: 3)
            let words = ["abc", "abd", "ab", "b", "日本", "", "abc%"]
            for i in 0..<200 {
                var body: [String: JSONValue] = [:]
                if Int.random(in: 0..<10, using: &rng) > 0 { body["type"] = .string(["task", "note", "list"][i % 3]) }
                if Int.random(in: 0..<10, using: &rng) > 0 { body["n"] = Bool.random(using: &rng) ? .int(Int64(i % 17)) : .double(Double(i % 13) / 2) }
                if i % 11 == 0 { body["n"] = .null }
                if i % 7 == 0 { body["n"] = .string("s") }
                body["name"] = .string(words[Int.random(in: 0..<words.count, using: &rng)])
                _ = try await c.save(document: MutableDocument(id: String(format: "d%03d", (i * 37) % 200), data: body))
            }
            let queries: [(String, String?)] = [
                ("SELECT meta().id FROM t WHERE type = 'task'", "byTypeN"),
                ("SELECT meta().id FROM t WHERE type = 'task' AND n > 3", "byTypeN"),
                ("SELECT meta().id FROM t WHERE type = 'task' AND n BETWEEN 2 AND 5.5", "byTypeN"),
                ("SELECT meta().id, n FROM t WHERE type = 'note' ORDER BY n DESC LIMIT 7", "byTypeN"),
                ("SELECT meta().id FROM t WHERE n IN (1, 2.5, 'x', 3) ", "byN"),
                ("SELECT meta().id FROM t WHERE n < 4", "byN"),
                ("SELECT meta().id FROM t WHERE 4 <= n", "byN"),
                ("SELECT meta().id FROM t WHERE n >= $low AND n < 6", "byN"),
                ("SELECT meta().id, n FROM t ORDER BY n LIMIT 15 OFFSET 3", "byN"),
                ("SELECT meta().id, n FROM t ORDER BY n DESC, meta().id LIMIT 25", "byN"),
                ("SELECT meta().id FROM t WHERE name LIKE 'ab%'", "byName"),
                ("SELECT meta().id FROM t WHERE name LIKE 'abc\\%%'", "byName"),
                ("SELECT meta().id FROM t WHERE name LIKE '%b'", nil),
                ("SELECT meta().id FROM t WHERE n = 3 OR type = 'note'", nil),
                ("SELECT meta().id FROM t WHERE n != 3", nil),
                ("SELECT type, COUNT(*) FROM t GROUP BY type ORDER BY type", nil),
                ("SELECT meta().id FROM t WHERE type = 'task' AND meta().deleted = false", nil),
                ("SELECT meta().id FROM t WHERE n = $missing", nil),
                ("SELECT meta().id FROM t WHERE n = NULL", nil),
            ]
            let parameters: [String: JSONValue] = ["low": 2]
            var scans: [[String]] = []
            for (sql, _) in queries { scans.append(try await IndexTests.ids(db, sql, parameters)) }
            try await c.createIndex(withName: "byTypeN", config: ValueIndexConfiguration(["type", "n"]))
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            try await c.createIndex(withName: "byName", config: ValueIndexConfiguration(["name"]))
            for (i, (sql, index)) in queries.enumerated() {
                let query = try db.createQuery(sql)
                let p = Parameters()
                for (k, v) in parameters { p.setValue(v, forName: k) }
                query.parameters = p
                let explain = try await query.explain()
                if let index {
                    #expect(explain.contains("USING INDEX \(index) "), "\(sql)\n\(explain)")
                } else {
                    #expect(explain.contains("SCAN COLLECTION"), "\(sql)\n\(explain)")
                }
                #expect(try await query.execute().map { $0.string(at: 0) ?? "?" } == scans[i], "\(sql)")
            }
            #expect(scans[0].count > 10 && scans[10].count > 10, "the queries select something")
        }
    }
}

private extension String {
    var asRevisionID: RevisionID { get throws { try RevisionID(self) } }
}
