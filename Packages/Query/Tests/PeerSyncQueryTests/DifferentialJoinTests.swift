#if SQLite && canImport(PeerSyncSQLiteBaseline)
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncSQLiteBaseline
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// The differential test of joins: seeded documents in two collections (`m`, whose documents
/// hold a `ref` to a document of `r` — or a dangling one, a number, nothing) and seeded queries
/// `FROM m [INNER | LEFT OUTER | CROSS] JOIN r ON …` (lookups by `meta(r).id`, with or without
/// a further condition, and conditions that need a nested loop) with the columns, filters,
/// orders, groups and aggregates of ``DifferentialTests``, each property qualified with `m`,
/// `r` or nothing at random. Compared with SQLite joining two JSON tables (`docs`, `lists`) with
/// the same oracle (``SQLiteOracle``; an unmatched left outer row has SQL NULL columns, which
/// the oracle reads as MISSING). Deleted documents of `r` never join (`R.deleted = 0`).
///
/// `PEERSYNC_QUERY_DIFF_JOIN_COUNT` sets the number of queries (default 300);
/// `PEERSYNC_QUERY_DIFF_SEED` the seed (default 14).
@Suite struct DifferentialJoinTests {
    static var count: Int { ProcessInfo.processInfo.environment["PEERSYNC_QUERY_DIFF_JOIN_COUNT"].flatMap(Int.init) ?? 300 }

    @Test func joinsMatchSQLite() async throws {
        let backends = Backend.onDisk
        try #require(!backends.isEmpty, "no on-disk backend enabled")
        var generator = Generator(seed: DifferentialTests.seed &+ 1)
        var rights = generator.documents(count: 40)
        for i in rights.indices { rights[i].id = String(format: "r%03d", i) }
        var lefts = generator.documents(count: 90)
        for i in lefts.indices {
            switch generator.int(0...9) {
            case 0: break
            case 1: lefts[i].body["ref"] = .int(Int64(i))
            case 2: lefts[i].body["ref"] = .string("nowhere")
            default: lefts[i].body["ref"] = .string(String(format: "r%03d", generator.int(0...44)))
            }
        }
        let specs = (0..<DifferentialJoinTests.count).map { _ in generator.joinQuery() }

        var checked = 0
        var nonEmpty = 0
        var mismatches: [String] = []
        for backend in backends {
            try await withDatabase(backend) { db in
                let m = try await db.createCollection(name: "m", scope: "diff")
                let r = try await db.createCollection(name: "r", scope: "diff")
                let rightOracle = try await DifferentialTests.load(rights, into: r)
                let oracle = try await DifferentialTests.load(lefts, into: m)
                // The joined table: `r`'s rows as the oracle loaded them, copied over.
                let rightRows = try rightOracle.query("SELECT id, seq, rev, deleted, expiration, body FROM docs")
                try rightOracle.close()
                try oracle.execute("""
                    CREATE TABLE lists (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, rev TEXT NOT NULL,
                        deleted INTEGER NOT NULL, expiration INTEGER, body TEXT NOT NULL)
                    """)
                for row in rightRows {
                    func sql(_ v: SQLiteValue) -> String {
                        switch v {
                        case .null: return "NULL"
                        case .integer(let i): return String(i)
                        case .real(let d): return String(d)
                        case .text(let t): return SQLiteOracle.Compiler.quote(t)
                        case .blob: return "NULL"
                        }
                    }
                    try oracle.execute("INSERT INTO lists VALUES (\(row.map(sql).joined(separator: ", ")))")
                }
                for (i, spec) in specs.enumerated() {
                    if mismatches.count >= 5 { break }
                    let built = spec.build(m, r)
                    let sql = built.description
                    let parsed = try db.createQuery(sql)
                    if parsed.plan != built.plan {
                        mismatches.append("join query \(i) does not parse back to itself: \(sql)")
                        continue
                    }
                    let parameters = Parameters()
                    for (name, value) in spec.spec.parameters { parameters.setValue(value, forName: name) }
                    built.parameters = parameters
                    let ours = try await built.execute().map { Array($0.values) }
                    let oracleSQL = SQLiteOracle.compile(built.plan, parameters: spec.spec.parameters)
                    let theirs: [[JSONValue?]]
                    do {
                        theirs = try oracle.query(oracleSQL).map { row in try row.map(SQLiteOracle.value) }
                    } catch {
                        mismatches.append("join query \(i): SQLite failed: \(error)\n  \(sql)\n  \(oracleSQL)")
                        continue
                    }
                    let ordered = !built.plan.orderBy.isEmpty
                    let a = DifferentialTests.canonical(ours, ordered: ordered)
                    let b = DifferentialTests.canonical(theirs, ordered: ordered)
                    if a != b {
                        var first = 0
                        while first < a.count, first < b.count, a[first] == b[first] { first += 1 }
                        mismatches.append("""
                            join query \(i) on \(backend.rawValue): \(sql)
                              parameters: \(spec.spec.parameters)
                              rows: \(a.count) (PeerSync), \(b.count) (SQLite); first difference at row \(first)
                              PeerSync: \(a.dropFirst(first).prefix(3))
                              SQLite:   \(b.dropFirst(first).prefix(3))
                              oracle SQL: \(oracleSQL.prefix(1500))
                            """)
                    }
                    if backend == backends[0], !a.isEmpty { nonEmpty += 1 }
                    checked += 1
                }
                try oracle.close()
            }
        }
        print("query join differential: \(checked) query runs (\(specs.count) join queries × \(backends.map(\.rawValue).joined(separator: ", "))), "
              + "\(nonEmpty) with rows, \(mismatches.count) mismatches")
        #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n\n"))")
        #expect(checked == specs.count * backends.count)
        #expect(nonEmpty * 3 > specs.count)  // joins filter more: a third return rows
    }
}

extension SQLiteOracle {
    /// The rows of a plan's one join, as common table expressions: `docs`' columns for the
    /// `FROM` source and `lists`' columns prefixed `r_` (SQL NULL for an unmatched left outer
    /// row). Every pair of `docs` and live `lists` rows (`R.deleted = 0`), the `ON` condition
    /// computed in layers as ``compile(_:parameters:)`` computes expressions (`jm`: the pairs
    /// it holds for), then for a left outer join the `docs` rows without a pair (`jb`).
    /// Returns the definitions and the name of the last one.
    static func joinBase(_ plan: QueryPlan, parameters: [String: JSONValue]) -> ([String], String) {
        guard let join = plan.joins.first else { return ([], "docs") }
        var c = Compiler(parameters: parameters)
        c.rightAlias = join.source.alias ?? join.source.collection
        let columns = "id, seq, rev, deleted, expiration, body, r_id, r_seq, r_rev, r_deleted, r_expiration, r_body"
        var ctes = ["j0 AS MATERIALIZED (SELECT L.*, R.id AS r_id, R.seq AS r_seq, R.rev AS r_rev, R.deleted AS r_deleted, "
            + "R.expiration AS r_expiration, R.body AS r_body FROM docs AS L JOIN lists AS R ON R.deleted = 0)"]
        var previous = "j0"
        if let on = join.on {
            var heights: [ExpressionNode: Int] = [:]
            @discardableResult
            func visit(_ node: ExpressionNode) -> Int {
                if let h = heights[node] { return h }
                let h = node.children.map { visit($0) }.max().map { $0 + 1 } ?? 0
                heights[node] = h
                return h
            }
            visit(on)
            for h in 0...(heights.values.max() ?? 0) {
                var layer: [String] = []
                for (node, height) in heights where height == h {
                    if case .literal = node { continue }
                    if case .parameter = node { continue }
                    let name = "o\(c.columns.count)"
                    layer.append("\(c.json(node)) AS \(name)")
                    c.columns[node] = name
                }
                if layer.isEmpty { continue }
                ctes.append("j\(ctes.count) AS MATERIALIZED (SELECT *, \(layer.joined(separator: ", ")) FROM \(previous))")
                previous = "j\(ctes.count - 1)"
            }
            ctes.append("jm AS MATERIALIZED (SELECT \(columns) FROM \(previous) WHERE \(c.truth(c.json(on))) = 1)")
        } else {
            ctes.append("jm AS MATERIALIZED (SELECT \(columns) FROM j0)")
        }
        guard join.kind == .leftOuter else { return (ctes, "jm") }
        ctes.append("jb AS MATERIALIZED (SELECT \(columns) FROM jm UNION ALL SELECT id, seq, rev, deleted, expiration, body, "
            + "NULL, NULL, NULL, NULL, NULL, NULL FROM docs WHERE id NOT IN (SELECT id FROM jm))")
        return (ctes, "jb")
    }
}

extension Generator {
    /// A generated join query over collections `m` (aliased `m`) and `r` (aliased `r`).
    struct JoinSpec {
        var spec: Spec
        var kind: JoinClause.Kind
        var on: Expression?

        func build(_ m: Collection, _ r: Collection) -> Query {
            let right = DataSource.collection(r).as("r")
            let join: Join
            switch kind {
            case .inner: join = Join.join(right).on(on!)
            case .leftOuter: join = Join.leftOuterJoin(right).on(on!)
            case .cross: join = Join.crossJoin(right)
            }
            var query = (spec.distinct ? QueryBuilder.selectDistinct(spec.columns) : QueryBuilder.select(spec.columns))
                .from(DataSource.collection(m).as("m"))
                .join(join)
            if let whereClause = spec.whereClause { query = query.where(whereClause) }
            if !spec.groupBy.isEmpty { query = query.groupBy(spec.groupBy) }
            if let having = spec.having { query = query.having(having) }
            if !spec.orderBy.isEmpty { query = query.orderBy(spec.orderBy) }
            if let limit = spec.limit { query = query.limit(.int(limit), offset: spec.offset.map { .int($0) }) }
            return query
        }
    }

    /// Qualifies the properties and metadata of `node` with `m`, `r` or nothing, at random.
    mutating func qualify(_ node: ExpressionNode) -> ExpressionNode {
        switch node {
        case .property(let path, _): return .property(path, alias: pick([nil, "m", "r", "r"]))
        case .meta(let key, _): return .meta(key, alias: pick([nil, "m", "r"]))
        case .all: return node  // COUNT(*)
        case .literal, .parameter: return node
        case .negate(let e): return .negate(qualify(e))
        case .not(let e): return .not(qualify(e))
        case .binary(let op, let l, let r): return .binary(op, qualify(l), qualify(r))
        case .between(let a, let b, let c): return .between(qualify(a), qualify(b), qualify(c))
        case .in(let e, let list): return .in(qualify(e), list.map { qualify($0) })
        case .test(let e, let t): return .test(qualify(e), t)
        case .function(let f, let args): return .function(f, args.map { qualify($0) })
        case .aggregate(let a, let arg): return .aggregate(a, qualify(arg))
        case .array(let items): return .array(items.map { qualify($0) })
        }
    }

    mutating func qualified(_ e: Expression) -> Expression { Expression(qualify(e.node)) }

    mutating func joinQuery() -> JoinSpec {
        var spec = query()
        // No `meta().deleted` (deleted documents of the FROM source stay out; the oracle's
        // base keeps `r`'s out too), then every path qualified at random.
        while spec.whereClause.map({ $0.node.contains { if case .meta(.deleted, _) = $0 { return true }; return false } }) == true {
            spec = query()
        }
        // Group keys (and DISTINCT columns) are qualified once: the same expression wherever
        // they appear (column, GROUP BY, ORDER BY), so that every ORDER BY key stays a key.
        var keys: [ExpressionNode: ExpressionNode] = [:]
        for key in spec.groupBy.map(\.node) + (spec.distinct ? spec.columns.map(\.column.expression) : []) where keys[key] == nil {
            keys[key] = qualify(key)
        }
        func q(_ node: ExpressionNode) -> ExpressionNode {
            if let key = keys[node] { return key }
            return qualify(node)
        }
        spec.columns = spec.columns.map { column in
            if case .all = column.column.expression { return chance(0.5) ? SelectResult.all().from("r") : column }
            return SelectResult(column: SelectColumn(expression: q(column.column.expression), alias: column.column.alias))
        }
        spec.whereClause = spec.whereClause.map { Expression(q($0.node)) }
        spec.groupBy = spec.groupBy.map { Expression(q($0.node)) }
        spec.having = spec.having.map { Expression(q($0.node)) }
        spec.orderBy = spec.orderBy.map { Ordering(key: OrderKey(expression: q($0.key.expression), descending: $0.key.descending)) }
        // A plain ORDER BY ends with both IDs (a total order: the sorted and the limited rows
        // are the same on both sides); grouped and DISTINCT ones order by every key already.
        if !spec.orderBy.isEmpty && spec.groupBy.isEmpty && !spec.distinct && !spec.columns.contains(where: { $0.column.expression.containsAggregate }) {
            spec.orderBy.append(.expression(Meta.id.from("m")))
            spec.orderBy.append(.expression(Meta.id.from("r")))
        }
        let lookup = Expression.property("ref").from("m").equalTo(Meta.id.from("r"))
        let kind: JoinClause.Kind = pick([.inner, .inner, .leftOuter, .leftOuter, .leftOuter, .cross])
        var on: Expression?
        if kind != .cross {
            switch int(0...5) {
            case 0, 1: on = lookup
            case 2: on = lookup.and(qualified(condition(1)))
            case 3: on = Meta.id.from("r").equalTo(.property("ref").from("m")).and(qualified(condition(0)))
            case 4: on = Expression.property("k").from("m").equalTo(.property("k").from("r"))
            default: on = Expression(qualify(condition(1).node))
            }
        }
        if kind == .cross || (on.map { DocumentScan.lookupKey($0.node, name: "r") == nil } ?? true) {
            // Nested loops and cross joins make many rows: keep them filtered.
            let filter = Expression.property("n").from("m").lessThan(.int(int(0...6)))
            spec.whereClause = spec.whereClause.map { $0.and(filter) } ?? filter
        }
        return JoinSpec(spec: spec, kind: kind, on: on)
    }
}
#endif
