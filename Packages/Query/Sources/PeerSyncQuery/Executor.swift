import PeerSyncCore

/// Runs a ``QueryPlan`` over a stream of documents (pure: the scan is a closure, so tests and
/// fuzzers run it without a database): filter, group, aggregate, having, distinct, order
/// (``Collation``), offset and limit. Rows are arrays of `JSONValue?` (nil: MISSING), one
/// per column of the plan.
struct Executor {
    let plan: QueryPlan
    let evaluator: Evaluator
    let facts: PlanFacts

    /// A scan: calls its argument with each document, in document-ID order, until it returns false.
    typealias Scan = ((QueryDocument) throws -> Bool) throws -> Void

    /// `facts`: the plan's (``PlanFacts``), when the caller keeps them; else worked out here.
    init(plan: QueryPlan, parameters: [String: JSONValue], facts: PlanFacts? = nil) {
        self.plan = plan
        self.evaluator = Evaluator(parameters: parameters)
        self.facts = facts ?? PlanFacts(plan)
    }

    /// Checks what can be checked before a scan: aggregates only where allowed, `LIMIT` and
    /// `OFFSET` numbers. Returns (limit, offset).
    func validate() throws(PeerSyncError) -> (limit: Int?, offset: Int) {
        if let error = facts.shapeError { throw error }
        func number(_ e: ExpressionNode?, _ what: String) throws(PeerSyncError) -> Int? {
            guard let e else { return nil }
            guard let v = try evaluator.evaluate(e, nil), let n = v.doubleValue else {
                throw PeerSyncError(.invalidQuery, "\(what) must be a number")
            }
            return n <= 0 ? 0 : Int(Swift.min(n, Double(Int.max / 2)))
        }
        return (try number(plan.limit, "LIMIT"), try number(plan.offset, "OFFSET") ?? 0)
    }

    /// The checks of a plan's shape: aggregates only where allowed, none nested.
    static func checkShape(_ plan: QueryPlan) throws(PeerSyncError) {
        if let w = plan.whereClause, w.containsAggregate {
            throw PeerSyncError(.invalidQuery, "an aggregate function cannot be used in WHERE")
        }
        if plan.groupBy.contains(where: \.containsAggregate) {
            throw PeerSyncError(.invalidQuery, "an aggregate function cannot be used in GROUP BY")
        }
        for e in plan.allExpressions {
            try Executor.checkNestedAggregates(e, inside: false)
        }
    }

    private static func checkNestedAggregates(_ e: ExpressionNode, inside: Bool) throws(PeerSyncError) {
        if case .aggregate(_, let arg) = e {
            if inside { throw PeerSyncError(.invalidQuery, "aggregate functions cannot be nested") }
            try checkNestedAggregates(arg, inside: true)
            return
        }
        for c in e.children { try checkNestedAggregates(c, inside: inside) }
    }

    /// The rows of the query. `ordered`: the scan yields documents in the `ORDER BY` order
    /// (an index gives it), so it can stop after `offset + limit` rows.
    func run(ordered: Bool = false, _ scan: Scan) throws -> [[JSONValue?]] {
        let (limit, offset) = try validate()
        if limit == 0 { return [] }
        // Rows the scan gives in the ORDER BY order (the planner orders only plain rows: no
        // groups, no DISTINCT) need no sort keys and no sort: the sort is stable, so it would
        // change nothing.
        let inOrder = ordered && !facts.isAggregate && !plan.distinct
        var rows: [(values: [JSONValue?], keys: [JSONValue?])] = []
        if facts.isAggregate {
            rows = try groupedRows(scan)
        } else {
            // Without ORDER BY or DISTINCT the scan can stop once offset + limit rows are found.
            let stopAfter = ((plan.orderBy.isEmpty || ordered) && !plan.distinct) ? limit.map { $0 + offset } : nil
            // Taken out of the plan once, not per document.
            let whereClause = plan.whereClause
            let columns = plan.columns.map(\.expression)
            let sortKeys = inOrder ? [] : plan.orderBy.map(\.expression)
            let evaluator = self.evaluator
            try scan { document in
                if let whereClause, !Evaluator.isTrue(try evaluator.evaluate(whereClause, document)) { return true }
                var values: [JSONValue?] = []
                values.reserveCapacity(columns.count)
                for column in columns { values.append(try evaluator.evaluate(column, document)) }
                rows.append((values, sortKeys.isEmpty ? [] : try sortKeys.map { o throws(PeerSyncError) in try evaluator.evaluate(o, document) }))
                if let stopAfter, rows.count >= stopAfter { return false }
                return true
            }
        }
        if plan.distinct {
            var seen = Set<[JSONValue?]>()
            rows = rows.filter { seen.insert($0.values).inserted }
        }
        if !plan.orderBy.isEmpty && !inOrder {
            let descending = plan.orderBy.map(\.descending)
            // Stable: rows equal on every key keep their scan order.
            rows = rows.enumerated().sorted { l, r in
                for (i, desc) in descending.enumerated() {
                    let c = Collation.compare(l.element.keys[i], r.element.keys[i])
                    if c != 0 { return desc ? c > 0 : c < 0 }
                }
                return l.offset < r.offset
            }.map(\.element)
        }
        let start = Swift.min(offset, rows.count)
        let end = limit.map { Swift.min(rows.count, start + $0) } ?? rows.count
        return rows[start..<end].map(\.values)
    }

    // MARK: Groups

    /// Running state of one aggregate over one group.
    private struct Accumulator {
        let kind: Aggregate
        var count: Int64 = 0
        var intSum: Int64 = 0
        var doubleSum: Double = 0
        var isDouble = false
        var extreme: JSONValue?

        mutating func add(_ value: JSONValue?, countAll: Bool) {
            switch kind {
            case .count:
                if countAll || (value != nil && value?.isNull == false) { count += 1 }
            case .sum, .avg:
                guard let value else { return }
                switch value {
                case .int(let i):
                    count += 1
                    if isDouble { doubleSum += Double(i) } else {
                        let (r, o) = intSum.addingReportingOverflow(i)
                        if o { isDouble = true; doubleSum = Double(intSum) + Double(i) } else { intSum = r }
                    }
                case .double(let d):
                    count += 1
                    if !isDouble { isDouble = true; doubleSum = Double(intSum) }
                    doubleSum += d
                default: return
                }
            case .min, .max:
                guard let value, !value.isNull else { return }
                if let current = extreme {
                    let c = Collation.compare(value, current)
                    if (kind == .min && c < 0) || (kind == .max && c > 0) { extreme = value }
                } else {
                    extreme = value
                }
            }
        }

        var result: JSONValue? {
            switch kind {
            case .count: return .int(count)
            case .sum:
                if count == 0 { return .null }
                return isDouble ? .double(doubleSum) : .int(intSum)
            case .avg:
                if count == 0 { return .null }
                return .double((isDouble ? doubleSum : Double(intSum)) / Double(count))
            case .min, .max: return extreme ?? .null
            }
        }
    }

    private struct Group {
        var first: QueryDocument?
        var accumulators: [Accumulator]
    }

    private func groupedRows(_ scan: Scan) throws -> [(values: [JSONValue?], keys: [JSONValue?])] {
        // The distinct aggregate nodes of SELECT, HAVING and ORDER BY.
        var aggregateNodes: [ExpressionNode] = []
        func collect(_ e: ExpressionNode) {
            if case .aggregate = e {
                if !aggregateNodes.contains(e) { aggregateNodes.append(e) }
                return
            }
            e.children.forEach(collect)
        }
        plan.columns.forEach { collect($0.expression) }
        plan.having.map(collect)
        plan.orderBy.forEach { collect($0.expression) }
        let fresh = aggregateNodes.map { node -> Accumulator in
            guard case .aggregate(let kind, _) = node else { return Accumulator(kind: .count) }
            return Accumulator(kind: kind)
        }

        var order: [[JSONValue?]] = []
        var groups: [[JSONValue?]: Group] = [:]
        if plan.groupBy.isEmpty {
            // No GROUP BY: one group, even over no rows (`SELECT COUNT(*)` of nothing is 0).
            order.append([])
            groups[[]] = Group(first: nil, accumulators: fresh)
        }
        try scan { document in
            if let w = plan.whereClause, !Evaluator.isTrue(try evaluator.evaluate(w, document)) { return true }
            let key = try plan.groupBy.map { g throws(PeerSyncError) in try evaluator.evaluate(g, document) }
            var group = groups[key] ?? { order.append(key); return Group(first: nil, accumulators: fresh) }()
            if group.first == nil { group.first = document }
            for (i, node) in aggregateNodes.enumerated() {
                guard case .aggregate(_, let arg) = node else { continue }
                if case .all = arg {
                    group.accumulators[i].add(nil, countAll: true)
                } else {
                    group.accumulators[i].add(try evaluator.evaluate(arg, document), countAll: false)
                }
            }
            groups[key] = group
            return true
        }
        var rows: [(values: [JSONValue?], keys: [JSONValue?])] = []
        for key in order {
            guard let group = groups[key] else { continue }
            var values: [ExpressionNode: JSONValue?] = [:]
            for (i, node) in aggregateNodes.enumerated() { values[node] = group.accumulators[i].result }
            if let having = plan.having,
               !Evaluator.isTrue(try evaluator.evaluate(having, group.first, aggregates: values)) { continue }
            rows.append((try plan.columns.map { c throws(PeerSyncError) in try evaluator.evaluate(c.expression, group.first, aggregates: values) },
                         try plan.orderBy.map { o throws(PeerSyncError) in try evaluator.evaluate(o.expression, group.first, aggregates: values) }))
        }
        return rows
    }
}
