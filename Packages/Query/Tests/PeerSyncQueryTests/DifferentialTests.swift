#if SQLite && canImport(PeerSyncSQLiteBaseline)
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncSQLiteBaseline
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// The differential test of issue 14: seeded random documents and seeded random queries, each
/// run through PeerSync (built with `QueryBuilder`; its SQL++ text must parse back into the
/// same plan, and every tenth is run from that text too; on every on-disk backend) and through an equivalent hand-written SQL query over the same JSON
/// in a plain SQLite table (`SQLiteJSONDocuments`), using SQLite's own JSON functions
/// (`->`, `json_type`, `json_extract`, `json_each`, `json_array_length`). Results must be
/// identical.
///
/// `PEERSYNC_QUERY_DIFF_COUNT` sets the number of queries (default 1,000, a few seconds);
/// `PEERSYNC_QUERY_DIFF_SEED` the seed (default 14).
///
/// Where SQL++ for Mobile's rules differ from SQLite's, the oracle (``SQLiteOracle``) spells
/// SQL++'s rule out in SQL:
/// - MISSING vs NULL: SQLite has only NULL. The oracle carries every value as JSON text
///   (`body -> '$.path'`), SQL NULL meaning MISSING and the text `null` meaning JSON null, and
///   writes each operator as a `CASE` that returns MISSING before NULL.
/// - Booleans: `json_extract` turns `true` into 1, so `true = 1` in SQLite; the oracle compares
///   type ranks (`json_type`) first, so values of different types follow the collation
///   (MISSING < null < false < true < numbers < strings < arrays < objects).
/// - Conditions: SQL's three-valued logic has one unknown; the oracle's truth codes keep
///   MISSING and NULL apart (`false AND MISSING` is false, `true AND MISSING` is MISSING).
/// - `LIKE` is case-insensitive in SQLite by default: the oracle sets `case_sensitive_like`.
/// - `MIN`/`MAX` over mixed types: by type rank first, then by value within the type.
/// - `SUM`/`AVG` skip non-numbers (SQLite would read `'12'` as 12).
/// - `GROUP BY`/`DISTINCT` on JSON text keeps MISSING, null, false and 0 apart.
/// - Numbers leave SQLite as `printf('%!.17g')` text, which round-trips doubles exactly.
///
/// What the oracle cannot express, and the generator therefore avoids (unit-tested instead):
/// ordering arrays/objects among themselves (SQLite compares their text), `LOWER`/`UPPER` of
/// non-ASCII letters (SQLite folds ASCII only: the generated Unicode strings are caseless
/// scripts and emoji), `TRIM` of white space other than spaces, `ROUND` with digits,
/// division and modulo (integer division in SQLite), `REGEXP_LIKE` (no regex in SQLite), and
/// strings that differ only by Unicode normalization (Swift's `==` equates them).
@Suite struct DifferentialTests {
    static var count: Int { ProcessInfo.processInfo.environment["PEERSYNC_QUERY_DIFF_COUNT"].flatMap(Int.init) ?? 1_000 }
    static var seed: UInt64 { ProcessInfo.processInfo.environment["PEERSYNC_QUERY_DIFF_SEED"].flatMap(UInt64.init) ?? 14 }

    @Test func peerSyncMatchesSQLite() async throws {
        let backends = Backend.onDisk
        try #require(!backends.isEmpty, "no on-disk backend enabled")
        var generator = Generator(seed: DifferentialTests.seed)
        let documents = generator.documents(count: 150)
        var queries = (0..<DifferentialTests.count).map { _ in generator.query() }
        // Then queries an index of the indexed copy covers (answered from its entries).
        queries += (0..<max(20, DifferentialTests.count / 5)).map { _ in generator.coveringQuery() }

        var answers: [[String]] = Array(repeating: [], count: queries.count)  // per query: the first backend's rows
        var checked = 0
        var indexedRuns = 0
        var coveredRuns = 0
        var mismatches: [String] = []
        for backend in backends {
            try await withDatabase(backend) { db in
                let collection = try await db.createCollection(name: "docs", scope: "diff")
                let oracle = try await DifferentialTests.load(documents, into: collection)
                // The same documents again in a collection with value indexes on the generated
                // properties: two created before the documents are saved (kept up by each
                // save, delete and expiration), the others built from the saved documents.
                let indexed = try await db.createCollection(name: "indexed", scope: "diff")
                for (name, expressions) in DifferentialTests.indexes.prefix(2) {
                    try await indexed.createIndex(withName: name, config: ValueIndexConfiguration(expressions))
                }
                try await DifferentialTests.load(documents, into: indexed).close()
                for (name, expressions) in DifferentialTests.indexes.dropFirst(2) {
                    try await indexed.createIndex(withName: name, config: ValueIndexConfiguration(expressions))
                }
                for (i, spec) in queries.enumerated() {
                    if mismatches.count >= 5 { break }
                    let built = spec.build(collection)
                    let sql = built.description
                    let parsed = try db.createQuery(sql)
                    if parsed.plan != built.plan {
                        mismatches.append("query \(i) does not parse back to itself: \(sql)")
                        continue
                    }
                    let parameters = Parameters()
                    for (name, value) in spec.parameters { parameters.setValue(value, forName: name) }
                    built.parameters = parameters
                    parsed.parameters = parameters
                    // The SQL++ text parsed back is the same plan (checked above), so running it
                    // too would run the same plan twice; run it on every tenth query only.
                    let ours = try await built.execute().map { Array($0.values) }
                    let withIndexes = spec.build(indexed)
                    withIndexes.parameters = parameters
                    let oursIndexed = try await withIndexes.execute().map { Array($0.values) }
                    let plan = try await withIndexes.explain()
                    if plan.contains("USING INDEX") { indexedRuns += 1 }
                    if plan.contains("COVERING INDEX") { coveredRuns += 1 }
                    let oursParsed = i % 10 == 0 ? try await parsed.execute().map { Array($0.values) } : ours
                    let oracleSQL = SQLiteOracle.compile(built.plan, parameters: spec.parameters)
                    let theirs: [[JSONValue?]]
                    do {
                        theirs = try oracle.query(oracleSQL).map { row in try row.map(SQLiteOracle.value) }
                    } catch {
                        mismatches.append("query \(i): SQLite failed: \(error)\n  \(sql)\n  \(oracleSQL)")
                        continue
                    }
                    let ordered = !built.plan.orderBy.isEmpty
                    let a = DifferentialTests.canonical(ours, ordered: ordered)
                    let b = DifferentialTests.canonical(theirs, ordered: ordered)
                    let c = DifferentialTests.canonical(oursParsed, ordered: ordered)
                    // With indexes: the same rows in the same order, ordered query or not.
                    let scanned = DifferentialTests.canonical(ours, ordered: true)
                    let viaIndex = DifferentialTests.canonical(oursIndexed, ordered: true)
                    if scanned != viaIndex {
                        let explain = (try? await withIndexes.explain()) ?? ""
                        mismatches.append("query \(i) on \(backend.rawValue) (seed \(DifferentialTests.seed)) differs with indexes: \(sql)\n"
                                          + "  parameters: \(spec.parameters)\n  scan:    \(scanned.prefix(5))\n"
                                          + "  indexed: \(viaIndex.prefix(5))\n  plan: \(explain)")
                    }
                    if a != b || a != c {
                        // The first row where the answers part, and a few rows from there.
                        var first = 0
                        while first < a.count, first < b.count, first < c.count, a[first] == b[first], a[first] == c[first] { first += 1 }
                        mismatches.append("""
                            query \(i) on \(backend.rawValue) (seed \(DifferentialTests.seed)): \(sql)
                              parameters: \(spec.parameters)
                              rows: \(a.count) (builder), \(c.count) (SQL++), \(b.count) (SQLite); first difference at row \(first)
                              PeerSync (builder): \(a.dropFirst(first).prefix(3))
                              PeerSync (SQL++):   \(c.dropFirst(first).prefix(3))
                              SQLite:             \(b.dropFirst(first).prefix(3))
                              oracle SQL: \(oracleSQL.prefix(1500))
                            """)
                    } else if backend != backends[0], answers[i] != a {
                        mismatches.append("query \(i): \(backend.rawValue) differs from \(backends[0].rawValue): \(sql)")
                    }
                    if backend == backends[0] { answers[i] = a }
                    checked += 1
                }
                try oracle.close()
            }
        }
        let nonEmpty = answers.filter { !$0.isEmpty }.count
        print("query differential: \(checked) query runs (\(queries.count) queries × \(backends.map(\.rawValue).joined(separator: ", "))), "
              + "\(nonEmpty) with rows, \(indexedRuns) runs used a value index (\(coveredRuns) covering), \(mismatches.count) mismatches, "
              + "SQLite \(SQLiteJSONDocuments.version)")
        #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n\n"))")
        #expect(checked == queries.count * backends.count)
        // The indexed copy is worth something only if many queries use an index.
        #expect(indexedRuns * 10 > checked)
        // And the covering path is exercised: over a tenth of the runs of the covering queries.
        #expect(coveredRuns * 10 > (queries.count - DifferentialTests.count) * backends.count)
        // The generator is worth something only if most queries return rows.
        #expect(nonEmpty * 2 > queries.count)
    }

    /// The value indexes of the indexed copy: name and expressions.
    static let indexes: [(String, [String])] = [
        ("n", ["n"]), ("kn", ["k", "n"]), ("s", ["s"]), ("x", ["x"]), ("ac", ["a.c"]), ("bn", ["b", "n"]),
        ("t0", ["t[0]"]), ("name", ["名"]), ("oqr", ["o.q.r"]), ("ab", ["a.b", "s"]),
    ]

    /// Saves the documents (deleting and expiring some), then loads the oracle's table with
    /// the same bodies and the sequences and revision IDs the database assigned.
    static func load(_ documents: [Generator.Doc], into collection: Collection) async throws -> SQLiteJSONDocuments {
        for doc in documents {
            let saved = try await collection.save(document: MutableDocument(id: doc.id, data: doc.body))
            if doc.deleted { #expect(try await collection.delete(document: saved)) }
            if let ms = doc.expiration, !doc.deleted {
                try await collection.setDocumentExpiration(id: doc.id, expiration: Date(timeIntervalSince1970: Double(ms) / 1000))
            }
        }
        let stored = try await collection.database.inReadBatch { transaction in
            var rows: [String: (UInt64, String)] = [:]
            try transaction.forEachDocument(in: collection, includeDeleted: true) { document in
                rows[document.id] = (document.sequence, document.revisionID ?? "")
                return true
            }
            return rows
        }
        let oracle = try SQLiteJSONDocuments(path: ":memory:")
        try oracle.insert(documents.map { doc in
            let (sequence, revision) = stored[doc.id] ?? (0, "")
            return SQLiteJSONDocuments.Row(id: doc.id, sequence: Int64(sequence), revisionID: revision, deleted: doc.deleted,
                                           expiration: doc.deleted ? nil : doc.expiration,
                                           body: doc.deleted ? "{}" : JSONValue.object(doc.body).canonicalString)
        })
        return oracle
    }

    /// Rows as comparable text: integral doubles as integers, rows sorted unless ordered.
    static func canonical(_ rows: [[JSONValue?]], ordered: Bool) -> [String] {
        let text = rows.map { row in row.map { $0.map { normalize($0).canonicalString } ?? "MISSING" }.joined(separator: " | ") }
        return ordered ? text : text.sorted()
    }

    static func normalize(_ value: JSONValue) -> JSONValue {
        switch value {
        case .double(let d):
            if d.rounded() == d, Swift.abs(d) < 9e15 { return .int(Int64(d)) }
            return value
        case .array(let a): return .array(a.map(normalize))
        case .object(let o): return .object(o.mapValues(normalize))
        default: return value
        }
    }
}

// MARK: - Generator

/// Seeded documents and queries within the subset the oracle expresses.
struct Generator {
    struct Doc {
        var id: String
        var body: [String: JSONValue]
        var deleted: Bool
        var expiration: Int64?
    }

    /// A generated query: rebuilt with `QueryBuilder` against each database's collection.
    struct Spec {
        var distinct = false
        var columns: [SelectResult] = []
        var whereClause: Expression?
        var groupBy: [Expression] = []
        var having: Expression?
        var orderBy: [Ordering] = []
        var limit: Int?
        var offset: Int?
        var parameters: [String: JSONValue] = [:]

        func build(_ collection: Collection) -> Query {
            var query = (distinct ? QueryBuilder.selectDistinct(columns) : QueryBuilder.select(columns))
                .from(DataSource.collection(collection))
            if let whereClause { query = query.where(whereClause) }
            if !groupBy.isEmpty { query = query.groupBy(groupBy) }
            if let having { query = query.having(having) }
            if !orderBy.isEmpty { query = query.orderBy(orderBy) }
            if let limit { query = query.limit(.int(limit), offset: offset.map { .int($0) }) }
            return query
        }
    }

    var rng: SplitMix64

    init(seed: UInt64) { rng = SplitMix64(seed: seed) }

    mutating func chance(_ p: Double) -> Bool { Double.random(in: 0..<1, using: &rng) < p }
    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func pick<T>(_ items: [T]) -> T { items[int(0...(items.count - 1))] }

    static let words = ["apple", "Apple", "banana", "Banana split", "cherry", "date", "", "a", "b_c", "100%",
                        "日本", "日本語", "🙂ok", "ok🙂", "שלום", "  pad  ", " lead", "trail ", "Zeta", "zeta"]
    static let categories = ["red", "green", "blue"]

    mutating func quarter() -> Double {
        // Non-integral multiples of 0.25: exact sums, never equal to an integer.
        var q = 0
        repeat { q = int(-40...80) } while q % 4 == 0
        return Double(q) / 4
    }

    mutating func scalar() -> JSONValue {
        switch int(0...9) {
        case 0: return .null
        case 1: return .bool(chance(0.5))
        case 2, 3, 4: return .int(Int64(int(-5...20)))
        case 5: return .double(quarter())
        default: return .string(pick(Generator.words))
        }
    }

    mutating func documents(count: Int) -> [Doc] {
        var out: [Doc] = []
        for i in 0..<count {
            var body: [String: JSONValue] = [:]
            let roll = int(0...19)
            if roll < 14 { body["n"] = .int(Int64(int(-5...20))) } else if roll < 17 { body["n"] = .double(quarter()) } else if roll < 18 { body["n"] = .null }
            if !chance(0.1) { body["x"] = scalar() }
            if !chance(0.1) { body["s"] = chance(0.9) ? .string(pick(Generator.words)) : scalar() }
            if !chance(0.2) { body["b"] = chance(0.9) ? .bool(chance(0.5)) : .null }
            if !chance(0.15) { body["k"] = chance(0.9) ? .string(pick(Generator.categories)) : .null }
            switch int(0...5) {
            case 0: break
            case 1: body["a"] = scalar()
            default:
                var a: [String: JSONValue] = [:]
                if !chance(0.2) { a["b"] = scalar() }
                if !chance(0.2) { a["c"] = .string(pick(Generator.words)) }
                body["a"] = .object(a)
            }
            switch int(0...5) {
            case 0: break
            case 1: body["t"] = .string(pick(Generator.words))
            default: body["t"] = .array((0..<int(0...4)).map { _ in chance(0.6) ? .int(Int64(int(0...6))) : .string(pick(Generator.categories)) })
            }
            if chance(0.5) { body["o"] = ["p": .array([scalar(), scalar()]), "q": ["r": scalar()]] }
            if chance(0.3) { body["名"] = .string(pick(Generator.words)) }
            // Unicode IDs sort after ASCII ones; caseless, since UPPER(meta().id) must match SQLite's ASCII-only upper().
            let id = chance(0.1) ? "日\(i)" : String(format: "d%03d", (i * 37) % count)
            out.append(Doc(id: id, body: body, deleted: chance(0.08), expiration: chance(0.1) ? 4_000_000_000_000 + Int64(int(1...1000)) * 1_000_000 : nil))  // far in the future: never purged
        }
        // IDs are unique: later duplicates get a suffix.
        var seen = Set<String>()
        for i in out.indices where !seen.insert(out[i].id).inserted {
            out[i].id += "-\(i)"
            seen.insert(out[i].id)
        }
        return out
    }

    /// Paths whose values are scalars or MISSING (safe to order, group and aggregate).
    static let scalarPaths = ["n", "x", "s", "b", "k", "a.b", "a.c", "t[0]", "t[-1]", "名", "o.q.r"]
    /// Paths that may hold arrays or objects.
    static let anyPaths = ["t", "a", "o", "o.p", "o.q"]

    var parameters: [String: JSONValue] = [:]
    /// When set (``coveringQuery()``), the only properties expressions read, and `meta()` is
    /// read for the ID only: queries an index on these properties covers.
    var onlyPaths: [String]?

    mutating func literal() -> Expression {
        let v = scalar()
        if chance(0.15) {
            let name = "p\(parameters.count)"
            parameters[name] = v
            return .parameter(name)
        }
        return .value(v)
    }

    /// A value expression over scalars.
    mutating func value(_ depth: Int) -> Expression {
        let r = depth <= 0 ? int(0...3) : int(0...11)
        switch r {
        case 0, 1, 2: return .property(pick(onlyPaths ?? Generator.scalarPaths))
        case 3: return chance(0.5) ? literal() : (chance(0.5) || onlyPaths != nil ? Meta.id : Meta.sequence)
        case 4: return value(depth - 1).add(value(depth - 1))
        case 5: return value(depth - 1).subtract(literal())
        case 6: return value(depth - 1).multiply(.int(int(-3...3)))
        case 7:
            let e = value(depth - 1)
            return pick([Function.lower(e), Function.upper(e), Function.length(e), Function.trim(e)])
        case 8:
            let e = value(depth - 1)
            return chance(0.5) ? Function.abs(e) : Function.round(e)
        case 9: return ArrayFunction.length(.property(pick(onlyPaths ?? Generator.anyPaths + ["s"])))
        case 10: return value(depth - 1).concat(chance(0.5) ? .string(pick(Generator.words)) : value(depth - 1))
        default: return Expression.negated(value(depth - 1))
        }
    }

    mutating func condition(_ depth: Int) -> Expression {
        let r = depth <= 0 ? int(0...8) : int(0...11)
        switch r {
        case 0, 1:
            let ops: [(Expression) -> (Expression) -> Expression] = [
                Expression.equalTo, Expression.notEqualTo, Expression.lessThan, Expression.lessThanOrEqualTo,
                Expression.greaterThan, Expression.greaterThanOrEqualTo,
            ]
            return pick(ops)(value(1))(chance(0.6) ? literal() : value(1))
        case 2:
            // Arrays and objects against scalars: their type rank decides.
            let ops: [(Expression) -> (Expression) -> Expression] = [Expression.equalTo, Expression.lessThan, Expression.greaterThan]
            return pick(ops)(.property(pick(onlyPaths ?? Generator.anyPaths)))(literal())
        case 3:
            let pattern = pick(["a%", "%a%", "A%", "_a%", "%o", "日%", "%🙂%", "b\\_c", "100\\%", "%", "", "_", "%e_"])
            return Expression.property(pick(onlyPaths ?? ["s", "x", "a.c", "名"])).like(.string(pattern))
        case 4: return value(1).in((0..<int(1...4)).map { _ in literal() })
        case 5:
            let low = int(-5...10)
            return value(0).between(.int(low), and: chance(0.5) ? .int(low + int(0...10)) : .string(pick(Generator.words)))
        case 6:
            let e: Expression = chance(0.8) ? .property(pick(onlyPaths ?? Generator.scalarPaths + Generator.anyPaths)) : value(1)
            return pick([e.isValued(), e.isNotValued(), Expression(.test(e.node, .null)), Expression(.test(e.node, .notMissing))])
        case 7: return ArrayFunction.contains(.property(pick(onlyPaths ?? ["t", "s", "o.p"])), value: chance(0.5) ? .int(int(0...6)) : literal())
        case 8: return chance(0.5) ? value(0).is(chance(0.5) ? literal() : value(0)) : value(0).isNot(.missing)
        case 9: return Expression.not(condition(depth - 1))
        case 10: return condition(depth - 1).and(condition(depth - 1))
        default: return condition(depth - 1).or(condition(depth - 1))
        }
    }

    mutating func query() -> Spec {
        parameters = [:]
        var spec = Spec()
        let shape = int(0...9)
        if shape < 5 {
            // Plain: any columns, optional filter, order (+ meta().id as the tie-breaker) and limit.
            for _ in 0..<int(1...4) {
                switch int(0...9) {
                case 0: spec.columns.append(.all())
                case 1: spec.columns.append(.expression(Meta.id))
                case 2: spec.columns.append(.property(pick(Generator.anyPaths)))
                case 3: spec.columns.append(.expression(condition(1)))
                case 4: spec.columns.append(.expression(pick([Meta.revisionID, Meta.expiration, Meta.sequence])))
                default: spec.columns.append(.expression(value(1)))
                }
            }
            if chance(0.8) { spec.whereClause = condition(2) }
            if chance(0.1) {
                let deleted = Meta.isDeleted.equalTo(.boolean(chance(0.5)))
                spec.whereClause = spec.whereClause.map { $0.and(deleted) } ?? deleted
            }
            if chance(0.6) {
                spec.orderBy = (0..<int(1...2)).map { _ in chance(0.5) ? Ordering.expression(value(1)).descending() : .expression(value(1)) }
                spec.orderBy.append(.expression(Meta.id))
                if chance(0.5) { spec.limit = int(0...20); if chance(0.5) { spec.offset = int(0...10) } }
            }
        } else if shape < 7 {
            // DISTINCT over scalar properties, ordered by all of them or not at all.
            let paths = (0..<int(1...2)).map { _ in pick(Generator.scalarPaths) }
            spec.distinct = true
            spec.columns = paths.map { .property($0) }
            if chance(0.5) { spec.whereClause = condition(1) }
            if chance(0.5) {
                spec.orderBy = paths.map { chance(0.5) ? Ordering.property($0).descending() : .property($0) }
                if chance(0.5) { spec.limit = int(1...10); if chance(0.5) { spec.offset = int(0...3) } }
            }
        } else {
            // Groups and aggregates.
            let keys = (0..<int(0...2)).map { _ in pick(Generator.scalarPaths) }
            spec.groupBy = keys.map { .property($0) }
            spec.columns = keys.map { .property($0) }
            for _ in 0..<int(1...3) {
                let arg = chance(0.7) ? Expression.property(pick(Generator.scalarPaths)) : value(1)
                let aggregate = pick([Function.count(.all()), Function.count(arg), Function.sum(arg), Function.avg(arg),
                                      Function.min(arg), Function.max(arg)])
                spec.columns.append(.expression(aggregate))
            }
            if chance(0.6) { spec.whereClause = condition(1) }
            if chance(0.3) {
                spec.having = pick([Function.count(.all()).greaterThan(.int(int(1...5))),
                                    Function.sum(.property("n")).greaterThanOrEqualTo(.int(int(-5...40))),
                                    Function.max(.property(pick(Generator.scalarPaths))).lessThan(literal())])
            }
            if chance(0.6) {
                var order: [Ordering] = []
                if chance(0.5) { order.append(Ordering.expression(Function.count(.all())).descending()) }
                order += keys.map { chance(0.5) ? Ordering.property($0).descending() : .property($0) }
                spec.orderBy = order
                // Every group key is an ORDER BY key (a total order); without keys there is one row.
                if chance(0.5) { spec.limit = int(0...5); if chance(0.5) { spec.offset = int(0...2) } }
            }
        }
        spec.parameters = parameters
        return spec
    }

    /// A query that reads only the properties of one of the indexed copy's indexes on
    /// top-level properties (and `meta().id`), so that index covers it when the planner picks
    /// it: the rows then come from the index entries, no document read. Its conditions restrict
    /// the index's leading property more often than ``query()``'s do.
    mutating func coveringQuery() -> Spec {
        parameters = [:]
        let paths = pick([["n"], ["k", "n"], ["s"], ["x"], ["b", "n"]])
        onlyPaths = paths
        defer { onlyPaths = nil }
        var spec = Spec()
        for _ in 0..<int(1...3) {
            switch int(0...3) {
            case 0: spec.columns.append(.expression(Meta.id))
            case 1: spec.columns.append(.property(pick(paths)))
            default: spec.columns.append(.expression(value(1)))
            }
        }
        let lead = Expression.property(paths[0])
        var conditions: [Expression] = []
        switch int(0...5) {
        case 0: conditions.append(lead.equalTo(literal()))
        case 1: conditions.append(pick([lead.greaterThanOrEqualTo, lead.lessThan, lead.greaterThan])(.int(int(-5...20))))
        case 2: conditions.append(lead.between(.int(int(-5...5)), and: .int(int(5...20))))
        case 3: conditions.append(lead.in((0..<int(1...3)).map { _ in literal() }))
        case 4: conditions.append(lead.like(.string(pick(["a%", "b%", "日%", "ze%"]))))
        default: break
        }
        if paths.count > 1, chance(0.5) {
            conditions.append(pick([Expression.property(paths[1]).greaterThan, Expression.property(paths[1]).lessThanOrEqualTo])(literal()))
        }
        if chance(0.4) { conditions.append(condition(1)) }
        spec.whereClause = conditions.reduce(nil) { partial, c in partial.map { $0.and(c) } ?? c }
        if chance(0.6) {
            let descending = chance(0.4)
            spec.orderBy = paths.map { descending ? Ordering.property($0).descending() : .property($0) }
            spec.orderBy.append(.expression(Meta.id))
            if chance(0.7) { spec.limit = int(0...20); if chance(0.4) { spec.offset = int(0...10) } }
        } else if chance(0.2) {
            spec.distinct = true
            spec.columns = paths.map { .property($0) }
        }
        spec.parameters = parameters
        return spec
    }
}

// MARK: - Oracle

/// Compiles a plan into SQLite SQL over the `docs` table with SQL++'s rules written out (see
/// ``DifferentialTests``). Every expression compiles to JSON text, SQL NULL meaning MISSING.
enum SQLiteOracle {
    /// Every expression outside aggregates is computed once per row, in layers of
    /// `MATERIALIZED` common table expressions (a node's children are columns of the layer
    /// below it), so the SQL grows linearly with the query, not exponentially.
    static func compile(_ plan: QueryPlan, parameters: [String: JSONValue]) -> String {
        var c = Compiler(parameters: parameters)
        // Distinct non-aggregate nodes, by height.
        var heights: [ExpressionNode: Int] = [:]
        @discardableResult
        func visit(_ node: ExpressionNode) -> Int {
            if let h = heights[node] { return h }
            if case .aggregate(_, let arg) = node {
                visit(arg)
                return -1
            }
            let h = node.children.map { visit($0) }.max().map { $0 + 1 } ?? 0
            heights[node] = max(h, 0)
            return max(h, 0)
        }
        plan.allExpressions.forEach { visit($0) }
        var layers: [String] = []
        var previous = "docs"
        if !plan.joins.isEmpty {  // DifferentialJoinTests.swift
            (layers, previous) = joinBase(plan, parameters: parameters)
            c.rightAlias = plan.joins.first.map { $0.source.alias ?? $0.source.collection }
        }
        let maxHeight = heights.values.max() ?? 0
        for h in 0...maxHeight {
            var columns: [String] = []
            for (node, height) in heights where height == h {
                if case .literal = node { continue }
                if case .parameter = node { continue }
                if node.containsAggregate { continue }
                let name = "e\(c.columns.count)"
                columns.append("\(c.json(node)) AS \(name)")
                c.columns[node] = name
            }
            if columns.isEmpty { continue }
            let layer = "l\(layers.count)"  // (join layers are named j…)
            layers.append("\(layer) AS MATERIALIZED (SELECT *, \(columns.joined(separator: ", ")) FROM \(previous))")
            previous = layer
        }
        var sql = layers.isEmpty ? "" : "WITH " + layers.joined(separator: ", ") + " "
        sql += "SELECT " + (plan.distinct ? "DISTINCT " : "")
        sql += plan.columns.map { c.json($0.expression) }.joined(separator: ", ")
        sql += " FROM \(previous)"
        var conditions: [String] = []
        if !plan.includesDeleted { conditions.append("deleted = 0") }
        if let w = plan.whereClause { conditions.append("\(c.truth(c.json(w))) = 1") }
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        if !plan.groupBy.isEmpty { sql += " GROUP BY " + plan.groupBy.map { c.json($0) }.joined(separator: ", ") }
        if let h = plan.having { sql += " HAVING \(c.truth(c.json(h))) = 1" }
        if !plan.orderBy.isEmpty {
            sql += " ORDER BY " + plan.orderBy.map { key in
                let j = c.json(key.expression)
                let dir = key.descending ? " DESC" : ""
                return "\(Compiler.rank(j))\(dir), json_extract(\(j), '$')\(dir)"
            }.joined(separator: ", ")
        }
        if plan.limit != nil || plan.offset != nil {
            let limit = plan.limit.flatMap { c.literalValue($0)?.intValue } ?? -1
            sql += " LIMIT \(limit)"
            if let o = plan.offset.flatMap({ c.literalValue($0)?.intValue }) { sql += " OFFSET \(o)" }
        }
        return sql
    }

    /// A result column: JSON text, or SQL NULL for MISSING.
    static func value(_ v: SQLiteValue) throws -> JSONValue? {
        switch v {
        case .null: return nil
        case .text(let s): return try JSONValue(parsing: s)
        case .integer(let i): return .int(i)
        case .real(let d): return .double(d)
        case .blob: throw PeerSyncError(.internalError, "unexpected blob from the oracle")
        }
    }

    struct Compiler {
        let parameters: [String: JSONValue]
        /// Nodes already computed as a column of a lower layer.
        var columns: [ExpressionNode: String] = [:]
        /// In a join (DifferentialJoinTests.swift): the joined source's name; its columns are
        /// `r_id`, `r_body`, … (SQL NULL when unmatched).
        var rightAlias: String?

        /// The column `name` of the source qualified with `alias`.
        func column(_ name: String, _ alias: String?) -> String {
            alias != nil && alias == rightAlias ? "r_" + name : name
        }

        init(parameters: [String: JSONValue]) { self.parameters = parameters }

        static func quote(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }
        static func type(_ j: String) -> String { "json_type(\(j))" }
        static func rank(_ j: String) -> String {
            "(CASE json_type(\(j)) WHEN 'null' THEN 1 WHEN 'false' THEN 2 WHEN 'true' THEN 3 WHEN 'integer' THEN 4 "
                + "WHEN 'real' THEN 4 WHEN 'text' THEN 5 WHEN 'array' THEN 6 WHEN 'object' THEN 7 ELSE 0 END)"
        }
        static func sqlValue(_ j: String) -> String { "json_extract(\(j), '$')" }
        static func isNumber(_ j: String) -> String { "json_type(\(j)) IN ('integer', 'real')" }
        /// A SQL number as JSON text; doubles with 17 significant digits (exact).
        static func number(_ x: String) -> String {
            "(CASE typeof(\(x)) WHEN 'integer' THEN CAST(\(x) AS TEXT) WHEN 'real' THEN printf('%!.17g', \(x)) ELSE 'null' END)"
        }
        static func bool(_ condition: String) -> String { "(CASE WHEN \(condition) THEN 'true' ELSE 'false' END)" }
        /// Truth code to JSON text: 0 false, 1 true, 2 null, 3 MISSING.
        static func fromCode(_ code: String) -> String {
            "(CASE \(code) WHEN 0 THEN 'false' WHEN 1 THEN 'true' WHEN 2 THEN 'null' ELSE NULL END)"
        }
        /// Equality as SQL++'s collation has it (1 or 0), MISSING equal to MISSING.
        static func equal(_ a: String, _ b: String) -> String {
            "(CASE WHEN \(a) IS NULL AND \(b) IS NULL THEN 1 WHEN \(a) IS NULL OR \(b) IS NULL THEN 0 "
                + "WHEN \(rank(a)) <> \(rank(b)) THEN 0 WHEN \(rank(a)) <= 3 THEN 1 "
                + "WHEN \(sqlValue(a)) = \(sqlValue(b)) THEN 1 ELSE 0 END)"
        }

        /// The truth code of JSON text `j`: 0 false, 1 true, 2 null, 3 MISSING.
        func truth(_ j: String) -> String {
            "(CASE WHEN \(j) IS NULL THEN 3 WHEN json_type(\(j)) = 'null' THEN 2 WHEN json_type(\(j)) = 'true' THEN 1 "
                + "WHEN json_type(\(j)) = 'false' THEN 0 WHEN \(Compiler.isNumber(j)) THEN (\(Compiler.sqlValue(j)) <> 0) "
                + "WHEN json_type(\(j)) = 'text' THEN (length(\(Compiler.sqlValue(j))) > 0) "
                + "WHEN json_type(\(j)) = 'array' THEN (json_array_length(\(j)) > 0) ELSE (\(j) <> '{}') END)"
        }

        func literalValue(_ node: ExpressionNode) -> JSONValue? {
            switch node {
            case .literal(let v): return v
            case .parameter(let name): return parameters[name]
            default: return nil
            }
        }

        func literal(_ v: JSONValue?) -> String { v.map { Compiler.quote($0.canonicalString) } ?? "NULL" }

        static func jsonPath(_ path: [PathComponent]) -> String {
            var s = "$"
            for c in path {
                switch c {
                case .key(let k): s += ".\"" + k + "\""
                case .index(let i): s += i < 0 ? "[#\(i)]" : "[\(i)]"
                }
            }
            return s
        }

        func json(_ node: ExpressionNode) -> String {
            if let column = columns[node] { return column }
            switch node {
            case .literal(let v): return literal(v)
            case .parameter(let name): return literal(parameters[name])
            case .property(let path, let alias): return "(\(column("body", alias)) -> \(Compiler.quote(Compiler.jsonPath(path))))"
            case .all(let alias): return column("body", alias)
            case .meta(let key, let alias):
                let id = column("id", alias)
                let value: String
                switch key {
                case .id: value = "json_quote(\(id))"
                case .sequence: value = "CAST(\(column("seq", alias)) AS TEXT)"
                case .revisionID: value = "json_quote(\(column("rev", alias)))"
                case .deleted: value = "(CASE \(column("deleted", alias)) WHEN 1 THEN 'true' ELSE 'false' END)"
                case .expiration: value = "CAST(\(column("expiration", alias)) AS TEXT)"
                }
                return "(CASE WHEN \(id) IS NULL THEN NULL ELSE \(value) END)"  // an unmatched joined source: MISSING
            case .negate(let e): return arithmetic("-", "'0'", json(e))
            case .not(let e):
                let c = truth(json(e))
                return Compiler.fromCode("(CASE \(c) WHEN 0 THEN 1 WHEN 1 THEN 0 ELSE \(c) END)")
            case .binary(let op, let l, let r):
                let a = json(l), b = json(r)
                switch op {
                case .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual: return comparison(op.rawValue, a, b)
                case .and, .or: return logic(op, truth(a), truth(b))
                case .add, .subtract, .multiply: return arithmetic(op.rawValue, a, b)
                case .concat:
                    return "(CASE WHEN \(a) IS NULL OR \(b) IS NULL THEN NULL WHEN json_type(\(a)) = 'text' AND json_type(\(b)) = 'text' "
                        + "THEN json_quote(\(Compiler.sqlValue(a)) || \(Compiler.sqlValue(b))) ELSE 'null' END)"
                case .like:
                    return "(CASE WHEN \(a) IS NULL OR \(b) IS NULL THEN NULL WHEN json_type(\(a)) = 'text' AND json_type(\(b)) = 'text' "
                        + "THEN \(Compiler.bool("\(Compiler.sqlValue(a)) LIKE \(Compiler.sqlValue(b)) ESCAPE '\\'")) ELSE 'null' END)"
                case .is: return Compiler.bool("\(Compiler.equal(a, b)) = 1")
                case .isNot: return Compiler.bool("\(Compiler.equal(a, b)) = 0")
                case .divide, .modulo, .regex: return "unsupported_by_oracle()"
                }
            case .between(let e, let lo, let hi):
                let v = json(e)
                return logic(.and, truth(comparison(">=", v, json(lo))), truth(comparison("<=", v, json(hi))))
            case .in(let e, let list):
                let a = json(e)
                let any = list.isEmpty ? "0" : list.map { "\(Compiler.equal(a, json($0))) = 1" }.joined(separator: " OR ")
                return "(CASE WHEN \(a) IS NULL THEN NULL WHEN json_type(\(a)) = 'null' THEN 'null' WHEN \(any) THEN 'true' ELSE 'false' END)"
            case .test(let e, let test):
                let a = json(e)
                switch test {
                case .null: return "(CASE WHEN \(a) IS NULL THEN NULL ELSE \(Compiler.bool("json_type(\(a)) = 'null'")) END)"
                case .notNull: return "(CASE WHEN \(a) IS NULL THEN NULL ELSE \(Compiler.bool("json_type(\(a)) <> 'null'")) END)"
                case .missing: return Compiler.bool("\(a) IS NULL")
                case .notMissing: return Compiler.bool("\(a) IS NOT NULL")
                case .valued: return Compiler.bool("\(a) IS NOT NULL AND json_type(\(a)) <> 'null'")
                case .notValued: return Compiler.bool("\(a) IS NULL OR json_type(\(a)) = 'null'")
                }
            case .function(let f, let args):
                let a = json(args[0])
                func onType(_ types: String, _ result: String) -> String {
                    "(CASE WHEN \(a) IS NULL THEN NULL WHEN json_type(\(a)) IN (\(types)) THEN \(result) ELSE 'null' END)"
                }
                let v = Compiler.sqlValue(a)
                switch f {
                case .lower: return onType("'text'", "json_quote(lower(\(v)))")
                case .upper: return onType("'text'", "json_quote(upper(\(v)))")
                case .length: return onType("'text'", "CAST(length(\(v)) AS TEXT)")
                case .trim: return onType("'text'", "json_quote(trim(\(v)))")
                case .ltrim: return onType("'text'", "json_quote(ltrim(\(v)))")
                case .rtrim: return onType("'text'", "json_quote(rtrim(\(v)))")
                case .abs: return onType("'integer', 'real'", Compiler.number("abs(\(v))"))
                case .round where args.count == 1: return onType("'integer', 'real'", Compiler.number("round(\(v))"))
                case .arrayLength: return onType("'array'", "CAST(json_array_length(\(a)) AS TEXT)")
                case .arrayContains:
                    let b = json(args[1])
                    let elementRank = "(CASE je.type WHEN 'null' THEN 1 WHEN 'false' THEN 2 WHEN 'true' THEN 3 WHEN 'integer' THEN 4 "
                        + "WHEN 'real' THEN 4 WHEN 'text' THEN 5 WHEN 'array' THEN 6 ELSE 7 END)"
                    let match = "EXISTS (SELECT 1 FROM json_each(\(a)) AS je WHERE \(elementRank) = \(Compiler.rank(b)) "
                        + "AND (\(Compiler.rank(b)) <= 3 OR je.atom = \(Compiler.sqlValue(b))))"
                    return "(CASE WHEN \(a) IS NULL OR \(b) IS NULL THEN NULL WHEN json_type(\(a)) <> 'array' THEN 'null' "
                        + "ELSE \(Compiler.bool(match)) END)"
                default: return "unsupported_by_oracle()"
                }
            case .aggregate(let kind, let arg):
                if case .all = arg { return "CAST(count(*) AS TEXT)" }
                let j = json(arg)
                let numeric = "(CASE WHEN \(Compiler.isNumber(j)) THEN \(Compiler.sqlValue(j)) END)"
                switch kind {
                case .count: return "CAST(count(CASE WHEN \(j) IS NOT NULL AND json_type(\(j)) <> 'null' THEN 1 END) AS TEXT)"
                case .sum: return "(CASE WHEN sum(\(numeric)) IS NULL THEN 'null' ELSE \(Compiler.number("sum(\(numeric))")) END)"
                case .avg: return "(CASE WHEN avg(\(numeric)) IS NULL THEN 'null' ELSE \(Compiler.number("avg(\(numeric))")) END)"
                case .min, .max:
                    let f = kind == .min ? "min" : "max"
                    let r = Compiler.rank(j)
                    return "(CASE \(f)(CASE WHEN \(r) >= 2 THEN \(r) END) WHEN 2 THEN 'false' WHEN 3 THEN 'true' "
                        + "WHEN 4 THEN \(Compiler.number("\(f)(CASE WHEN \(r) = 4 THEN \(Compiler.sqlValue(j)) END)")) "
                        + "WHEN 5 THEN json_quote(\(f)(CASE WHEN \(r) = 5 THEN \(Compiler.sqlValue(j)) END)) ELSE 'null' END)"
                }
            case .array: return "unsupported_by_oracle()"
            }
        }

        func comparison(_ op: String, _ a: String, _ b: String) -> String {
            let sqlOp = op == "!=" ? "<>" : op
            return "(CASE WHEN \(a) IS NULL OR \(b) IS NULL THEN NULL "
                + "WHEN json_type(\(a)) = 'null' OR json_type(\(b)) = 'null' THEN 'null' "
                + "WHEN \(Compiler.rank(a)) <> \(Compiler.rank(b)) THEN \(Compiler.bool("\(Compiler.rank(a)) \(sqlOp) \(Compiler.rank(b))")) "
                + "ELSE \(Compiler.bool("\(Compiler.sqlValue(a)) \(sqlOp) \(Compiler.sqlValue(b))")) END)"
        }

        func arithmetic(_ op: String, _ a: String, _ b: String) -> String {
            "(CASE WHEN \(a) IS NULL OR \(b) IS NULL THEN NULL "
                + "WHEN NOT (\(Compiler.isNumber(a))) OR NOT (\(Compiler.isNumber(b))) THEN 'null' "
                + "ELSE \(Compiler.number("(\(Compiler.sqlValue(a)) \(op) \(Compiler.sqlValue(b)))")) END)"
        }

        func logic(_ op: BinaryOperator, _ ca: String, _ cb: String) -> String {
            let decisive = op == .and ? 0 : 1
            return Compiler.fromCode("(CASE WHEN \(ca) = \(decisive) OR \(cb) = \(decisive) THEN \(decisive) "
                + "WHEN \(ca) = 3 OR \(cb) = 3 THEN 3 WHEN \(ca) = 2 OR \(cb) = 2 THEN 2 ELSE \(1 - decisive) END)")
        }
    }
}
#endif
