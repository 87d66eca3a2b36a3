import PeerSyncCore
import PeerSyncDatabase
import PeerSyncQuery
import Testing

/// The README's example, as written there (with `print` collecting lines).
@Suite struct ReadmeExampleTests {
    @Test func readmeExampleRuns() async throws {
        try await withDatabase(.memory) { db in
            var printed: [String] = []
            func print(_ items: Any...) { printed.append(items.map { "\($0)" }.joined(separator: " ")) }

            let tasks = try await db.createCollection(name: "tasks")
            _ = try await tasks.save(document: MutableDocument(id: "t1", data: ["title": "Buy milk", "done": false, "date": "2026-01-03"]))
            _ = try await tasks.save(document: MutableDocument(id: "t2", data: ["title": "Call Ann", "done": true, "date": "2026-01-01"]))

            // The builder …
            let query = QueryBuilder
                .select(SelectResult.expression(Meta.id), SelectResult.property("title"))
                .from(DataSource.collection(tasks))
                .where(QueryExpression.property("done").equalTo(.parameter("done")))
                .orderBy(Ordering.property("date").descending())
                .limit(.int(20))
            let parameters = Parameters()
            parameters.setBoolean(false, forName: "done")
            query.parameters = parameters
            for row in try await query.execute() {
                print(row.string(forKey: "id")!, row.string(forKey: "title")!)   // t1 Buy milk
            }

            // … or SQL++; syntax errors carry their position.
            let counts = try db.createQuery("SELECT done, COUNT(*) AS n FROM tasks GROUP BY done ORDER BY done")
            for row in try await counts.execute() { print(row.toJSON()) }      // {"done":false,"n":1} …
            struct Task: Decodable { var title: String; var done: Bool }
            let all = try await db.createQuery("SELECT * FROM tasks AS t ORDER BY t.title").execute()
            let decoded = try all.data(as: Task.self, dataKey: "t")
            print(decoded.map(\.title), try await counts.explain())

            #expect(printed.prefix(3) == ["t1 Buy milk", #"{"done":false,"n":1}"#, #"{"done":true,"n":1}"#])
            #expect(printed.last?.hasPrefix(#"["Buy milk", "Call Ann"] SELECT done, COUNT(*) AS n FROM tasks"#) == true)
        }
    }
}
