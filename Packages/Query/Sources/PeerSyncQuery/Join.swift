import PeerSyncCore
import PeerSyncDatabase

// Joins in the builder (Couchbase Lite's `Join`); DocumentScan.swift runs them.

/// A join of another data source (Couchbase Lite's `Join`), added to a query with
/// `Query.join(_:)`:
///
/// ```swift
/// let query = QueryBuilder
///     .select(SelectResult.expression(Expression.property("title").from("t")),
///             SelectResult.expression(Expression.property("name").from("l")))
///     .from(DataSource.collection(tasks).as("t"))
///     .join(Join.join(DataSource.collection(lists).as("l"))
///         .on(Expression.property("listID").from("t").equalTo(Meta.id.from("l"))))
/// ```
///
/// Properties and `Meta` values of a joined source are qualified with its alias
/// (`Expression.property("name").from("l")`, `Meta.id.from("l")`); unqualified ones read the
/// `FROM` source. In a query with joins, `SelectResult.all()` is the `FROM` source's document;
/// `SelectResult.all().from("l")` is the joined one's (in a column named `l`).
public struct Join: Sendable {
    let clause: JoinClause

    /// An inner join: each `FROM` row is paired with every document of `source` for which the
    /// `ON` condition is true; a row without such a document is dropped.
    public static func join(_ source: DataSource) -> JoinOn { JoinOn(kind: .inner, source: source) }
    /// Same as ``join(_:)``.
    public static func innerJoin(_ source: DataSource) -> JoinOn { JoinOn(kind: .inner, source: source) }
    /// A left outer join: as ``join(_:)``, but a `FROM` row without a matching document is kept
    /// once, with every property of `source` MISSING.
    public static func leftJoin(_ source: DataSource) -> JoinOn { JoinOn(kind: .leftOuter, source: source) }
    /// Same as ``leftJoin(_:)``.
    public static func leftOuterJoin(_ source: DataSource) -> JoinOn { JoinOn(kind: .leftOuter, source: source) }
    /// A cross join: each `FROM` row paired with every document of `source` (no condition).
    public static func crossJoin(_ source: DataSource) -> Join {
        Join(clause: JoinClause(kind: .cross, source: source.sourceName, on: nil))
    }
}

/// A join waiting for its condition: ``on(_:)`` completes it.
public struct JoinOn: Sendable {
    let kind: JoinClause.Kind
    let source: DataSource

    /// The join condition (`ON condition`): a pair of documents is joined when it is true
    /// (MISSING, NULL and false are not).
    public func on(_ condition: Expression) -> Join {
        Join(clause: JoinClause(kind: kind, source: source.sourceName, on: condition.node))
    }
}

extension DataSource {
    var sourceName: SourceName {
        let scope = collection.scope.name
        return SourceName(scope: scope == "_default" ? nil : scope, collection: collection.name, alias: alias)
    }
}

extension Query {
    /// `JOIN …`: the same query with `joins` added after its data source (and any joins it
    /// has). Each joined source needs a name of its own: an alias (`DataSource.as`) or a
    /// collection name no other source of the query uses; ``execute()`` throws `.invalidQuery`
    /// otherwise. The collections are looked up by name in the query's database when it runs.
    public func join(_ joins: Join...) -> Query { join(joins) }

    /// `JOIN …` from an array.
    public func join(_ joins: [Join]) -> Query { withPlan { $0.joins += joins.map(\.clause) } }
}
