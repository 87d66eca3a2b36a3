import PeerSyncCore

// The query AST (pure: no database). `QueryBuilder` chains and SQL++ strings both produce a
// `QueryPlan`; the evaluator and the executor run it over any sequence of documents.

/// One step of a property path: `a.b[0]` is `[.key("a"), .key("b"), .index(0)]`.
enum PathComponent: Sendable, Hashable {
    case key(String)
    case index(Int)
}

/// A document's metadata, `meta().<name>` in SQL++ (`Meta` in the builder).
enum MetaKey: String, Sendable, Hashable, CaseIterable {
    case id, sequence, revisionID, deleted, expiration
}

/// Binary operators.
enum BinaryOperator: String, Sendable, Hashable {
    case add = "+", subtract = "-", multiply = "*", divide = "/", modulo = "%", concat = "||"
    case equal = "=", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
    case and = "AND", or = "OR", like = "LIKE", regex = "REGEXP_LIKE", `is` = "IS", isNot = "IS NOT"
}

/// Unary tests `x IS [NOT] NULL | MISSING | VALUED`.
enum IsTest: String, Sendable, Hashable {
    case null = "IS NULL", notNull = "IS NOT NULL", missing = "IS MISSING", notMissing = "IS NOT MISSING"
    case valued = "IS VALUED", notValued = "IS NOT VALUED"
}

/// Aggregate functions.
enum Aggregate: String, Sendable, Hashable {
    case count = "COUNT", sum = "SUM", avg = "AVG", min = "MIN", max = "MAX"
}

/// Scalar functions (SQL++ names).
enum ScalarFunction: String, Sendable, Hashable, CaseIterable {
    case lower = "LOWER", upper = "UPPER", length = "LENGTH", trim = "TRIM", ltrim = "LTRIM", rtrim = "RTRIM"
    case abs = "ABS", round = "ROUND", floor = "FLOOR", ceil = "CEIL"
    case arrayContains = "ARRAY_CONTAINS", arrayLength = "ARRAY_LENGTH", regexpLike = "REGEXP_LIKE"

    /// How many arguments the function takes.
    var arity: ClosedRange<Int> {
        switch self {
        case .round: return 1...2
        case .arrayContains, .regexpLike: return 2...2
        default: return 1...1
        }
    }
}

/// An expression node.
indirect enum ExpressionNode: Sendable, Hashable {
    /// A literal value (`MISSING` is `.literal(nil)`).
    case literal(JSONValue?)
    /// A property of the document (`alias` is the data source alias it was qualified with).
    case property([PathComponent], alias: String?)
    /// The whole document (`*`, `alias.*`).
    case all(alias: String?)
    /// `$name`, bound from `Parameters` when the query runs.
    case parameter(String)
    case meta(MetaKey, alias: String?)
    case negate(ExpressionNode)
    case not(ExpressionNode)
    case binary(BinaryOperator, ExpressionNode, ExpressionNode)
    case between(ExpressionNode, ExpressionNode, ExpressionNode)
    case `in`(ExpressionNode, [ExpressionNode])
    case test(ExpressionNode, IsTest)
    case function(ScalarFunction, [ExpressionNode])
    /// An aggregate over the rows of a group; `COUNT(*)` has `.all` as its argument.
    case aggregate(Aggregate, ExpressionNode)
    /// An array literal whose elements are expressions.
    case array([ExpressionNode])

    /// Whether the node holds an aggregate anywhere.
    var containsAggregate: Bool { contains { if case .aggregate = $0 { return true }; return false } }

    /// Whether `predicate` holds for this node or any node below it.
    func contains(_ predicate: (ExpressionNode) -> Bool) -> Bool {
        if predicate(self) { return true }
        return children.contains { $0.contains(predicate) }
    }

    var children: [ExpressionNode] {
        switch self {
        case .literal, .property, .all, .parameter, .meta: return []
        case .negate(let e), .not(let e), .test(let e, _), .aggregate(_, let e): return [e]
        case .binary(_, let l, let r): return [l, r]
        case .between(let a, let b, let c): return [a, b, c]
        case .in(let e, let list): return [e] + list
        case .function(_, let args), .array(let args): return args
        }
    }
}

/// One column of the `SELECT` list.
struct SelectColumn: Sendable, Hashable {
    var expression: ExpressionNode
    /// `AS alias`.
    var alias: String?
}

/// One `ORDER BY` key.
struct OrderKey: Sendable, Hashable {
    var expression: ExpressionNode
    var descending: Bool
}

/// The collection a query reads, by name (resolved against the database when it runs).
struct SourceName: Sendable, Hashable {
    /// Scope name; nil means `_default`.
    var scope: String?
    /// Collection name (`_default` for `_`).
    var collection: String
    /// `AS alias`.
    var alias: String?

    /// The name a `*` column gets: the alias, else the collection name.
    var columnName: String { alias ?? collection }
}

/// `[INNER] JOIN`, `LEFT [OUTER] JOIN` or `CROSS JOIN` of another data source (Join.swift).
struct JoinClause: Sendable, Hashable {
    enum Kind: String, Sendable, Hashable {
        case inner = "JOIN", leftOuter = "LEFT OUTER JOIN", cross = "CROSS JOIN"
    }
    var kind: Kind
    var source: SourceName
    /// The `ON` condition; nil for a cross join.
    var on: ExpressionNode?
}

/// A parsed query: what `QueryBuilder` and SQL++ both build.
struct QueryPlan: Sendable, Hashable {
    var distinct = false
    var columns: [SelectColumn] = []
    var source = SourceName(scope: nil, collection: "_default", alias: nil)
    /// The joined data sources, in order.
    var joins: [JoinClause] = []
    var whereClause: ExpressionNode?
    var groupBy: [ExpressionNode] = []
    var having: ExpressionNode?
    var orderBy: [OrderKey] = []
    var limit: ExpressionNode?
    var offset: ExpressionNode?

    /// Every expression of the plan.
    var allExpressions: [ExpressionNode] {
        columns.map(\.expression) + joins.compactMap(\.on) + [whereClause].compactMap { $0 } + groupBy + [having].compactMap { $0 }
            + orderBy.map(\.expression) + [limit, offset].compactMap { $0 }
    }

    /// Couchbase Lite includes deleted documents only in queries that test `meta().deleted`.
    var includesDeleted: Bool {
        allExpressions.contains { $0.contains { if case .meta(.deleted, _) = $0 { return true }; return false } }
    }

    /// Whether `meta().expiration` is read (the scan then looks expirations up).
    var readsExpiration: Bool {
        allExpressions.contains { $0.contains { if case .meta(.expiration, _) = $0 { return true }; return false } }
    }

    /// The top-level document properties the query reads, or nil when it reads whole
    /// documents (`*`) or has joins: a scan then parses only these of each stored body
    /// (`Document.properties(readingOnly:)`). `COUNT(*)` reads no property.
    var readProperties: Set<String>? {
        if !joins.isEmpty { return nil }
        var keys = Set<String>()
        var whole = false
        func visit(_ e: ExpressionNode) {
            switch e {
            case .aggregate(.count, .all): return
            case .all: whole = true
            case .property(let path, _): if case .key(let k)? = path.first { keys.insert(k) }
            default: e.children.forEach(visit)
            }
        }
        allExpressions.forEach(visit)
        return whole ? nil : keys
    }

    /// Whether rows are groups: a `GROUP BY`, or an aggregate in the select list, `HAVING` or `ORDER BY`.
    var isAggregate: Bool {
        !groupBy.isEmpty || having != nil || columns.contains { $0.expression.containsAggregate }
            || orderBy.contains { $0.expression.containsAggregate }
    }

    /// The parameter names the plan uses, sorted.
    var parameterNames: [String] {
        var names = Set<String>()
        func visit(_ e: ExpressionNode) {
            if case .parameter(let n) = e { names.insert(n) }
            e.children.forEach(visit)
        }
        allExpressions.forEach(visit)
        return names.sorted()
    }

    /// Result column names, as Couchbase Lite names them: the alias; else a property's last
    /// key (`a.b[0]` → `b`... the last key before any index), `meta().id` → `id`; `*` → the
    /// data source's alias or collection name; otherwise `$1`, `$2`, … counting the unnamed
    /// columns. A duplicate name gets a suffix ` #2`, ` #3`… (no two columns share a key).
    var columnNames: [String] {
        var unnamed = 0
        var seen: [String: Int] = [:]
        return columns.map { column in
            var name: String
            if let alias = column.alias {
                name = alias
            } else {
                switch column.expression {
                case .property(let path, _):
                    if let last = path.last(where: { if case .key = $0 { return true }; return false }), case .key(let k) = last {
                        name = k
                    } else {
                        unnamed += 1; name = "$\(unnamed)"
                    }
                case .meta(let key, _): name = key.rawValue
                case .all(let alias): name = alias ?? source.columnName
                default: unnamed += 1; name = "$\(unnamed)"
                }
            }
            let n = (seen[name] ?? 0) + 1
            seen[name] = n
            return n == 1 ? name : "\(name) #\(n)"
        }
    }
}

/// What every run needs to know of a plan and that depends on neither the parameters nor the
/// data — each a walk of the expression trees — worked out once per ``Query``.
struct PlanFacts: Sendable {
    let includesDeleted: Bool
    let readsExpiration: Bool
    /// The top-level properties the plan reads (``QueryPlan/readProperties``), prepared for
    /// the partial parse of each stored body; nil: all of them.
    let readProperties: JSONValue.PropertySelection?
    let isAggregate: Bool
    /// The result columns' names (``QueryPlan/columnNames``).
    let columnNames: [String]
    /// What ``Executor/validate()`` throws for the plan's shape (an aggregate where none may
    /// be), nil when the shape is valid.
    let shapeError: PeerSyncError?

    init(_ plan: QueryPlan) {
        includesDeleted = plan.includesDeleted
        readsExpiration = plan.readsExpiration
        readProperties = plan.readProperties.map(JSONValue.PropertySelection.init)
        isAggregate = plan.isAggregate
        columnNames = plan.columnNames
        do {
            try Executor.checkShape(plan)
            shapeError = nil
        } catch {
            shapeError = error
        }
    }
}
