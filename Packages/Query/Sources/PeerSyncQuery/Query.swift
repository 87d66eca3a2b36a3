import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import Synchronization

/// A query over a collection and the collections it joins (Couchbase Lite's `Query`), built with ``QueryBuilder`` or
/// parsed from SQL++ by `Database.createQuery(_:)`. The builder methods (`where`, `groupBy`,
/// `having`, `orderBy`, `limit`) return a new query and leave this one unchanged.
///
/// Running it (``execute()``) reads the collection inside one read transaction of the
/// database (a consistent snapshot), on one of its reader threads — or, for a short run, on
/// the calling task's thread (see ``execute()``): through a value index
/// when one fits (see `Collection.createIndex(withName:config:)` and the package README), else
/// by a scan in document-ID order; ``explain()`` says which.
///
/// Thread-safe: share it between tasks; ``parameters`` may be changed between runs.
public final class Query: Sendable, CustomStringConvertible {
    /// The database the query reads.
    public let database: Database
    /// The collection given by `DataSource.collection(_:)`; nil for SQL++, which names it.
    let collection: Collection?
    let plan: QueryPlan
    private let boundParameters = LockedValue<Parameters?>(nil)
    /// The live queries of this query (LiveQuery.swift).
    let live = LiveQueries()
    /// What its runs read (DocumentScan.swift).
    let scanStatistics = ScanStatistics()
    /// The last plan, reused while the index definitions and parameters stay the same (Planner.swift).
    let planCache = PlanCache()
    /// What every run needs to know of the plan (AST.swift).
    let facts: PlanFacts
    /// How long the last run's read took: decides whether the next may run inline.
    let runTimes = QueryRunTimes()
    /// The plan without the `WHERE` conditions an index read proves (Planner.swift).
    let residualPlans = ResidualPlans()
    /// The handle of the collection a SQL++ query without joins names (unchecked: whether it
    /// exists is checked in each run's read transaction, see ``sources()``); nil otherwise, or
    /// when the name is not valid (``sources()`` then throws its error).
    private let namedSource: Collection?

    init(database: Database, collection: Collection?, plan: QueryPlan) {
        self.database = database
        self.collection = collection
        self.plan = plan
        self.facts = PlanFacts(plan)
        self.namedSource = collection == nil && plan.joins.isEmpty
            ? try? database.uncheckedCollection(name: plan.source.collection, scope: plan.source.scope) : nil
        _ = QueryIndexer.installed   // this process maintains value indexes from now on
    }

    /// Values for the query's `$name` parameters; a copy is taken when set. Nil (the default):
    /// every parameter is MISSING. Setting them re-runs the query's live queries
    /// (``addChangeListener(withQueue:_:)``, ``changes()``).
    public var parameters: Parameters? {
        get { boundParameters.withLock { $0 } }
        set {
            boundParameters.withLock { $0 = newValue.map { Parameters($0) } }
            live.parametersChanged()
        }
    }

    /// The query as SQL++ text (what `Database.createQuery(_:)` parses back into the same query).
    public var description: String { SQLPrinter.query(plan) }

    /// The names of the result columns, in order (see ``Result``).
    public var columnNames: [String] { facts.columnNames }

    // MARK: Building

    /// The same query with its plan changed (for builder methods in other files).
    func withPlan(_ change: (inout QueryPlan) -> Void) -> Query { with(change) }

    private func with(_ change: (inout QueryPlan) -> Void) -> Query {
        var copy = plan
        change(&copy)
        let query = Query(database: database, collection: collection, plan: copy)
        query.parameters = parameters
        return query
    }

    /// `WHERE condition`: keeps the documents for which `condition` is true (MISSING, NULL
    /// and false drop the document).
    public func `where`(_ condition: Expression) -> Query { with { $0.whereClause = condition.node } }
    /// `GROUP BY expressions…`: one row per distinct combination of values (MISSING and NULL
    /// are distinct groups).
    public func groupBy(_ expressions: Expression...) -> Query { groupBy(expressions) }
    /// `GROUP BY` from an array.
    public func groupBy(_ expressions: [Expression]) -> Query { with { $0.groupBy = expressions.map(\.node) } }
    /// `HAVING condition`: keeps the groups for which `condition` is true.
    public func having(_ condition: Expression) -> Query { with { $0.having = condition.node } }
    /// `ORDER BY orderings…` (Couchbase Lite collation; rows equal on every key keep
    /// document-ID order).
    public func orderBy(_ orderings: Ordering...) -> Query { orderBy(orderings) }
    /// `ORDER BY` from an array.
    public func orderBy(_ orderings: [Ordering]) -> Query { with { $0.orderBy = orderings.map(\.key) } }
    /// `LIMIT limit [OFFSET offset]`: both must evaluate to numbers (parameters allowed);
    /// negative values count as 0. Errors at ``execute()``: `.invalidQuery` for a non-number.
    public func limit(_ limit: Expression, offset: Expression? = nil) -> Query {
        with { $0.limit = limit.node; $0.offset = offset?.node }
    }

    // MARK: Running

    /// Runs the query and returns every row: the ``ResultSet`` holds all of them in memory
    /// (Couchbase Lite's API). To read a large result as it is consumed, holding one page of
    /// rows at a time, use ``resultStream(pageSize:)``.
    ///
    /// Isolation: a read (see "Isolation" on `Database`): one read transaction, on one of the
    /// database's reader threads while the caller suspends — or, when this query's previous
    /// run read for less than 2 ms (`QueryRunTimes.inlineLimit`) and the storage can begin the read
    /// without waiting, on the calling task's thread, followed by a `Task.yield()` when the
    /// thread has not yielded so for 1 ms (a short index read costs less than the hop to a
    /// reader thread, or than a yield's hand-over to another thread; the storage never blocks in it).
    /// The rows and the snapshot are the same either way. When that snapshot shows a *stale* index of the collection (a process without this package changed
    /// documents, see the package README, "Indexes"), the query first rebuilds it in one write
    /// transaction, then runs in a new snapshot; a stale index is never read for a result.
    /// Errors: `.invalidQuery` for a collection that does not exist (SQL++, or a joined one),
    /// two data sources with one name, an aggregate in `WHERE` or `ON`, a non-numeric `LIMIT`/`OFFSET`, an invalid regular expression, a wrong number
    /// of function arguments; `.closed` if the database is closed; storage errors.
    public func execute() async throws -> ResultSet {
        let (collection, joins, mustCheck) = try await sources()
        let plan = self.plan
        let parameters = self.parameters?.dictionary ?? [:]
        let statistics = scanStatistics
        let planCache = self.planCache
        let facts = self.facts
        let residualPlans = self.residualPlans
        var rebuilt = false
        while true {
            let scanIfStale = rebuilt
            let runTimes = self.runTimes
            let read: @Sendable (DatabaseReadTransaction) throws -> [[JSONValue?]]? = { transaction in
                let start = ContinuousClock.now
                defer { runTimes.record(ContinuousClock.now - start) }
                // The planner (Planner.swift) picks a value index or a scan from this snapshot; a
                // query with joins scans its FROM collection (the planner reads one source's WHERE).
                // Reading the index definitions is also the check that the collection exists
                // (`mustCheck` is only set without joins).
                let (path, sawStale) = plan.joins.isEmpty
                    ? try Query.checkingExists(collection, mustCheck) {
                        try QueryAccess.path(plan, parameters: parameters, collection: collection, transaction: transaction,
                                             cache: planCache)
                    }
                    : (AccessPath.scan, false)
                // A stale index (see `rebuildStaleIndexes`) is rebuilt before the query runs;
                // if another process made it stale again since, this run scans instead.
                if sawStale && !scanIfStale { return nil }
                // Without the WHERE conditions the index read proves (the same rows).
                let residual = path.proven.isEmpty ? nil : residualPlans.plan(for: path.proven, plan)
                let runPlan = residual?.plan ?? plan, runFacts = residual?.facts ?? facts
                let scan = DocumentScan(plan: runPlan, main: collection, joins: joins, parameters: parameters,
                                        statistics: statistics, path: path, facts: runFacts)
                return try Executor(plan: runPlan, parameters: parameters, facts: runFacts).run(ordered: path.order != nil) { visit in
                    try scan.run(transaction, visit)
                }
            }
            // A run that was short last time runs on this thread if the storage can start its
            // read without waiting (no hop to a reader thread and back); others hop.
            let rows = runTimes.lastRunWasShort
                ? try await database.inShortReadBatch(read)
                : try await database.inReadBatch(read)
            if let rows { return ResultSet(columnNames: facts.columnNames, rows: rows) }
            try await QueryAccess.rebuildStaleIndexes(collection)
            rebuilt = true
        }
    }

    /// A readable description of how the query runs: the SQL++ text, then one step per line
    /// (how the collection is read: `SCAN COLLECTION …` or `SEARCH COLLECTION … USING INDEX
    /// name …` with the conditions the index serves and whether it gives the order; then
    /// filter, group, sort, limit, projection). The plan depends on the current
    /// ``parameters`` (a MISSING or NULL value serves no index); a query with joins scans its
    /// `FROM` collection. Isolation: a read (and, as for ``execute()``, a write first that
    /// rebuilds a stale index, so the plan shown is the one the query runs).
    /// Errors: `.invalidQuery` as for ``execute()`` when the collection does not exist.
    public func explain() async throws -> String {
        let collection = try await resolveCollection()
        let plan = self.plan
        let parameters = self.parameters?.dictionary ?? [:]
        let planCache = self.planCache
        func access() async throws -> (path: AccessPath, sawStale: Bool) {
            guard plan.joins.isEmpty else { return (.scan, false) }
            return try await database.inReadBatch { transaction in
                try QueryAccess.path(plan, parameters: parameters, collection: collection, transaction: transaction,
                                     cache: planCache)
            }
        }
        // As `execute()`: a stale index is rebuilt first, so the plan shown is the one it runs.
        var (path, sawStale) = try await access()
        if sawStale {
            try await QueryAccess.rebuildStaleIndexes(collection)
            path = try await access().path
        }
        let access = path
        return QueryExplainer.explain(plan, collection: collection.fullName, access: access)
    }

    /// The `FROM` collection and the joined ones, as ``resolveSources()``; but a query without
    /// joins reads nothing here (one trip to a reader per run, not two): `mustCheck` then says
    /// that its read transaction must check that the collection exists (``requireExists`` or,
    /// where its first read is of the collection's index definitions, ``checkingExists``).
    func sources() async throws -> (Collection, [DocumentScan.Source], mustCheck: Bool) {
        guard plan.joins.isEmpty else {
            let (main, joins) = try await resolveSources()
            return (main, joins, false)
        }
        if let collection { return (collection, [], false) }
        if let namedSource { return (namedSource, [], true) }
        return (try database.uncheckedCollection(name: plan.source.collection, scope: plan.source.scope), [], true)
    }

    /// Throws `.invalidQuery` ("no such collection") unless `collection` exists in `transaction`.
    static func requireExists(_ collection: Collection, _ transaction: DatabaseReadTransaction) throws {
        guard try transaction.contains(collection) else { throw noSuchCollection(collection) }
    }

    /// Runs `body`, a read of `collection` that throws `.notFound` when the collection does not
    /// exist (as ``QueryAccess/path(_:parameters:collection:transaction:cache:)`` does); with
    /// `mustCheck`, that error becomes ``requireExists(_:_:)``'s (`.invalidQuery`, "no such
    /// collection"), so the read is the check and no lookup of its own is made.
    static func checkingExists<R>(_ collection: Collection, _ mustCheck: Bool, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let error as PeerSyncError where mustCheck && error.code == .notFound {
            throw noSuchCollection(collection)
        }
    }

    static func noSuchCollection(_ collection: Collection) -> PeerSyncError {
        PeerSyncError(.invalidQuery, "no such collection", context: ["collection": collection.fullName])
    }

    func resolveCollection() async throws -> Collection {
        if let collection { return collection }
        guard let found = try await database.collection(name: plan.source.collection, scope: plan.source.scope) else {
            throw PeerSyncError(.invalidQuery, "no such collection",
                                context: ["collection": "\(plan.source.scope ?? "_default").\(plan.source.collection)"])
        }
        return found
    }
}

extension Database {
    /// Parses a SQL++ query (Couchbase Lite's `createQuery`):
    ///
    /// ```swift
    /// let query = try db.createQuery("SELECT meta().id, title FROM tasks WHERE done = false ORDER BY date DESC LIMIT 20")
    /// ```
    ///
    /// `FROM` names a collection: `_` or `_default` (the default collection), `name` (a
    /// collection of the default scope) or `scope.name`, optionally `AS alias`. The collection
    /// is looked up when the query runs. The subset understood is listed in the package README.
    ///
    /// Errors: `.invalidQuery` with a ``QuerySyntaxError`` detail (offset, line, column of the
    /// offending token) for text that does not parse.
    public func createQuery(_ sql: String) throws -> Query {
        let plan = try SQLParser.parse(sql)
        return Query(database: self, collection: nil, plan: plan)
    }
}

/// ``Query/explain()``'s text.
enum QueryExplainer {
    static func explain(_ plan: QueryPlan, collection: String, access: AccessPath = .scan) -> String {
        var lines = [SQLPrinter.query(plan)]
        lines.append(Planner.describe(access, plan: plan, collection: collection))
        for join in plan.joins {
            let name = join.source.alias ?? join.source.collection
            let how = plan.includesDeleted || DocumentScan.lookupKey(join.on, name: name) == nil
                ? "every document of it, read once per run" : "one lookup by document ID per row"
            lines.append("\(join.kind.rawValue) \(SQLPrinter.source(join.source))\(join.on.map { " ON " + SQLPrinter.expression($0) } ?? "") (\(how))")
        }
        if let w = plan.whereClause { lines.append("FILTER \(SQLPrinter.expression(w))") }
        if plan.isAggregate {
            lines.append(plan.groupBy.isEmpty ? "AGGREGATE (one group)"
                         : "GROUP BY \(plan.groupBy.map(SQLPrinter.expression).joined(separator: ", "))")
        }
        if let h = plan.having { lines.append("HAVING \(SQLPrinter.expression(h))") }
        if plan.distinct { lines.append("DISTINCT") }
        // An index read in the ORDER BY order (its line says "ORDER BY FROM THE INDEX") is not sorted again.
        if !plan.orderBy.isEmpty && access.order == nil {
            lines.append("SORT BY " + plan.orderBy.map { SQLPrinter.expression($0.expression) + ($0.descending ? " DESC" : "") }
                .joined(separator: ", "))
        }
        if let o = plan.offset { lines.append("OFFSET \(SQLPrinter.expression(o))") }
        if let l = plan.limit { lines.append("LIMIT \(SQLPrinter.expression(l))") }
        lines.append("PROJECT " + zip(plan.columns, plan.columnNames).map { "\(SQLPrinter.expression($0.expression)) AS \($1)" }
            .joined(separator: ", "))
        return lines.joined(separator: "\n")
    }
}

/// The duration of a query's last read, for choosing where its next run reads: a run whose
/// read took less than ``inlineLimit`` last time is short enough for the caller's thread
/// (`Database.inShortReadBatch`), a longer one (a scan, a large index range) hops to a
/// reader thread. A query's first run hops. The choice is only where the same read runs: the
/// rows and the snapshot are the same either way. Thread-safe.
final class QueryRunTimes: Sendable {
    /// Reads shorter than this may run on the calling thread next time (2 ms: a cooperative
    /// thread held that long delays other tasks no more than any short computation).
    static let inlineLimit: Duration = .milliseconds(2)

    /// Nanoseconds of the last read; `Int64.max` before the first run.
    private let lastNanoseconds = Atomic<Int64>(.max)

    /// Records a run's read time.
    func record(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = seconds > 9_000_000_000 ? Int64.max : seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        lastNanoseconds.store(nanoseconds, ordering: .relaxed)
    }

    /// Whether the last run's read was shorter than ``inlineLimit``.
    var lastRunWasShort: Bool {
        let (seconds, attoseconds) = Self.inlineLimit.components
        let limit = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        return lastNanoseconds.load(ordering: .relaxed) < limit
    }
}
