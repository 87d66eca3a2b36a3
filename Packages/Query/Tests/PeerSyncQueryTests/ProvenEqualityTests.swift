import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// `WHERE` equalities an index read proves exactly (`AccessPath.proven`): which ones the
/// planner takes, the plan a run evaluates without them, and that the rows stay the scan's.
@Suite struct ProvenEqualityTests {
    func index(_ name: String, _ expressions: [String]) throws -> UsableIndex {
        UsableIndex(name: name, expressions: try expressions.map { try QueryIndexer.installed.compile($0) })
    }

    /// The positions the planner proves for `sql` with `indexes`.
    func proven(_ sql: String, _ indexes: [UsableIndex], _ parameters: [String: JSONValue] = [:]) throws -> [Int] {
        let path = Planner.choose(try SQLParser.parse(sql), parameters: parameters, indexes: indexes)
        #expect(path.index != nil, "\(sql) should use an index")
        return path.proven
    }

    @Test func onlyStringAndBooleanEqualitiesOnPlainPropertiesAreProven() throws {
        let byType = try index("byType", ["type"])
        #expect(try proven("SELECT n FROM _ WHERE type = 'a'", [byType]) == [0])
        #expect(try proven("SELECT n FROM _ WHERE 'a' = type", [byType]) == [0])
        #expect(try proven("SELECT n FROM _ WHERE n > 1 AND type = 'a'", [byType]) == [1])
        #expect(try proven("SELECT n FROM _ WHERE (n > 1 AND v < 2) AND type = true", [byType]) == [2])
        #expect(try proven("SELECT n FROM _ WHERE type = $t", [byType], ["t": .string("a")]) == [0])
        #expect(try proven("SELECT n FROM _ AS d WHERE d.type = 'a'", [byType]) == [0])
        // Two equalities on one expression: the index serves the first, the second is evaluated.
        #expect(try proven("SELECT n FROM _ WHERE type = 'a' AND type = 'b'", [byType]) == [0])
        // Numbers (1 and 1.0 share a key), computed expressions and other restrictions are not proven.
        #expect(try proven("SELECT n FROM _ WHERE type = 1", [byType]) == [])
        #expect(try proven("SELECT n FROM _ WHERE type = $t", [byType], ["t": .int(3)]) == [])
        #expect(try proven("SELECT n FROM _ WHERE type = ['a']", [byType]) == [])
        #expect(try proven("SELECT n FROM _ WHERE type >= 'a'", [byType]) == [])
        #expect(try proven("SELECT n FROM _ WHERE type IN ('a')", [byType]) == [])
        #expect(try proven("SELECT n FROM _ WHERE type LIKE 'a%'", [byType]) == [])
        #expect(try proven("SELECT n FROM _ WHERE lower(type) = 'a'", [try index("byLower", ["lower(type)"])]) == [])
        // Nested paths; equalities on the leading expressions before a range on the next one.
        #expect(try proven("SELECT n FROM _ WHERE a.b = 'x'", [try index("byAB", ["a.b"])]) == [0])
        #expect(try proven("SELECT n FROM _ WHERE t[0] = false", [try index("byT0", ["t[0]"])]) == [0])
        let byKindTypeN = try index("byKTN", ["kind", "type", "n"])
        #expect(try proven("SELECT n FROM _ WHERE n > 3 AND type = 'a' AND kind = 'k'", [byKindTypeN]) == [1, 2])
        #expect(try proven("SELECT n FROM _ WHERE kind = 'k' AND type = 2 AND n = 'z'", [byKindTypeN]) == [0, 2])
    }

    @Test func theResidualPlanDropsTheProvenConditionsAndWhatOnlyTheyRead() throws {
        let plan = try SQLParser.parse("SELECT meta().id, n FROM _ WHERE n > 1 AND type = 'a' AND k = 'z'")
        let expected = try SQLParser.parse("SELECT meta().id, n FROM _ WHERE n > 1 AND k = 'z'").whereClause
        #expect(Planner.residual(plan.whereClause, removing: [1]) == expected)
        #expect(Planner.residual(plan.whereClause, removing: [0, 1, 2]) == nil)
        #expect(Planner.residual(plan.whereClause, removing: []) == plan.whereClause)

        let query = try SQLParser.parse("SELECT meta().id, n FROM _ WHERE type = 'a'")
        let path = Planner.choose(query, parameters: [:], indexes: [try index("byType", ["type"])])
        #expect(path.proven == [0])
        let residuals = ResidualPlans()
        let residual = residuals.plan(for: path.proven, query)
        #expect(residual.plan.whereClause == nil)
        #expect(residual.plan.readProperties == ["n"])   // `type` is not parsed from fetched bodies
        #expect(residual.facts.readProperties != nil)
        #expect(residuals.plan(for: path.proven, query) === residual)   // kept, not made again
        // Nothing proven (a scan): `execute()` runs the query's own plan, no residual.
        #expect(Planner.choose(query, parameters: [:], indexes: []).proven.isEmpty)
    }

    /// Stored values around the proven equalities (bytes that escape, canonically equivalent
    /// strings with other bytes, other types, MISSING and NULL): the indexed collection's rows
    /// equal the unindexed one's, in order.
    @Test(arguments: Backend.available)
    func provenEqualitiesGiveTheScansRows(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let indexed = try await db.createCollection(name: "docs")
            let plain = try await db.createCollection(name: "plain")
            try await indexed.createIndex(withName: "byType", config: ValueIndexConfiguration(["type"]))
            try await indexed.createIndex(withName: "byKindType", config: ValueIndexConfiguration(["kind", "type"]))
            let types: [JSONValue?] = [
                .string("a"), .string("a\u{0}"), .string("a\u{1}b"), .string("\u{E9}"), .string("e\u{301}"), .string(""),
                .string("A"), .bool(true), .bool(false), .int(1), .double(1.5), .string("1"), .null, nil,
                .array([.string("a")]), .object(["a": .string("a")]), .string("a"),
            ]
            for (i, type) in types.enumerated() {
                var data: [String: JSONValue] = ["n": .int(Int64(i)), "kind": .string(i % 2 == 0 ? "even" : "odd")]
                if let type { data["type"] = type }
                for collection in [indexed, plain] {
                    _ = try await collection.save(document: MutableDocument(id: String(format: "d%02d", i), data: data))
                }
            }
            // A changed and a deleted document: their old entries are gone.
            for collection in [indexed, plain] {
                _ = try await collection.save(document: MutableDocument(id: "d00", data: ["type": "b", "n": 0]))
                if let doc = try await collection.document(id: "d16") { _ = try await collection.delete(document: doc) }
            }
            let queries: [(String, [String: JSONValue])] = [
                ("SELECT meta().id, n FROM docs WHERE type = 'a'", [:]),
                ("SELECT meta().id, type FROM docs WHERE type = 'a\\u0000'", [:]),
                ("SELECT meta().id FROM docs WHERE type = 'é'", [:]),
                ("SELECT meta().id FROM docs WHERE type = $t", ["t": .string("e\u{301}")]),
                ("SELECT meta().id FROM docs WHERE type = ''", [:]),
                ("SELECT meta().id, type FROM docs WHERE type = true", [:]),
                ("SELECT meta().id FROM docs WHERE false = type", [:]),
                ("SELECT meta().id FROM docs WHERE type = 'a' AND type = 'b'", [:]),
                ("SELECT meta().id FROM docs WHERE type = 'b' AND n < 5", [:]),
                ("SELECT meta().id, n FROM docs WHERE n >= 0 AND kind = 'odd' AND type = 'a\\u0001b' ORDER BY n DESC", [:]),
                ("SELECT kind, COUNT(*) AS c FROM docs WHERE kind = 'even' AND type = true GROUP BY kind", [:]),
                ("SELECT meta().id FROM docs WHERE type = 'A' OR n = 3", [:]),
                ("SELECT COUNT(*) AS c FROM docs WHERE type = 'zzz'", [:]),
            ]
            for (sql, parameters) in queries {
                func rows(_ collection: String) async throws -> [String] {
                    let query = try db.createQuery(sql.replacingOccurrences(of: "FROM docs", with: "FROM \(collection)"))
                    if !parameters.isEmpty {
                        let bound = Parameters()
                        for (name, value) in parameters { bound.setValue(value, forName: name) }
                        query.parameters = bound
                    }
                    return try await query.execute().map { $0.toJSON() }
                }
                let expected = try await rows("plain")
                // Twice: the second run reuses the plan and the residual plan.
                #expect(try await rows("docs") == expected, "\(sql)")
                #expect(try await rows("docs") == expected, "\(sql)")
            }
        }
    }
}
