import PeerSyncCore
import PeerSyncDatabase

/// The documents a query reads, in one read transaction: each document of the `FROM` collection
/// in document-ID order (deleted ones only in a query that uses `meta().deleted`) and, in a
/// query with joins, its combinations with the joined collections' documents, nested in the
/// order of the joins (each join's candidates in document-ID order). Rows are produced one at a
/// time, straight from the storage's enumeration: the scan holds no document of the `FROM`
/// collection once the executor has seen it.
///
/// Joins:
/// How candidates are found: when the `ON` condition is `meta(alias).id = expression` (either
/// side, possibly one operand of an `AND`) with an expression that does not read the joined
/// source, the document is read by its ID (one lookup per row); otherwise the joined
/// collection is read once per run into memory and every document of it is tried (a nested
/// loop: memory grows with that collection). Deleted documents of a joined collection are
/// candidates only in a query that uses `meta().deleted`, as for the `FROM` collection.
struct DocumentScan {
    struct Source {
        let clause: JoinClause
        let collection: Collection
        /// The name expressions qualify this source with.
        var name: String { clause.source.alias ?? clause.source.collection }
    }

    let plan: QueryPlan
    let main: Collection
    let joins: [Source]
    let evaluator: Evaluator
    let statistics: ScanStatistics?
    /// How the `FROM` collection is read: a scan, or a value index the planner chose.
    let path: AccessPath
    let facts: PlanFacts

    init(plan: QueryPlan, main: Collection, joins: [Source], parameters: [String: JSONValue],
         statistics: ScanStatistics? = nil, path: AccessPath = .scan, facts: PlanFacts? = nil) {
        self.path = path
        self.facts = facts ?? PlanFacts(plan)
        self.plan = plan
        self.main = main
        self.joins = joins
        self.evaluator = Evaluator(parameters: parameters)
        self.statistics = statistics
    }

    /// The names the data sources go by must differ; no aggregate in `ON`.
    static func validate(_ plan: QueryPlan) throws(PeerSyncError) {
        var names: Set<String> = [plan.source.alias ?? plan.source.collection]
        for join in plan.joins {
            let name = join.source.alias ?? join.source.collection
            guard names.insert(name).inserted else {
                throw PeerSyncError(.invalidQuery, "the data source name '\(name)' is used twice (give the join an alias)")
            }
            if join.on?.containsAggregate == true {
                throw PeerSyncError(.invalidQuery, "an aggregate function cannot be used in ON")
            }
        }
    }

    /// The expression `meta(name).id` is compared with, when the `ON` condition allows a
    /// lookup by document ID.
    static func lookupKey(_ condition: ExpressionNode?, name: String) -> ExpressionNode? {
        guard let condition else { return nil }
        func readsSource(_ e: ExpressionNode) -> Bool {
            e.contains { node in
                switch node {
                case .property(_, let alias), .all(let alias), .meta(_, let alias): return alias == name
                default: return false
                }
            }
        }
        switch condition {
        case .binary(.equal, .meta(.id, let alias), let other) where alias == name && !readsSource(other): return other
        case .binary(.equal, let other, .meta(.id, let alias)) where alias == name && !readsSource(other): return other
        case .binary(.and, let l, let r): return lookupKey(l, name: name) ?? lookupKey(r, name: name)
        default: return nil
        }
    }

    /// Runs the scan in `transaction`, calling `visit` with each combined row until it returns false.
    func run(_ transaction: DatabaseReadTransaction, _ visit: (QueryDocument) throws -> Bool) throws {
        let includeDeleted = facts.includesDeleted
        let readsExpiration = facts.readsExpiration
        // Counted here, added to the statistics once at the end (not a lock per document).
        var documentsRead = 0
        defer { if documentsRead > 0 { statistics?.documentsRead.withLock { $0 += documentsRead } } }
        func make(_ document: Document, _ collection: Collection) throws -> QueryDocument {
            documentsRead += 1
            var expiration: Int64?
            if readsExpiration, let date = try transaction.expiration(ofDocument: document.id, in: collection) {
                expiration = Int64((date.timeIntervalSince1970 * 1000).rounded())
            }
            return QueryDocument(id: document.id, sequence: document.sequence, revisionID: document.revisionID ?? "",
                                 isDeleted: document.isDeleted, expiration: expiration, properties: document.properties)
        }
        // Per join: the key to look documents up by, or every document (read once, when first needed).
        let keys = joins.map { includeDeleted ? nil : DocumentScan.lookupKey($0.clause.on, name: $0.name) }
        var everyDocument: [Int: [QueryDocument]] = [:]
        func candidates(_ index: Int, _ row: QueryDocument) throws -> [QueryDocument] {
            let join = joins[index]
            if let key = keys[index] {
                guard case .string(let id)? = try evaluator.evaluate(key, row), !id.isEmpty,
                      let document = try transaction.document(id: id, in: join.collection) else { return [] }
                return [try make(document, join.collection)]
            }
            if let all = everyDocument[index] { return all }
            var all: [QueryDocument] = []
            try transaction.forEachDocument(in: join.collection, includeDeleted: includeDeleted) { document in
                all.append(try make(document, join.collection))
                return true
            }
            everyDocument[index] = all
            return all
        }
        // Extends `row` with the documents of join `index` and the ones after it.
        func extend(_ row: QueryDocument, _ index: Int) throws -> Bool {
            guard index < joins.count else { return try visit(row) }
            let join = joins[index]
            var matched = false
            for candidate in try candidates(index, row) {
                var combined = row
                combined.joined[join.name] = candidate
                if let on = join.clause.on, !Evaluator.isTrue(try evaluator.evaluate(on, combined)) { continue }
                matched = true
                guard try extend(combined, index + 1) else { return false }
            }
            if !matched && join.clause.kind == .leftOuter {
                var combined = row
                combined.joined[join.name] = .some(nil)
                return try extend(combined, index + 1)
            }
            return true
        }
        try IndexedScan.run(path, collection: main, transaction: transaction, includeDeleted: includeDeleted,
                            readsExpiration: readsExpiration, readProperties: facts.readProperties) { row in
            documentsRead += 1
            return try extend(row, 0)
        }
    }
}

/// What the scans of one ``Query`` read (for tests: a `LIMIT` stops the scan early).
final class ScanStatistics: Sendable {
    /// Documents read from the storage (of every collection the query reads), all runs together.
    let documentsRead = LockedValue(0)
}

extension Query {
    /// The `FROM` collection and the joined ones. Errors: `.invalidQuery` for a collection that
    /// does not exist, two sources with one name, an aggregate in `ON`.
    func resolveSources() async throws -> (Collection, [DocumentScan.Source]) {
        try DocumentScan.validate(plan)
        let main = try await resolveCollection()
        var joins: [DocumentScan.Source] = []
        for clause in plan.joins {
            let source = clause.source
            guard let collection = try await database.collection(name: source.collection, scope: source.scope) else {
                throw PeerSyncError(.invalidQuery, "no such collection",
                                    context: ["collection": "\(source.scope ?? "_default").\(source.collection)"])
            }
            joins.append(DocumentScan.Source(clause: clause, collection: collection))
        }
        return (main, joins)
    }

    /// Every collection the query reads (what a live query watches).
    func resolveCollections() async throws -> [Collection] {
        let (main, joins) = try await resolveSources()
        var names = Set<String>()
        return ([main] + joins.map(\.collection)).filter { names.insert($0.fullName).inserted }
    }
}
