import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncStorage

/// An index a planner may use: its name and its parsed expressions (aliases removed).
struct UsableIndex: Sendable, Hashable {
    var name: String
    var expressions: [ExpressionNode]
}

/// How a query reads its collection: a full scan, or the entries of one value index in some
/// key ranges (pure: decided from the plan, the parameters and the indexes, no database).
struct AccessPath: Sendable, Hashable {
    /// The index read; nil: a full scan in document-ID order.
    var index: UsableIndex?
    /// Key ranges of the index to read, ascending and disjoint (`[lower, upper)`, nil: open).
    var ranges: [Range] = []
    /// The conditions the ranges come from, SQL++ text (for `explain()`).
    var conditions: [String] = []
    /// When the index also gives the `ORDER BY` order: how many leading values of each key
    /// the order covers (the equality prefix plus the `ORDER BY` keys), and whether the
    /// index is read backwards.
    var order: (values: Int, descending: Bool)? {
        get { orderValues.map { ($0, orderDescending) } }
        set { orderValues = newValue?.values; orderDescending = newValue?.descending ?? false }
    }
    private var orderValues: Int?
    private var orderDescending = false
    /// Set when the index covers the query: rows are built from the index entries, no
    /// document is read (see ``Planner/covering(_:index:)``).
    var covering: Covering?
    /// Positions, ascending, among the `WHERE` clause's `AND`ed conditions
    /// (``Planner/conjuncts(_:)``), of the conditions every entry the ranges hold makes true,
    /// so a run need not evaluate them again (``Planner/provesExactly(_:_:)`` says which).
    var proven: [Int] = []

    /// The top-level properties a covered query reads and the positions of the index
    /// expressions that are exactly those properties, ascending by position.
    struct Covering: Sendable, Hashable {
        var keys: [String]
        var positions: [Int]
    }

    struct Range: Sendable, Hashable {
        var lower: String?
        var upper: String?
        var keyRange: KeyRange { KeyRange(from: lower, to: upper, includesUpperBound: false) }
    }

    init(index: UsableIndex? = nil) { self.index = index }

    static let scan = AccessPath()
}

/// Chooses an ``AccessPath`` (see the package README, "How the planner chooses").
///
/// The `WHERE` clause is split into its `AND`ed conditions; a condition restricts index
/// expression `e` when it is `e = c`, `e IN (c, …)`, `e < c` (`<=`, `>`, `>=`, either side),
/// `e BETWEEN c AND d` or `e LIKE 'prefix%'`, where `c`, `d` are constants (literals,
/// parameters, expressions of them) whose value is neither MISSING nor NULL. For each index the
/// planner takes equalities on its leading expressions, then at most one other restriction on
/// the next one; the index with the most restricted expressions wins (ties: more equalities,
/// then the name). Without a usable restriction, an index whose leading expressions (after
/// the equalities) are the `ORDER BY` keys, all ascending or all descending (a last
/// `meta().id` ascending key allowed: ties come in document-ID order), serves a query with a
/// `LIMIT` and no grouping or `DISTINCT`; an index chosen for its restrictions also gives the
/// order when its next expressions are those keys. Anything else is a scan. Fetched documents
/// go through the `WHERE` again, so the ranges only need to hold every matching document:
/// results are those of a scan, row for row. Only an equality the ranges prove exactly (a
/// string or boolean on a plain property, ``provesExactly(_:_:)``) is not evaluated again
/// (``AccessPath/proven``; `Query.execute()` runs ``ResidualPlans``' plan).
enum Planner {
    static func choose(_ plan: QueryPlan, parameters: [String: JSONValue], indexes: [UsableIndex]) -> AccessPath {
        if plan.includesDeleted || indexes.isEmpty { return .scan }
        let evaluator = Evaluator(parameters: parameters)
        let conditions = plan.whereClause.map { conjuncts(QueryIndexer.normalized($0)) } ?? []
        // A last `meta().id` ascending key is the order of ties the index path gives anyway.
        var ordering = plan.orderBy
        if ordering.count > 1, let last = ordering.last, !last.descending, case .meta(.id, _) = last.expression {
            ordering.removeLast()
        }
        let orderable = !plan.isAggregate && !plan.distinct && !ordering.isEmpty
            && Set(ordering.map(\.descending)).count == 1
        let orderKeys = ordering.map { QueryIndexer.normalized($0.expression) }

        var best: (path: AccessPath, score: Int)?
        for index in indexes.sorted(by: { $0.name < $1.name }) {
            var prefix: [JSONValue] = []
            var used: [String] = []
            var proven: [Int] = []
            var restriction: (ranges: [AccessPath.Range], text: String)?
            for expression in index.expressions {
                if let (value, text, position) = equality(on: expression, in: conditions, evaluator) {
                    prefix.append(value)
                    used.append(text)
                    if provesExactly(expression, value), !proven.contains(position) { proven.append(position) }
                    continue
                }
                restriction = restrict(expression, prefix: IndexKey.encode(prefix), in: conditions, evaluator)
                break
            }
            var path = AccessPath(index: index)
            if let restriction {
                path.ranges = restriction.ranges
                used.append(restriction.text)
            } else {
                let (lower, upper) = prefix.isEmpty ? (nil, nil) : IndexKey.prefixRange(prefix)
                path.ranges = [AccessPath.Range(lower: lower, upper: upper)]
            }
            path.conditions = used
            path.proven = proven.sorted()
            // Does the index give the ORDER BY order? Its expressions after the equalities must
            // be the ORDER BY keys (the restricted one may be the first of them).
            if orderable, prefix.count + orderKeys.count <= index.expressions.count,
               Array(index.expressions[prefix.count..<(prefix.count + orderKeys.count)]) == orderKeys {
                path.order = (prefix.count + orderKeys.count, ordering[0].descending)
            }
            let restricted = prefix.count + (restriction == nil ? 0 : 1)
            let score: Int
            if restricted > 0 {
                score = 1000 * restricted + 10 * prefix.count + (path.order == nil ? 0 : 1)
            } else if path.order != nil && plan.limit != nil {
                score = 1
            } else {
                continue
            }
            if best == nil || score > best!.score { best = (path, score) }
        }
        guard var path = best?.path, let index = path.index else { return .scan }
        path.covering = covering(plan, index: index)
        return path
    }

    /// Whether `index` covers `plan`: every property the query reads (in `SELECT`, `WHERE`,
    /// `ORDER BY`, groups, …) is read through a top-level property that is one of the index's
    /// expressions (`n` covers `n`, `n.x` and `n[0]`), and `meta()` is read for the document ID
    /// only. Deleted documents have no entry, so the entries are exactly the live documents a
    /// fetch would find; a query over deleted documents is a scan anyway. An entry whose
    /// values cannot be read back exactly (``IndexKey/decodeStoredValues(_:count:positions:)``)
    /// has its document read instead.
    static func covering(_ plan: QueryPlan, index: UsableIndex) -> AccessPath.Covering? {
        guard plan.joins.isEmpty, !plan.includesDeleted, let read = plan.readProperties else { return nil }
        let otherMeta = plan.allExpressions.contains { e in
            e.contains { if case .meta(let key, _) = $0 { return key != .id }; return false }
        }
        if otherMeta { return nil }
        var pairs: [(position: Int, key: String)] = []
        for key in read {
            guard let position = index.expressions.firstIndex(of: .property([.key(key)], alias: nil)) else { return nil }
            pairs.append((position, key))
        }
        pairs.sort { $0.position < $1.position }
        return AccessPath.Covering(keys: pairs.map(\.key), positions: pairs.map(\.position))
    }

    /// The `AND`ed conditions of a condition.
    static func conjuncts(_ node: ExpressionNode) -> [ExpressionNode] {
        if case .binary(.and, let l, let r) = node { return conjuncts(l) + conjuncts(r) }
        return [node]
    }

    /// The value of a constant expression (no document), or nil when it reads the document or
    /// its value is MISSING or NULL.
    static func constant(_ node: ExpressionNode, _ evaluator: Evaluator) -> JSONValue? {
        let readsDocument = node.contains {
            switch $0 {
            case .property, .all, .meta, .aggregate: return true
            default: return false
            }
        }
        if readsDocument { return nil }
        guard let value = try? evaluator.evaluate(node, nil), !value.isNull else { return nil }
        return value
    }

    /// `e = c` or `c = e`, with its position among `conditions`.
    private static func equality(on e: ExpressionNode, in conditions: [ExpressionNode],
                                 _ evaluator: Evaluator) -> (JSONValue, String, Int)? {
        for (position, condition) in conditions.enumerated() {
            guard case .binary(.equal, let l, let r) = condition else { continue }
            if l == e, let v = constant(r, evaluator) { return (v, SQLPrinter.expression(condition), position) }
            if r == e, let v = constant(l, evaluator) { return (v, SQLPrinter.expression(condition), position) }
        }
        return nil
    }

    /// Whether the equality `e = c` is true for every document whose entry holds, at `e`'s
    /// position, a value encoded exactly as `c` (an equality of the index's leading
    /// expressions: every range the planner reads lies inside that prefix), so the run may
    /// skip it. True only when `e` is a plain property path (`type`, `a.b`, `t[0]`) and `c` a
    /// string or a boolean. The proof:
    ///
    /// - The entry's value is the document's: upkeep writes the entries in the transaction
    ///   that writes the document, from `Evaluator.resolve` of the same path over the body's
    ///   canonical values (strings and booleans are their own canonical form), and the run
    ///   reads both in one snapshot (a stale index is never read). The run's partial parse of
    ///   the stored body gives the same value (`IndexUpkeepDifferentialTests`); a body that no
    ///   longer parses (damage on disk) is trusted to the entry, as a covering read trusts it.
    /// - Equal keys, equal values: a string's encoding is its tag, its UTF-8 bytes escaped
    ///   and `01 01`, a boolean's one tag byte, each self-delimiting (``IndexKey``), so a key
    ///   in the range holds a value of the same type with the same bytes. MISSING and NULL
    ///   have their own tags, and the planner takes no MISSING or NULL constant.
    /// - Equal values, true `=`: `=` compares strings by their UTF-8 bytes
    ///   (``Collation/compareStrings(_:_:)``, binary collation, not Swift's canonical
    ///   equivalence) and booleans by value, so it is true (never MISSING, NULL or false).
    /// - Nothing is lost by not evaluating it: evaluating `e = c` cannot throw, and a `WHERE`
    ///   of `AND`ed conditions is true exactly when each one is (``Evaluator/logic(_:_:_:)``,
    ///   which evaluates both sides always), so the others decide alone and throw the same
    ///   errors in the same order.
    ///
    /// Numbers are left out (`1` and `1.0` share a key while integers beyond 2^53 and doubles
    /// compare exactly), and so are arrays, objects and computed expressions.
    static func provesExactly(_ e: ExpressionNode, _ c: JSONValue) -> Bool {
        guard case .property(let path, _) = e, case .key? = path.first else { return false }
        switch c {
        case .string, .bool: return true
        default: return false
        }
    }

    /// `condition` without its `AND`ed conditions at `positions` (of ``conjuncts(_:)``), the
    /// others kept in their order; nil when none is left.
    static func residual(_ condition: ExpressionNode?, removing positions: [Int]) -> ExpressionNode? {
        guard let condition else { return nil }
        let kept = conjuncts(condition).enumerated().filter { !positions.contains($0.offset) }.map(\.element)
        guard var result = kept.first else { return nil }
        for next in kept.dropFirst() { result = .binary(.and, result, next) }
        return result
    }

    /// Ranges of entries (after `prefix`) holding every document for which one condition on
    /// `e` is true: the first condition found of `IN`, `BETWEEN`, comparisons, `LIKE`.
    private static func restrict(_ e: ExpressionNode, prefix: [UInt8], in conditions: [ExpressionNode],
                                 _ evaluator: Evaluator) -> (ranges: [AccessPath.Range], text: String)? {
        let groupEnd = prefix.isEmpty ? nil : IndexKey.string(prefix + [IndexKey.afterValue])
        // Comparisons are false for MISSING and NULL: the ranges start at `false`.
        let firstValued = IndexKey.string(prefix + [IndexKey.Tag.false.rawValue])
        func key(_ v: JSONValue) -> [UInt8] { prefix + IndexKey.encode([v]) }
        func after(_ v: JSONValue) -> String { IndexKey.string(key(v) + [IndexKey.afterValue]) }
        for condition in conditions {
            let text = SQLPrinter.expression(condition)
            switch condition {
            case .in(let x, let list) where x == e:
                var values: [JSONValue] = []
                for item in list {
                    guard !item.contains({ if case .property = $0 { return true }; if case .meta = $0 { return true }; return false }) else {
                        values = []
                        break
                    }
                    if let v = constant(item, evaluator) { values.append(v) }
                }
                if values.isEmpty { continue }
                var ranges = values.map { AccessPath.Range(lower: IndexKey.string(key($0)), upper: after($0)) }
                ranges.sort { ($0.lower ?? "").utf8.lexicographicallyPrecedes(($1.lower ?? "").utf8) }
                var unique: [AccessPath.Range] = []
                for r in ranges where unique.last != r { unique.append(r) }
                return (unique, text)
            case .between(let x, let lo, let hi) where x == e:
                guard let a = constant(lo, evaluator), let b = constant(hi, evaluator) else { continue }
                return ([AccessPath.Range(lower: IndexKey.string(key(a)), upper: after(b))], text)
            case .binary(let op, let l, let r) where [.less, .lessOrEqual, .greater, .greaterOrEqual].contains(op):
                var op = op
                let c: JSONValue
                if l == e, let v = constant(r, evaluator) {
                    c = v
                } else if r == e, let v = constant(l, evaluator) {
                    c = v
                    op = [.less: .greater, .lessOrEqual: .greaterOrEqual, .greater: .less, .greaterOrEqual: .lessOrEqual][op]!
                } else {
                    continue
                }
                let range: AccessPath.Range
                switch op {
                case .less: range = AccessPath.Range(lower: firstValued, upper: IndexKey.string(key(c)))
                case .lessOrEqual: range = AccessPath.Range(lower: firstValued, upper: after(c))
                case .greater: range = AccessPath.Range(lower: after(c), upper: groupEnd)
                default: range = AccessPath.Range(lower: IndexKey.string(key(c)), upper: groupEnd)
                }
                return ([range], text)
            case .binary(.like, let l, let r) where l == e:
                // A pattern starting with a wildcard would read every string: a scan is better.
                guard case .string(let pattern)? = constant(r, evaluator), !literalPrefix(pattern).isEmpty else { continue }
                let (lower, upper) = IndexKey.stringPrefixRange(prefix, literalPrefix(pattern))
                return ([AccessPath.Range(lower: lower, upper: upper)], text)
            default:
                continue
            }
        }
        return nil
    }

    /// The text every match of a `LIKE` pattern starts with: the pattern up to its first
    /// unescaped `%` or `_`, escapes removed.
    static func literalPrefix(_ pattern: String) -> String {
        var out = String.UnicodeScalarView()
        var escape = false
        for c in pattern.unicodeScalars {
            if escape { out.append(c); escape = false; continue }
            if c == "\\" { escape = true; continue }
            if c == "%" || c == "_" { break }
            out.append(c)
        }
        return String(out)
    }

    /// `explain()`'s line for the access path.
    static func describe(_ path: AccessPath, plan: QueryPlan, collection: String) -> String {
        let source = "\(collection)\(plan.source.alias.map { " AS \($0)" } ?? "")"
        guard let index = path.index else {
            return "SCAN COLLECTION \(source) (full scan in document-ID order, no index used; "
                + (plan.includesDeleted ? "deleted documents included" : "deleted documents skipped") + ")"
        }
        var line = "SEARCH COLLECTION \(source) USING INDEX \(index.name) ("
            + index.expressions.map(SQLPrinter.expression).joined(separator: ", ") + ")"
        if !path.conditions.isEmpty { line += " FOR " + path.conditions.joined(separator: " AND ") }
        if let order = path.order {
            line += "; ORDER BY FROM THE INDEX" + (order.descending ? " (read backwards)" : "")
        } else {
            line += path.covering == nil ? "; documents fetched in document-ID order" : "; in document-ID order"
        }
        if path.covering != nil { line += "; COVERING INDEX (values read from the index, no document fetched)" }
        return line
    }
}

/// Runs an ``AccessPath`` in a read transaction: yields the documents an ``Executor`` filters.
enum IndexedScan {
    /// Feeds `visit` the documents of `path` (with only the properties in `readProperties`
    /// parsed, when given; only those whose ID sorts after `after`, when given, for a path
    /// without order): for a scan, every document in ID order; for
    /// an index without order, the documents of its ranges in document-ID order; for an index
    /// giving the order, in that order with ties (equal ordered values) in document-ID order.
    static func run(_ path: AccessPath, collection: Collection, transaction: DatabaseReadTransaction,
                    includeDeleted: Bool, readsExpiration: Bool, readProperties: JSONValue.PropertySelection? = nil,
                    after: String? = nil, visit: (QueryDocument) throws -> Bool) throws {
        func fetched(_ document: QueriedDocument) throws -> Bool {
            var expiration: Int64?
            if readsExpiration, let date = try transaction.expiration(ofDocument: document.id, in: collection) {
                expiration = Int64((date.timeIntervalSince1970 * 1000).rounded())
            }
            return try visit(QueryDocument(id: document.id, sequence: document.sequence, revision: document.version,
                                           isDeleted: document.isDeleted, expiration: expiration, properties: document.properties))
        }
        guard let index = path.index else {
            // The records themselves, no `Document` (and its lazily parsed body) per row.
            try transaction.forEachQueriedDocument(in: collection, after: after, includeDeleted: includeDeleted,
                                                   readingOnly: readProperties, fetched)
            return
        }
        // Entries in the order they are to be visited: each row from its key when the index
        // covers the query (and the key's values read back exactly), else from its document,
        // read by ID (skipped when no longer there). False: `visit` asked to stop.
        let count = index.expressions.count
        // One dictionary's storage for every covered row: a row is not kept past `visit` (a
        // row kept, as a group's first document, is copied on the next write, as any shared
        // dictionary is).
        var scratch: [String: JSONValue] = [:]
        func visitEntries(_ entries: ArraySlice<(id: String, key: [UInt8])>) throws -> Bool {
            guard let covering = path.covering else {
                var stopped = false
                try transaction.forEachQueriedDocument(ids: entries.map(\.id), in: collection,
                                                       readingOnly: readProperties) { document in
                    if try fetched(document) { return true }
                    stopped = true
                    return false
                }
                return !stopped
            }
            for entry in entries {
                if let values = IndexKey.decodeStoredValues(entry.key, count: count, positions: covering.positions) {
                    scratch.removeAll(keepingCapacity: true)
                    for (name, value) in zip(covering.keys, values) where value != nil { scratch[name] = value }
                    let row = QueryDocument(id: entry.id, sequence: 0, revisionID: "", isDeleted: false,
                                            expiration: nil, properties: scratch)
                    if !(try visit(row)) { return false }
                } else if let document = try transaction.queriedDocument(id: entry.id, in: collection, readingOnly: readProperties),
                          !(try fetched(document)) {
                    return false
                }
            }
            return true
        }
        let keepKeys = path.covering != nil
        if let order = path.order {
            precondition(after == nil, "a scan in an index's order cannot resume after a document ID")
            var group: [(id: String, key: [UInt8])] = []
            var groupKey: ArraySlice<UInt8>?
            var stopped = false
            func flush() throws {
                if group.count > 1 { group.sort { compareUTF8($0.id, $1.id) < 0 } }
                if !stopped, !(try visitEntries(group[...])) { stopped = true }
                group.removeAll(keepingCapacity: true)
            }
            let ranges = order.descending ? path.ranges.reversed() : path.ranges
            for range in ranges where !stopped {
                try transaction.forEachIndexEntry(index: index.name, in: collection, range: range.keyRange,
                                                  descending: order.descending) { key, id in
                    let bytes = Array(key.utf8)
                    let prefix = bytes[0..<(IndexKey.valuesLength(bytes, count: order.values) ?? bytes.count)]
                    if let current = groupKey, current != prefix {
                        try flush()
                        if stopped { return false }
                    }
                    groupKey = prefix
                    group.append((id, keepKeys ? bytes : []))
                    return true
                }
            }
            if !stopped { try flush() }
            return
        }
        var entries: [(id: String, key: [UInt8])] = []
        for range in path.ranges {
            try transaction.forEachIndexEntry(index: index.name, in: collection, range: range.keyRange,
                                              descending: false) { key, id in
                entries.append((id, keepKeys ? Array(key.utf8) : []))
                return true
            }
        }
        if let after { entries.removeAll { compareUTF8(after, $0.id) >= 0 } }
        // One equal value (`=`) gives its entries in document-ID order already; others are sorted.
        if !IndexedScan.idsAscending(entries) {
            entries.sort { compareUTF8($0.id, $1.id) < 0 }
            var unique: [(id: String, key: [UInt8])] = []
            unique.reserveCapacity(entries.count)
            for entry in entries where unique.last.map({ compareUTF8($0.id, entry.id) != 0 }) ?? true { unique.append(entry) }
            entries = unique
        }
        _ = try visitEntries(entries[...])
    }

    /// Whether the entries' IDs are strictly ascending in byte order.
    static func idsAscending(_ entries: [(id: String, key: [UInt8])]) -> Bool {
        var previous: String?
        for entry in entries {
            if let previous, compareUTF8(previous, entry.id) >= 0 { return false }
            previous = entry.id
        }
        return true
    }
}

/// Plans a query inside its read transaction, from the index definitions of that snapshot.
enum QueryAccess {
    /// The access path and whether a stale index was passed over (the caller rebuilds it).
    /// With a `cache` (one per ``Query``), a run whose snapshot holds the same stored index
    /// definitions (byte for byte) and whose parameters are the same as the last planned run's
    /// reuses that plan: the plan depends on nothing else. The definitions are read in every
    /// run, so an index created, replaced, dropped or made stale by any handle or process is
    /// seen by the next run.
    static func path(_ plan: QueryPlan, parameters: [String: JSONValue], collection: Collection,
                     transaction: DatabaseReadTransaction, cache: PlanCache? = nil) throws -> (path: AccessPath, sawStale: Bool) {
        let stored = try transaction.storedIndexDefinitions(of: collection)
        if stored.isEmpty { return (.scan, false) }
        if let hit = cache?.plan(stored: stored, parameters: parameters) { return hit }
        let definitions = try transaction.indexDefinitions(from: stored)
        let indexer = QueryIndexer.installed
        var usable: [UsableIndex] = []
        for definition in definitions where definition.kind == "value" && !definition.isStale {
            guard let nodes = try? definition.expressions.map({ text throws(PeerSyncError) in try indexer.compile(text) }) else { continue }
            usable.append(UsableIndex(name: definition.name, expressions: nodes))
        }
        let planned = (path: Planner.choose(plan, parameters: parameters, indexes: usable),
                       sawStale: definitions.contains(where: \.isStale))
        cache?.store(planned, stored: stored, parameters: parameters)
        return planned
    }

    /// Rebuilds the collection's stale indexes (a process without the query package changed
    /// documents; see `IndexDefinition.isStale`).
    static func rebuildStaleIndexes(_ collection: Collection) async throws {
        try await collection.rebuildStaleIndexes(indexer: QueryIndexer.installed)
    }
}

/// The plan a run through an ``AccessPath`` that proves some of the query's `WHERE`
/// conditions (``AccessPath/proven``) evaluates, with its facts: the query without those
/// conditions, which reads fewer properties of each fetched document. Keeps the last one made
/// (one per ``Query``), as one object, so a run takes it with one reference (not a copy of
/// the plan and facts). Thread-safe.
final class ResidualPlans: Sendable {
    /// A residual plan and its facts.
    final class Residual: Sendable {
        let proven: [Int]
        let plan: QueryPlan
        let facts: PlanFacts
        init(proven: [Int], plan: QueryPlan) {
            self.proven = proven
            self.plan = plan
            self.facts = PlanFacts(plan)
        }
    }

    private let last = LockedValue<Residual?>(nil)

    /// The plan (and facts) to run `plan` with when an index read proves its `WHERE`
    /// conditions at `proven` (positions among ``Planner/conjuncts(_:)``, not empty).
    func plan(for proven: [Int], _ plan: QueryPlan) -> Residual {
        if let hit = last.withLock({ $0 }), hit.proven == proven { return hit }
        var residual = plan
        residual.whereClause = Planner.residual(plan.whereClause, removing: proven)
        let made = Residual(proven: proven, plan: residual)
        last.withLock { $0 = made }
        return made
    }
}

/// The last access path a ``Query`` planned and what it was planned from: the stored index
/// definitions of that run's snapshot and the parameters (see ``QueryAccess/path``).
/// Thread-safe: runs of one query on several reader threads share it.
final class PlanCache: Sendable {
    private struct Entry: Sendable {
        var stored: [StoredIndexDefinition]
        var parameters: [UInt8]
        var path: AccessPath
        var sawStale: Bool
    }

    private let last = LockedValue<Entry?>(nil)
    /// How many plans were made (not reused), for tests.
    let plansMade = LockedValue(0)

    /// The stored plan when it was planned from exactly these definitions and parameters.
    func plan(stored: [StoredIndexDefinition], parameters: [String: JSONValue]) -> (path: AccessPath, sawStale: Bool)? {
        guard let key = PlanCache.key(parameters) else { return nil }
        return last.withLock { entry in
            guard let entry, entry.stored == stored, entry.parameters == key else { return nil }
            return (entry.path, entry.sawStale)
        }
    }

    func store(_ planned: (path: AccessPath, sawStale: Bool), stored: [StoredIndexDefinition], parameters: [String: JSONValue]) {
        plansMade.withLock { $0 += 1 }
        guard let key = PlanCache.key(parameters) else { return }
        last.withLock { $0 = Entry(stored: stored, parameters: key, path: planned.path, sawStale: planned.sawStale) }
    }

    /// The parameters as their canonical JSON: equal bytes give equal index keys (strings by
    /// their exact bytes — Swift's `==` would equate canonically equivalent strings, whose
    /// keys differ). Nil (not cached) when a number is not finite: canonical JSON writes it
    /// as `null`.
    static func key(_ parameters: [String: JSONValue]) -> [UInt8]? {
        func finite(_ v: JSONValue) -> Bool {
            switch v {
            case .double(let d): return d.isFinite
            case .array(let items): return items.allSatisfy(finite)
            case .object(let o): return o.values.allSatisfy(finite)
            default: return true
            }
        }
        guard parameters.values.allSatisfy(finite) else { return nil }
        return JSONValue.object(parameters).canonicalData
    }
}
