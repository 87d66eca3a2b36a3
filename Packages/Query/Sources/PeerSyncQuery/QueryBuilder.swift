import PeerSyncCore
import PeerSyncDatabase

/// One column of a query's `SELECT` list (Couchbase Lite's `SelectResult`).
public struct SelectResult: Sendable, Hashable {
    let column: SelectColumn

    /// A property by path (`"address.city"`); its column is named after the last key (`city`).
    public static func property(_ path: String) -> SelectResult { expression(.property(path)) }
    /// Any expression; unless aliased (``as(_:)``) its column is named `$1`, `$2`, … (the
    /// number counts the unnamed columns), a property or `Meta` column after its last key.
    public static func expression(_ expression: Expression) -> SelectResult {
        SelectResult(column: SelectColumn(expression: expression.node, alias: nil))
    }
    /// The whole document (`*`), in a column named after the data source's alias or collection.
    public static func all() -> SelectResult { SelectResult(column: SelectColumn(expression: .all(alias: nil), alias: nil)) }

    /// The same column named `alias`.
    public func `as`(_ alias: String) -> SelectResult {
        SelectResult(column: SelectColumn(expression: column.expression, alias: alias))
    }

    /// For ``all()``: the document of the data source aliased `alias` (`alias.*`).
    public func from(_ alias: String) -> SelectResult {
        guard case .all = column.expression else { return self }
        return SelectResult(column: SelectColumn(expression: .all(alias: alias), alias: column.alias))
    }
}

/// What a query reads (Couchbase Lite's `DataSource`): one collection, optionally aliased.
public struct DataSource: Sendable {
    let collection: Collection
    let alias: String?

    /// All documents of `collection` (deleted ones only in a query that tests `Meta.isDeleted`).
    public static func collection(_ collection: Collection) -> DataSource { DataSource(collection: collection, alias: nil) }

    /// The same source named `alias`, for qualified properties (`Expression.property("x").from(alias)`).
    public func `as`(_ alias: String) -> DataSource { DataSource(collection: collection, alias: alias) }
}

/// One key of `ORDER BY` (Couchbase Lite's `Ordering`). Ascending unless ``descending()``.
/// Values order by Couchbase Lite's collation: MISSING < null < false < true < numbers <
/// strings (UTF-8 byte order) < arrays < objects.
public struct Ordering: Sendable, Hashable {
    let key: OrderKey

    /// Orders by a property path.
    public static func property(_ path: String) -> Ordering { expression(.property(path)) }
    /// Orders by any expression.
    public static func expression(_ expression: Expression) -> Ordering {
        Ordering(key: OrderKey(expression: expression.node, descending: false))
    }
    /// Ascending order (the default).
    public func ascending() -> Ordering { Ordering(key: OrderKey(expression: key.expression, descending: false)) }
    /// Descending order.
    public func descending() -> Ordering { Ordering(key: OrderKey(expression: key.expression, descending: true)) }
}

/// Builds queries with Couchbase Lite's names:
///
/// ```swift
/// let query = QueryBuilder
///     .select(SelectResult.expression(Meta.id), SelectResult.property("title"))
///     .from(DataSource.collection(tasks))
///     .where(Expression.property("done").equalTo(Expression.boolean(false)))
///     .orderBy(Ordering.property("date").descending())
///     .limit(Expression.int(20))
/// for result in try await query.execute() { print(result.string(forKey: "title") ?? "") }
/// ```
public enum QueryBuilder {
    /// `SELECT results…`.
    public static func select(_ results: SelectResult...) -> Select { Select(columns: results.map(\.column), distinct: false) }
    /// `SELECT results…` from an array.
    public static func select(_ results: [SelectResult]) -> Select { Select(columns: results.map(\.column), distinct: false) }
    /// `SELECT DISTINCT results…`: duplicate rows are dropped.
    public static func selectDistinct(_ results: SelectResult...) -> Select { Select(columns: results.map(\.column), distinct: true) }
    /// `SELECT DISTINCT results…` from an array.
    public static func selectDistinct(_ results: [SelectResult]) -> Select { Select(columns: results.map(\.column), distinct: true) }
}

/// The `SELECT` part of a query being built: give it a data source with ``from(_:)``.
public struct Select: Sendable {
    let columns: [SelectColumn]
    let distinct: Bool

    /// `FROM source`: a runnable ``Query``.
    public func from(_ source: DataSource) -> Query {
        var plan = QueryPlan()
        plan.distinct = distinct
        plan.columns = columns
        let scope = source.collection.scope.name
        plan.source = SourceName(scope: scope == "_default" ? nil : scope, collection: source.collection.name, alias: source.alias)
        return Query(database: source.collection.database, collection: source.collection, plan: plan)
    }
}
