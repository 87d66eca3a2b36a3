import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase

/// The configuration of an index (Couchbase Lite's `IndexConfiguration`): pass one to
/// `Collection.createIndex(withName:config:)`. ``ValueIndexConfiguration`` is the kind there is;
/// array and full-text indexes are not implemented (a configuration of another type is
/// refused with `.invalidArgument`).
public protocol IndexConfiguration: Sendable {}

/// A value index on one or more expressions, given as SQL++ text (Couchbase Lite's
/// `ValueIndexConfiguration`):
///
/// ```swift
/// try await tasks.createIndex(withName: "byTypeDate", config: ValueIndexConfiguration(["type", "date"]))
/// ```
///
/// The index holds, for every live document, the values of its expressions (MISSING and NULL
/// included) in Couchbase Lite's collation order, so queries filtering or sorting on its
/// leading expressions read only the entries they need (see the package README, "Indexes").
public struct ValueIndexConfiguration: IndexConfiguration, Hashable {
    /// The indexed expressions as SQL++ text, in order (e.g. `"type"`, `"address.city"`,
    /// `"lower(name)"`).
    public let expressions: [String]

    /// An index on `expressions` (SQL++ text). Checked when the index is created.
    public init(_ expressions: [String]) { self.expressions = expressions }
}

/// An index definition built from expressions (Couchbase Lite's `Index` protocol, made by
/// ``IndexBuilder``).
public protocol Index: Sendable {}

/// A value index built from ``ValueIndexItem``s (Couchbase Lite's `ValueIndex`).
public struct ValueIndex: Index, Hashable {
    /// The items, in index order.
    public let items: [ValueIndexItem]
    /// The equivalent configuration (the items printed as SQL++).
    public var configuration: ValueIndexConfiguration {
        ValueIndexConfiguration(items.map { SQLPrinter.expression($0.expression.node) })
    }
}

/// One indexed expression of a ``ValueIndex`` (Couchbase Lite's `ValueIndexItem`).
public struct ValueIndexItem: Sendable, Hashable {
    let expression: Expression

    /// A property by path (as `Expression.property(_:)`).
    public static func property(_ path: String) -> ValueIndexItem { ValueIndexItem(expression: .property(path)) }
    /// Any expression of document properties.
    public static func expression(_ expression: Expression) -> ValueIndexItem { ValueIndexItem(expression: expression) }
}

/// Builds indexes from expressions (Couchbase Lite's `IndexBuilder`).
public enum IndexBuilder {
    /// A value index on `items`, in order.
    public static func valueIndex(items: ValueIndexItem...) -> ValueIndex { ValueIndex(items: items) }
    /// A value index on `items` given as an array.
    public static func valueIndex(items: [ValueIndexItem]) -> ValueIndex { ValueIndex(items: items) }
}

/// An index of a collection as `Collection.index(withName:)` returns it (Couchbase Lite's
/// `QueryIndex`).
public struct QueryIndex: Sendable, Hashable {
    /// The index name.
    public let name: String
    /// The collection's full name, `scope.collection`.
    public let collectionName: String
    /// The indexed expressions, SQL++ text, as given when it was created.
    public let expressions: [String]
}

extension Collection {
    /// Creates a value index named `name` and builds it from the collection's documents, in one
    /// write transaction (Couchbase Lite's `createIndex(withName:config:)`). From then on it is
    /// maintained in the transaction of every change of a document (save, delete, purge,
    /// expiry, a replicated revision, a conflict's resolution), in every process that opens
    /// the database. An index of the same name and expressions already there: nothing happens;
    /// of the same name and other expressions: it is replaced (as in Couchbase Lite).
    ///
    /// Isolation: a write. Errors: `.invalidArgument` for an empty name or no expressions,
    /// `.invalidQuery` for an expression that does not parse or reads something other than
    /// document properties (`meta()`, a `$parameter`, an aggregate); `.invalidArgument` for a
    /// configuration other than ``ValueIndexConfiguration``; `.notFound` for a deleted
    /// collection.
    public func createIndex(withName name: String, config: any IndexConfiguration) async throws {
        guard let value = config as? ValueIndexConfiguration else {
            throw PeerSyncError(.invalidArgument, "only value indexes (ValueIndexConfiguration) are implemented",
                                context: ["index": name])
        }
        let indexer = QueryIndexer.installed
        for text in value.expressions { _ = try indexer.compile(text) }
        try await storeIndex(IndexDefinition(name: name, expressions: value.expressions), indexer: indexer)
    }

    /// Creates a value index from an ``IndexBuilder`` index (Couchbase Lite's
    /// `createIndex(_:name:)`); as ``createIndex(withName:config:)``.
    public func createIndex(_ index: any Index, name: String) async throws {
        guard let value = index as? ValueIndex else {
            throw PeerSyncError(.invalidArgument, "only value indexes are implemented", context: ["index": name])
        }
        try await createIndex(withName: name, config: value.configuration)
    }

    /// Deletes the index named `name` and its entries (Couchbase Lite's `deleteIndex(forName:)`);
    /// deleting an index that does not exist does nothing.
    ///
    /// Isolation: a write. Errors: `.notFound` for a deleted collection.
    public func deleteIndex(forName name: String) async throws {
        _ = QueryIndexer.installed
        try await removeIndex(named: name)
    }

    /// The names of the collection's indexes, sorted (Couchbase Lite's `indexes()`), as stored
    /// in the database: indexes created by another process or handle are included.
    ///
    /// Isolation: a read. Errors: `.notFound` for a deleted collection.
    public func indexes() async throws -> [String] {
        _ = QueryIndexer.installed
        return try await indexDefinitions().map(\.name)
    }

    /// The index named `name`, or nil (Couchbase Lite's `index(withName:)`).
    ///
    /// Isolation: a read. Errors: `.notFound` for a deleted collection.
    public func index(withName name: String) async throws -> QueryIndex? {
        _ = QueryIndexer.installed
        return try await indexDefinitions().first { $0.name == name }.map {
            QueryIndex(name: $0.name, collectionName: fullName, expressions: $0.expressions)
        }
    }
}

/// Computes index entries for the database (see `DocumentIndexer` in PeerSyncDatabase):
/// parses each index expression once, evaluates it over a document's body and encodes the
/// values with ``IndexKey``.
final class QueryIndexer: DocumentIndexer {
    private let compiled = LockedValue<[String: ExpressionNode]>([:])

    /// The process's indexer, installed in the database module on first use (any index or
    /// query API touches it).
    static let installed: QueryIndexer = {
        let indexer = QueryIndexer()
        DocumentIndexing.install(indexer)
        return indexer
    }()

    /// Parses an index expression: one SQL++ expression of document properties. Errors:
    /// `.invalidQuery`.
    func compile(_ text: String) throws(PeerSyncError) -> ExpressionNode {
        if let node = compiled.withLock({ $0[text] }) { return node }
        let plan: QueryPlan
        do {
            plan = try SQLParser.parse("SELECT " + text + " FROM _")
        } catch {
            // The parser's positions are in the query wrapped around the expression: not
            // the user's text, so they are not repeated.
            throw PeerSyncError(.invalidQuery, "the index expression '\(text)' does not parse as one SQL++ expression",
                                context: ["expression": text])
        }
        guard plan.columns.count == 1, plan.columns[0].alias == nil, plan.whereClause == nil else {
            throw PeerSyncError(.invalidQuery, "an index expression must be one expression", context: ["expression": text])
        }
        let node = QueryIndexer.normalized(plan.columns[0].expression)
        let forbidden = node.contains {
            switch $0 {
            case .meta, .parameter, .aggregate, .all: return true
            default: return false
            }
        }
        if forbidden {
            throw PeerSyncError(.invalidQuery, "an index expression may only read document properties",
                                context: ["expression": text])
        }
        compiled.withLock { $0[text] = node }
        return node
    }

    /// The expression with every data-source alias removed (the evaluator ignores them), so
    /// `t.type` in a query matches an index on `type`.
    static func normalized(_ node: ExpressionNode) -> ExpressionNode {
        switch node {
        case .literal, .parameter: return node
        case .property(let path, _): return .property(path, alias: nil)
        case .all: return .all(alias: nil)
        case .meta(let key, _): return .meta(key, alias: nil)
        case .negate(let e): return .negate(normalized(e))
        case .not(let e): return .not(normalized(e))
        case .binary(let op, let l, let r): return .binary(op, normalized(l), normalized(r))
        case .between(let a, let b, let c): return .between(normalized(a), normalized(b), normalized(c))
        case .in(let e, let list): return .in(normalized(e), list.map(normalized))
        case .test(let e, let t): return .test(normalized(e), t)
        case .function(let f, let args): return .function(f, args.map(normalized))
        case .aggregate(let a, let e): return .aggregate(a, normalized(e))
        case .array(let items): return .array(items.map(normalized))
        }
    }

    func prepare(_ definitions: [IndexDefinition]) throws -> any PreparedDocumentIndexer {
        let compiled = try definitions.map { definition in
            try definition.expressions.map { text throws(PeerSyncError) in try compile(text) }
        }
        // Only the top-level properties the expressions read are parsed from a body.
        var keys = Set<String>()
        for nodes in compiled {
            for node in nodes {
                _ = node.contains { if case .property(let path, _) = $0, case .key(let k)? = path.first { keys.insert(k) }; return false }
            }
        }
        return PreparedQueryIndexer(compiled: compiled, keys: keys)
    }
}

/// ``QueryIndexer`` ready for one list of definitions: expressions parsed, the top-level
/// properties they read known.
struct PreparedQueryIndexer: PreparedDocumentIndexer {
    /// Per definition, its expressions.
    let compiled: [[ExpressionNode]]
    /// The top-level properties any of them reads.
    let keys: Set<String>
    /// Per definition, per expression: its path when it is a plain property (`type`,
    /// `address.city`, `tags[0]`), whose value is a lookup; nil for any other expression
    /// (the evaluator's). The same values as evaluating it (`Evaluator.resolve`).
    let paths: [[[PathComponent]?]]
    /// Whether every expression is a plain property.
    let onlyPaths: Bool
    /// ``paths`` unwrapped when ``onlyPaths``; empty otherwise.
    let plainPaths: [[[PathComponent]]]

    init(compiled: [[ExpressionNode]], keys: Set<String>) {
        self.compiled = compiled
        self.keys = keys
        paths = compiled.map { nodes in
            nodes.map { node in
                if case .property(let path, _) = node, case .key? = path.first { return path }
                return nil
            }
        }
        onlyPaths = paths.allSatisfy { $0.allSatisfy { $0 != nil } }
        plainPaths = onlyPaths ? paths.map { $0.compactMap { $0 } } : []
    }

    /// ``entryKeys(documentID:properties:)`` key by key. Every expression a plain property
    /// (the common case): one buffer for all the keys' bytes and one string per key, no arrays.
    func forEachEntryKey(documentID: String, properties: [String: JSONValue],
                         _ visit: (_ definition: Int, _ key: String) throws -> Void) throws {
        guard onlyPaths else {
            return try forEachEntryKeyOfArrays(documentID: documentID, properties: properties, visit)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64 + documentID.utf8.count)
        for (definition, paths) in plainPaths.enumerated() {
            bytes.removeAll(keepingCapacity: true)
            // As in entryKeys: the canonical form of what the lookup found.
            for path in paths { IndexKey.append(Evaluator.resolve(path, in: properties)?.canonicalized, to: &bytes) }
            try visit(definition, IndexKey.entryKey(encodedValues: &bytes, documentID: documentID))
        }
    }

    func entryKeys(documentID: String, body: [UInt8]) throws -> [[String]] {
        let properties = body.isEmpty ? [:] : try JSONValue.objectProperties(parsing: body, keys: keys)
        return try entryKeys(documentID, canonical: properties)
    }

    /// Without the body's bytes: the values read are put in their canonical form
    /// (`JSONValue.canonicalized`, what parsing the stored body gives), so the keys are those
    /// of ``entryKeys(documentID:body:)`` (`IndexUpkeepDifferentialTests` checks it).
    func entryKeys(documentID: String, properties: [String: JSONValue]) throws -> [[String]] {
        if onlyPaths {
            // A lookup then the canonical form of what it found: the same value as the
            // lookup in canonical properties (canonicalizing keeps keys and array positions).
            return paths.map { definition in
                [IndexKey.entryKey(definition.map { Evaluator.resolve($0!, in: properties)?.canonicalized },
                                   documentID: documentID)]
            }
        }
        var read: [String: JSONValue] = [:]
        read.reserveCapacity(keys.count)
        for key in keys {
            if let value = properties[key] { read[key] = value.canonicalized }
        }
        return try entryKeys(documentID, canonical: read)
    }

    /// The keys from `properties` in canonical form (at least those in ``keys``).
    private func entryKeys(_ documentID: String, canonical properties: [String: JSONValue]) throws -> [[String]] {
        if onlyPaths {
            return paths.map { definition in
                [IndexKey.entryKey(definition.map { Evaluator.resolve($0!, in: properties) }, documentID: documentID)]
            }
        }
        let document = QueryDocument(id: documentID, sequence: 0, revisionID: "", isDeleted: false,
                                     expiration: nil, properties: properties)
        let evaluator = Evaluator(parameters: [:])
        return try compiled.indices.map { i in
            let values = try compiled[i].indices.map { j throws(PeerSyncError) in
                if let path = paths[i][j] { return Evaluator.resolve(path, in: properties) }
                return try evaluator.evaluate(compiled[i][j], document)
            }
            return [IndexKey.entryKey(values, documentID: documentID)]
        }
    }
}
