import PeerSyncCore
import Testing
@testable import PeerSyncQuery

@Suite struct ParserTests {
    func plan(_ sql: String) throws -> QueryPlan { try SQLParser.parse(sql) }

    @Test func parsesTheSubset() throws {
        let p = try plan("""
            SELECT DISTINCT meta().id, t.name AS n, COUNT(*), tags[0] FROM app.tasks AS t
            WHERE t.done = false AND (prio >= 2 OR title LIKE 'A%') AND NOT x IN [1, 2]
              AND y BETWEEN 1 AND 5 AND z IS NOT MISSING AND w IS VALUED
            GROUP BY t.name HAVING COUNT(*) > $min ORDER BY n DESC, meta().id LIMIT 10 OFFSET 5;
            """)
        #expect(p.distinct)
        #expect(p.source == SourceName(scope: "app", collection: "tasks", alias: "t"))
        #expect(p.columnNames == ["id", "n", "$1", "tags"])
        #expect(p.columns[1].expression == .property([.key("name")], alias: "t"))
        #expect(p.groupBy == [.property([.key("name")], alias: "t")])
        #expect(p.orderBy.map(\.descending) == [true, false])
        #expect(p.limit == .literal(10))
        #expect(p.offset == .literal(5))
        #expect(p.parameterNames == ["min"])
    }

    @Test func precedence() throws {
        let p = try plan("SELECT a FROM _ WHERE NOT a = 1 OR b + 2 * 3 < -4 AND c || 'x' = 'yx'")
        let expected: ExpressionNode = .binary(.or,
            .not(.binary(.equal, .property([.key("a")], alias: nil), .literal(1))),
            .binary(.and,
                .binary(.less, .binary(.add, .property([.key("b")], alias: nil), .binary(.multiply, .literal(2), .literal(3))), .literal(-4)),
                .binary(.equal, .binary(.concat, .property([.key("c")], alias: nil), .literal("x")), .literal("yx"))))
        #expect(p.whereClause == expected)
        #expect(p.source.collection == "_default" && p.source.scope == nil)
    }

    @Test func sourcesAndColumnNames() throws {
        #expect(try plan("SELECT * FROM _").columnNames == ["_default"])
        #expect(try plan("SELECT * FROM _default").columnNames == ["_default"])
        #expect(try plan("SELECT * FROM tasks").columnNames == ["tasks"])
        #expect(try plan("SELECT tasks.* FROM tasks").columns[0].expression == .all(alias: "tasks"))
        #expect(try plan("SELECT a.b.c, a + 1, a + 2, `odd name` FROM _default._default").columnNames == ["c", "$1", "$2", "odd name"])
        #expect(try plan("SELECT x, x FROM s.c").columnNames == ["x", "x #2"])
    }

    @Test func syntaxErrorsCarryTheirPosition() throws {
        func failure(_ sql: String) -> (PeerSyncError?, QuerySyntaxError?) {
            do { _ = try SQLParser.parse(sql); return (nil, nil) } catch {
                return (error, error.detail(as: QuerySyntaxError.self))
            }
        }
        let (e1, d1) = failure("SELECT a FROM _ WHERE a = = 2")
        #expect(e1?.code == .invalidQuery)
        #expect(d1 == QuerySyntaxError(offset: 26, line: 1, column: 27))
        #expect(e1?.message.contains("expected an expression") == true)
        let (_, d2) = failure("SELECT a\nFROM _\nWHERE 'open")
        #expect(d2 == QuerySyntaxError(offset: 22, line: 3, column: 7))
        let (e3, d3) = failure("SELECT a FROM _ WHERE nope(a)")
        #expect(e3?.message.contains("unknown function nope()") == true)
        #expect(d3?.offset == 22)
        #expect(failure("SELECT a").1?.offset == 8)
        #expect(failure("SELECT a FROM _ LIMIT").0?.code == .invalidQuery)
        #expect(failure("SELECT a FROM _ WHERE LOWER(a, b)").0?.message.contains("LOWER") == true)
        // Joins: ON is required except for CROSS JOIN; LEFT needs JOIN; two sources need two names.
        #expect(failure("SELECT a FROM x JOIN y").0?.message.contains("expected ON") == true)
        #expect(failure("SELECT a FROM x LEFT y ON a = b").0?.message.contains("expected JOIN") == true)
        let (e4, d4) = failure("SELECT a FROM x JOIN x ON a = b")
        #expect(e4?.message.contains("used twice") == true)
        #expect(d4?.offset == 16)
    }

    @Test func printedPlansParseBackToTheSamePlan() throws {
        let texts = [
            "SELECT DISTINCT meta().id, t.name AS n, COUNT(*), tags[-1] FROM app.tasks AS t WHERE t.done = false AND x NOT IN [1, 'a', $p]",
            "SELECT a IS NULL, a IS (NULL), a IS NOT MISSING, -a, -(1), 1 - -1, 'it''s', \"q\\\"\", {\"k\": [1, 2.5, null]} FROM _",
            "SELECT LOWER(s), ROUND(n, 2), ARRAY_CONTAINS(t, 3), REGEXP_LIKE(s, '^a'), s NOT LIKE 'a\\\\%' FROM c ORDER BY s DESC LIMIT $l OFFSET 2",
            "SELECT k, SUM(n), AVG(n) FROM c WHERE n BETWEEN 1 AND 2.5e3 GROUP BY k HAVING MAX(n) > 1 ORDER BY COUNT(*)",
        ]
        for text in texts {
            let first = try plan(text)
            let printed = SQLPrinter.query(first)
            #expect(try plan(printed) == first, "\(printed)")
        }
    }
}
