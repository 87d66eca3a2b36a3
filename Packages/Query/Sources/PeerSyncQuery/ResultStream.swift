import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase

/// The rows of a query read as they are consumed, a page at a time (``Query/resultStream(pageSize:)``):
/// an `AsyncSequence` of ``Result``, for results too large to hold at once (an export, a
/// `peersync query` of a whole collection).
///
/// ```swift
/// for try await row in query.resultStream() {
///     print(row.toJSON())
/// }
/// ```
///
/// How it reads: a query without `ORDER BY`, `DISTINCT`, aggregates or joins reads its
/// documents in document-ID order (through a value index when one fits, as ``Query/execute()``),
/// in pages of `pageSize` rows, each page in its own read transaction that resumes after the
/// last document the previous page read. So the stream holds at most one page of rows (and, on
/// an index path, the IDs of the index entries one page matches), whatever the collection's
/// size, and stops reading when iteration stops or the task is cancelled. Pages are separate
/// snapshots: a document changed while the stream is consumed appears as of the page that
/// reads it (never twice; one saved with an ID before the resume point is not seen).
///
/// Any other query (`ORDER BY` without an index giving the order, `GROUP BY`, aggregates,
/// `DISTINCT`, joins) must see every row before the first one is known: it runs as
/// ``Query/execute()`` does, in one snapshot, when the first row is asked for, and holds every
/// row (what it sorts, groups or deduplicates) until the stream is released.
///
/// Each iterator runs the query afresh (a second `for` loop reads the collection again). Errors
/// thrown by `next()`: those of ``Query/execute()``, and `CancellationError` when the task is
/// cancelled (checked before each page is read).
public struct ResultStream: AsyncSequence, Sendable {
    /// The rows.
    public typealias Element = Result

    /// The column names, in order (see ``Result``).
    public let columnNames: [String]
    let query: Query
    let pageSize: Int

    /// An iterator that runs the query.
    public func makeAsyncIterator() -> Iterator { Iterator(query: query, pageSize: pageSize) }

    /// Reads the rows of one run of the query, page by page (see ``ResultStream``).
    public struct Iterator: AsyncIteratorProtocol {
        let query: Query
        let pageSize: Int
        private var page: [[JSONValue?]] = []
        private var position = 0
        private var cursor = QueryPageCursor()

        init(query: Query, pageSize: Int) {
            self.query = query
            self.pageSize = pageSize
        }

        /// The next row; nil after the last one. Errors: see ``ResultStream``.
        public mutating func next() async throws -> Result? {
            while position == page.count {
                if cursor.finished { return nil }
                try Task.checkCancellation()
                page = try await query.readPage(&cursor, size: pageSize)
                position = 0
            }
            defer { position += 1 }
            return Result(columnNames: query.facts.columnNames, values: page[position])
        }
    }
}

/// Where a paged run of a query stands between two pages.
struct QueryPageCursor: Sendable {
    /// The last document read (rows resume after it); nil before the first page.
    var lastDocumentID: String?
    /// Rows skipped for `OFFSET` so far, and rows returned so far (for `LIMIT`).
    var skipped = 0
    var returned = 0
    /// Whether a stale index was already rebuilt for this run (it is rebuilt once, as by `execute()`).
    var rebuiltStale = false
    var finished = false
    /// A query that cannot be paged: every row, computed by the first call.
    var held: [[JSONValue?]]?
    /// The first row of `held` not handed out yet.
    var heldPosition = 0
}

extension Query {
    /// The rows of the query, read as they are consumed, `pageSize` rows per read transaction
    /// (see ``ResultStream`` for what is held and when pages are read). Nothing is read until
    /// the first row is asked for. Unlike ``execute()``, which returns every row at once,
    /// memory stays at one page for a query without `ORDER BY`, `GROUP BY`, aggregates,
    /// `DISTINCT` or joins.
    ///
    /// `pageSize`: rows per page, at least 1 (default 256).
    public func resultStream(pageSize: Int = 256) -> ResultStream {
        ResultStream(columnNames: facts.columnNames, query: self, pageSize: Swift.max(1, pageSize))
    }

    /// Whether the rows can be produced a page at a time: no sort, group, distinct or join.
    var canBePaged: Bool { !plan.isAggregate && !plan.distinct && plan.orderBy.isEmpty && plan.joins.isEmpty }

    /// The next page of a paged run (empty and `cursor.finished` at the end).
    func readPage(_ cursor: inout QueryPageCursor, size: Int) async throws -> [[JSONValue?]] {
        guard canBePaged else {
            // Sorts, groups, joins: the whole result, as `execute()`, held; handed out in pages.
            if cursor.held == nil { cursor.held = try await execute().rows }
            let held = cursor.held ?? []
            let end = Swift.min(held.count, cursor.heldPosition + size)
            let page = Array(held[cursor.heldPosition..<end])
            cursor.heldPosition = end
            cursor.finished = end == held.count
            return page
        }
        let (collection, _, mustCheck) = try await sources()
        let plan = self.plan
        let parameters = self.parameters?.dictionary ?? [:]
        let statistics = scanStatistics
        let planCache = self.planCache
        let facts = self.facts
        while true {
            let start = cursor
            let outcome: (rows: [[JSONValue?]], cursor: QueryPageCursor)? = try await database.inReadBatch { transaction in
                if mustCheck { try Query.requireExists(collection, transaction) }
                var cursor = start
                let executor = Executor(plan: plan, parameters: parameters, facts: facts)
                let (limit, offset) = try executor.validate()
                let (path, sawStale) = try QueryAccess.path(plan, parameters: parameters, collection: collection,
                                                            transaction: transaction, cache: planCache)
                if sawStale && !cursor.rebuiltStale { return nil }
                var rows: [[JSONValue?]] = []
                if let limit, cursor.returned >= limit {
                    cursor.finished = true
                    return (rows, cursor)
                }
                var pageFull = false
                try IndexedScan.run(path, collection: collection, transaction: transaction,
                                    includeDeleted: facts.includesDeleted, readsExpiration: facts.readsExpiration,
                                    readProperties: facts.readProperties, after: cursor.lastDocumentID) { document in
                    statistics.documentsRead.withLock { $0 += 1 }
                    cursor.lastDocumentID = document.id
                    let evaluator = executor.evaluator
                    if let w = plan.whereClause, !Evaluator.isTrue(try evaluator.evaluate(w, document)) { return true }
                    if cursor.skipped < offset {
                        cursor.skipped += 1
                        return true
                    }
                    rows.append(try plan.columns.map { c throws(PeerSyncError) in try evaluator.evaluate(c.expression, document) })
                    cursor.returned += 1
                    if let limit, cursor.returned >= limit {
                        cursor.finished = true
                        return false
                    }
                    if rows.count >= size {
                        pageFull = true
                        return false
                    }
                    return true
                }
                // The scan ended by itself: no document after this page.
                if !pageFull { cursor.finished = true }
                return (rows, cursor)
            }
            if let outcome {
                cursor = outcome.cursor
                return outcome.rows
            }
            try await QueryAccess.rebuildStaleIndexes(collection)
            cursor.rebuiltStale = true
        }
    }
}
