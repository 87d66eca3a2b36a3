import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// Queries end to end over a database: the builder and SQL++, on every backend.
@Suite struct QueryTests {
    static let tasks: [(String, JSONValue)] = [
        ("t1", ["title": "Buy milk", "list": "home", "done": false, "prio": 2, "date": "2026-01-03", "tags": ["shop"]]),
        ("t2", ["title": "Call Ann", "list": "home", "done": true, "prio": 1, "date": "2026-01-01"]),
        ("t3", ["title": "Write report", "list": "work", "done": false, "prio": 3, "date": "2026-01-02", "tags": ["q1", "shop"]]),
        ("t4", ["title": "Fix bug", "list": "work", "done": false, "prio": nil, "date": "2026-01-05"]),
        ("t5", ["title": "Plan trip", "list": "home", "done": false, "date": "2026-01-04", "owner": ["name": "Bo"]]),
    ]

    func populate(_ db: Database, collection: String = "tasks") async throws -> Collection {
        let c = try await db.createCollection(name: collection)
        for (id, body) in QueryTests.tasks {
            _ = try await c.save(document: MutableDocument(id: id, data: body.objectValue!))
        }
        return c
    }

    @Test(arguments: Backend.available)
    func builderFiltersOrdersAndLimits(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let tasks = try await populate(db)
            let query = QueryBuilder
                .select(SelectResult.expression(Meta.id), SelectResult.property("title"), SelectResult.property("owner.name"))
                .from(DataSource.collection(tasks))
                .where(Expression.property("done").equalTo(.boolean(false)))
                .orderBy(Ordering.property("date").descending())
                .limit(.int(3))
            let results = try await query.execute()
            #expect(results.columnNames == ["id", "title", "name"])
            #expect(results.map { $0.string(forKey: "id") } == ["t4", "t5", "t1"])
            let second = try #require(results.allResults().dropFirst().first)
            #expect(second.string(at: 1) == "Plan trip")
            #expect(second.string(forKey: "name") == "Bo")
            #expect(results.allResults()[0].value(forKey: "name") == nil)  // MISSING: no key
            #expect(results.allResults()[0].toJSON() == #"{"id":"t4","title":"Fix bug"}"#)
            #expect(second.toDictionary() == ["id": "t5", "title": "Plan trip", "name": "Bo"])

            // Offset, and the query unchanged by building on it.
            let page = try await query.limit(.int(2), offset: .int(1)).execute()
            #expect(page.map { $0.string(at: 0) } == ["t5", "t1"])
            #expect(try await query.execute().count == 3)
        }
    }

    @Test(arguments: Backend.available)
    func groupsAggregatesAndHaving(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            let query = try db.createQuery("""
                SELECT list, COUNT(*) AS n, SUM(prio), AVG(prio), MIN(date), MAX(title), COUNT(prio) FROM tasks
                GROUP BY list HAVING COUNT(*) > 1 ORDER BY list
                """)
            let rows = try await query.execute().allResults()
            #expect(rows.map { $0.toArray() } == [
                ["home", 3, 3, 1.5, "2026-01-01", "Plan trip", 2],
                ["work", 2, 3, 3, "2026-01-02", "Write report", 1],
            ])
            #expect(rows[0].keys == ["list", "n", "$1", "$2", "$3", "$4", "$5"])
            let total = try await db.createQuery("SELECT COUNT(*) FROM tasks WHERE prio > 10").execute()
            #expect(total.map { $0.int(at: 0) } == [0])
            let none = try await db.createQuery("SELECT list, COUNT(*) FROM tasks WHERE prio > 10 GROUP BY list").execute()
            #expect(none.count == 0)
        }
    }

    @Test(arguments: Backend.available)
    func sqlAndBuilderAgree(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let tasks = try await populate(db)
            let built = QueryBuilder
                .selectDistinct(SelectResult.property("list"))
                .from(DataSource.collection(tasks))
                .where(ArrayFunction.contains(.property("tags"), value: .string("shop"))
                        .or(Expression.property("title").like(.string("%bug"))))
                .orderBy(Ordering.property("list"))
            let parsed = try db.createQuery(built.description)
            #expect(parsed.plan == built.plan)
            #expect(try await built.execute().map { $0.toArray() } == [["home"], ["work"]])
            #expect(try await parsed.execute().map { $0.toArray() } == [["home"], ["work"]])
        }
    }

    @Test(arguments: Backend.available)
    func parametersMetaAndDeletedDocuments(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let tasks = try await populate(db)
            let t2 = try #require(try await tasks.document(id: "t2"))
            #expect(try await tasks.delete(document: t2))
            try await tasks.setDocumentExpiration(id: "t3", expiration: Date(timeIntervalSince1970: 2_000_000_000))

            let query = try db.createQuery("SELECT meta().id, meta().sequence, meta().revisionID, meta().expiration FROM tasks WHERE prio >= $min ORDER BY meta().id")
            var rows = try await query.execute().allResults()
            #expect(rows.isEmpty)  // $min unbound: MISSING, no row matches
            let parameters = Parameters()
            parameters.setInt(2, forName: "min")
            query.parameters = parameters
            parameters.setInt(99, forName: "min")  // a copy was taken
            rows = try await query.execute().allResults()
            #expect(rows.map { $0.string(at: 0) } == ["t1", "t3"])
            let t3 = try #require(try await tasks.document(id: "t3"))
            #expect(rows[1].int64(forKey: "sequence") == Int64(t3.sequence))
            #expect(rows[1].string(forKey: "revisionID") == t3.revisionID)
            #expect(rows[1].int64(forKey: "expiration") == 2_000_000_000_000)
            #expect(rows[0].value(forKey: "expiration") == nil)

            // Deleted documents only when the query tests meta().deleted.
            let all = try await db.createQuery("SELECT meta().id FROM tasks").execute()
            #expect(all.count == 4)
            let deleted = try await QueryBuilder.select(SelectResult.expression(Meta.id))
                .from(DataSource.collection(tasks)).where(Meta.isDeleted.equalTo(.boolean(true))).execute()
            #expect(deleted.map { $0.string(at: 0) } == ["t2"])
        }
    }

    @Test(arguments: Backend.available)
    func selectAllDecodingAndExplain(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            struct Task: Decodable, Equatable { var title: String; var done: Bool; var prio: Int? }
            let query = try db.createQuery("SELECT * FROM tasks AS t WHERE t.list = 'work' ORDER BY t.title")
            let results = try await query.execute()
            #expect(results.columnNames == ["t"])
            #expect(try results.data(as: Task.self, dataKey: "t") == [
                Task(title: "Fix bug", done: false, prio: nil), Task(title: "Write report", done: false, prio: 3),
            ])
            struct Row: Decodable, Equatable { var id: String; var title: String }
            let rows = try await db.createQuery("SELECT meta().id, title FROM tasks WHERE prio = 1").execute()
            #expect(try rows.data(as: Row.self) == [Row(id: "t2", title: "Call Ann")])

            let plan = try await query.explain()
            #expect(plan.contains("SCAN COLLECTION _default.tasks AS t"))
            #expect(plan.contains("no index"))
            #expect(plan.contains("FILTER (t.list = \"work\")"))
            #expect(plan.contains("SORT BY t.title"))
        }
    }

    @Test(arguments: Backend.available)
    func errors(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            await #expect(throws: PeerSyncError.self) { try await db.createQuery("SELECT a FROM nope").execute() }
            do {
                _ = try await db.createQuery("SELECT a FROM nope").execute()
            } catch let error as PeerSyncError {
                #expect(error.code == .invalidQuery)
                #expect(error.context["collection"] == "_default.nope")
            }
            for sql in ["SELECT title FROM tasks WHERE COUNT(*) > 1", "SELECT title FROM tasks LIMIT 'x'",
                        "SELECT COUNT(MAX(prio)) FROM tasks", "SELECT title FROM tasks WHERE REGEXP_LIKE(title, '(')"] {
                let query = try db.createQuery(sql)
                let error = await #expect(throws: PeerSyncError.self) { try await query.execute() }
                #expect(error?.code == .invalidQuery, "\(sql)")
            }
            #expect(throws: PeerSyncError.self) { try db.createQuery("SELEC title FROM tasks") }
        }
    }

    @Test(arguments: Backend.available)
    func scopesAndTheDefaultCollection(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "items", scope: "app")
            _ = try await c.save(document: MutableDocument(id: "i", data: ["v": 1]))
            _ = try await db.defaultCollection().save(document: MutableDocument(id: "d", data: ["v": 2]))
            #expect(try await db.createQuery("SELECT v FROM app.items").execute().map { $0.int(at: 0) } == [1])
            #expect(try await db.createQuery("SELECT v FROM _").execute().map { $0.int(at: 0) } == [2])
            #expect(try await db.createQuery("SELECT v FROM _default").execute().map { $0.int(at: 0) } == [2])
            #expect(try await db.createQuery("SELECT v FROM _default._default").execute().map { $0.int(at: 0) } == [2])
        }
    }
}
