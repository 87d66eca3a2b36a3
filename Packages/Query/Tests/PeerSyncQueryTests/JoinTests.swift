import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// Joins end to end: the builder's `Join` and SQL++ `JOIN`, on every backend.
@Suite struct JoinTests {
    /// tasks t1…t5 (t4's list does not exist, t5 has none), lists L1, L2 (L3 empty, L9 deleted).
    func populate(_ db: Database) async throws -> (tasks: Collection, lists: Collection) {
        let tasks = try await db.createCollection(name: "tasks")
        let lists = try await db.createCollection(name: "lists")
        for (id, body) in [("L1", ["name": "Home", "rank": 2] as [String: JSONValue]), ("L2", ["name": "Work", "rank": 1]),
                           ("L3", ["name": "Empty", "rank": 3]), ("L9", ["name": "Gone"])] {
            _ = try await lists.save(document: MutableDocument(id: id, data: body))
        }
        _ = try await lists.delete(document: try #require(try await lists.document(id: "L9")))
        for (id, body) in [("t1", ["title": "Buy milk", "listID": "L1"] as [String: JSONValue]),
                           ("t2", ["title": "Fix bug", "listID": "L2"]),
                           ("t3", ["title": "Call Ann", "listID": "L1"]),
                           ("t4", ["title": "Lost", "listID": "L7"]),
                           ("t5", ["title": "Loose"]),
                           ("t6", ["title": "In the bin", "listID": "L9"])] {
            _ = try await tasks.save(document: MutableDocument(id: id, data: body))
        }
        return (tasks, lists)
    }

    static func rows(_ results: ResultSet) -> [String] { results.map { $0.toJSON() } }

    @Test(arguments: Backend.available)
    func innerJoinInTheBuilderAndSQL(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let (tasks, lists) = try await populate(db)
            let built = QueryBuilder
                .select(SelectResult.expression(Expression.property("title").from("t")),
                        SelectResult.expression(Expression.property("name").from("l")))
                .from(DataSource.collection(tasks).as("t"))
                .join(Join.join(DataSource.collection(lists).as("l"))
                    .on(Expression.property("listID").from("t").equalTo(Meta.id.from("l"))))
                .orderBy(Ordering.expression(Expression.property("title").from("t")))
            let expected = [#"{"name":"Home","title":"Buy milk"}"#, #"{"name":"Home","title":"Call Ann"}"#,
                            #"{"name":"Work","title":"Fix bug"}"#]
            #expect(JoinTests.rows(try await built.execute()) == expected)
            let sql = try db.createQuery("SELECT t.title, l.name FROM tasks AS t JOIN lists AS l ON t.listID = meta(l).id ORDER BY t.title")
            #expect(sql.plan == built.plan)
            #expect(JoinTests.rows(try await sql.execute()) == expected)
            // INNER JOIN is JOIN; the printed text parses back into the same plan.
            let inner = try db.createQuery("SELECT t.title, l.name FROM tasks t INNER JOIN lists l ON t.listID = meta(l).id ORDER BY t.title")
            #expect(inner.plan == built.plan)
            #expect(try db.createQuery(built.description).plan == built.plan)
            // The lookup by ID is what explain() shows.
            #expect(try await built.explain().contains("one lookup by document ID per row"))
        }
    }

    @Test(arguments: Backend.available)
    func leftOuterJoinKeepsUnmatchedRowsWithMissingValues(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            let query = try db.createQuery("""
                SELECT meta(t).id, l.name, meta(l).id AS lid, l.name IS MISSING AS unmatched
                FROM tasks AS t LEFT OUTER JOIN lists AS l ON t.listID = meta(l).id ORDER BY meta(t).id
                """)
            let results = try await query.execute()
            #expect(JoinTests.rows(results) == [
                #"{"id":"t1","lid":"L1","name":"Home","unmatched":false}"#,
                #"{"id":"t2","lid":"L2","name":"Work","unmatched":false}"#,
                #"{"id":"t3","lid":"L1","name":"Home","unmatched":false}"#,
                #"{"id":"t4","unmatched":true}"#,
                #"{"id":"t5","unmatched":true}"#,
                #"{"id":"t6","unmatched":true}"#,  // its list is deleted
            ])
            #expect(results.allResults()[3].value(forKey: "name") == nil)
            // LEFT JOIN is the same; so is the builder's leftJoin / leftOuterJoin.
            let short = try db.createQuery("SELECT meta(t).id, l.name, meta(l).id AS lid, l.name IS MISSING AS unmatched "
                                           + "FROM tasks AS t LEFT JOIN lists AS l ON t.listID = meta(l).id ORDER BY meta(t).id")
            #expect(short.plan == query.plan)
            #expect(try db.createQuery(query.description).plan == query.plan)
        }
    }

    @Test(arguments: Backend.available)
    func aConditionThatIsNoLookupIsANestedLoop(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            // Each list with the tasks whose title is shorter than the list's rank × 4 (no ID
            // lookup possible), groups and an aggregate over the joined rows.
            let query = try db.createQuery("""
                SELECT meta(l).id AS list, COUNT(t.title) AS n FROM lists AS l
                LEFT JOIN tasks AS t ON LENGTH(t.title) < l.rank * 4 AND t.listID IS VALUED
                GROUP BY meta(l).id ORDER BY meta(l).id
                """)
            #expect(try await query.explain().contains("every document of it, read once per run"))
            // L1 rank 2 → < 8: Fix bug (7), Lost (4); L2 rank 1 → < 4: none (kept, COUNT 0);
            // L3 rank 3 → < 12: all five tasks with a listID (t5 has none).
            #expect(JoinTests.rows(try await query.execute()) == [
                #"{"list":"L1","n":2}"#, #"{"list":"L2","n":0}"#, #"{"list":"L3","n":5}"#,
            ])
        }
    }

    @Test(arguments: Backend.available)
    func crossJoinAndSelfJoinAndStar(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let (tasks, lists) = try await populate(db)
            let cross = QueryBuilder
                .select(SelectResult.expression(Meta.id.from("t")), SelectResult.expression(Meta.id.from("l")))
                .from(DataSource.collection(tasks).as("t"))
                .join(Join.crossJoin(DataSource.collection(lists).as("l")))
                .where(Meta.id.from("t").lessThan(.string("t3")))
                .orderBy(Ordering.expression(Meta.id.from("t")), Ordering.expression(Meta.id.from("l")))
            #expect(try await cross.execute().map { "\($0.string(at: 0)!)-\($0.string(at: 1)!)" }
                    == ["t1-L1", "t1-L2", "t1-L3", "t2-L1", "t2-L2", "t2-L3"])
            #expect(try db.createQuery(cross.description).plan == cross.plan)
            // Two tasks of the same list (a self-join), and `*` columns: unqualified is the FROM
            // source, qualified the named one.
            let pairs = try db.createQuery("""
                SELECT *, b.*, meta(b).id FROM tasks AS a JOIN tasks AS b ON a.listID = b.listID AND meta(a).id < meta(b).id
                """)
            let results = try await pairs.execute()
            #expect(results.columnNames == ["a", "b", "id"])
            #expect(JoinTests.rows(results) == [#"{"a":{"listID":"L1","title":"Buy milk"},"b":{"listID":"L1","title":"Call Ann"},"id":"t3"}"#])
        }
    }

    @Test(arguments: Backend.available)
    func twoJoinsAndParameters(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let (_, _) = try await populate(db)
            let owners = try await db.createCollection(name: "owners")
            _ = try await owners.save(document: MutableDocument(id: "o1", data: ["list": "L1", "who": "Ann"]))
            _ = try await owners.save(document: MutableDocument(id: "o2", data: ["list": "L2", "who": "Bo"]))
            let query = try db.createQuery("""
                SELECT t.title, l.name, o.who FROM tasks t JOIN lists l ON t.listID = meta(l).id
                LEFT JOIN owners o ON o.list = meta(l).id AND o.who != $skip ORDER BY t.title
                """)
            let p = Parameters()
            p.setString("Bo", forName: "skip")
            query.parameters = p
            #expect(JoinTests.rows(try await query.execute()) == [
                #"{"name":"Home","title":"Buy milk","who":"Ann"}"#, #"{"name":"Home","title":"Call Ann","who":"Ann"}"#,
                #"{"name":"Work","title":"Fix bug"}"#,
            ])
            #expect(try db.createQuery(query.description).plan == query.plan)
        }
    }

    @Test(arguments: Backend.available)
    func errors(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            _ = try await populate(db)
            await #expect(throws: PeerSyncError.self) {
                _ = try await db.createQuery("SELECT 1 FROM tasks JOIN nowhere ON 1 = 1").execute()
            }
            #expect(throws: PeerSyncError.self) { _ = try db.createQuery("SELECT 1 FROM tasks JOIN tasks ON 1 = 1") }
            #expect(throws: PeerSyncError.self) { _ = try db.createQuery("SELECT 1 FROM tasks JOIN lists") }  // no ON
            #expect(throws: PeerSyncError.self) { _ = try db.createQuery("SELECT 1 FROM tasks LEFT lists ON 1 = 1") }
            await #expect(throws: PeerSyncError.self) {
                _ = try await db.createQuery("SELECT 1 FROM tasks t JOIN lists l ON COUNT(*) > 1").execute()
            }
        }
    }
}
