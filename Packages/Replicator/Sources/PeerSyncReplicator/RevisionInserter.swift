import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// One received revision, checked and ready to insert.
struct RevisionInsert: Sendable {
    let collection: Collection
    let docID: String
    let revID: RevisionID
    let history: [RevisionID]
    let body: [String: JSONValue]
    let deleted: Bool
    /// False for a push received by the passive side: the revision must extend the
    /// document's current revision, or it is refused as a conflict.
    let allowConflict: Bool
    /// Also return the document's revision tree after the insertion (for conflict handling).
    let readBack: Bool
}

enum RevisionInsertOutcome: Sendable {
    case inserted(InsertResult, DocumentRevisions?)
    /// Refused for this document only (conflict, invalid body, …); nothing was written.
    case refused(PeerSyncError)
}

/// Inserts received revisions in shared storage transactions (group commit): a transaction
/// starts ``insertionDelay`` after the oldest revision waiting for one arrived (without the
/// wait when ``maxBatch`` are already waiting) and takes every revision waiting then (at most
/// ``maxBatch``).
/// `insert` returns only after the transaction holding the revision has committed, so a
/// `rev` is never acknowledged before it is durable; if the transaction fails, every revision
/// in it gets the error.
///
/// Why the delay (Couchbase Lite's inserter waits likewise, `kInsertionDelay`, 20 ms): a
/// transaction costs far more than the revision it stores — the commit, the change poll
/// after it, the wake-ups of the writer queue and of every pusher of the database. Without
/// it a session that receives its `rev`s a few at a time (each link of a mesh, where a peer's
/// revisions come over several links) committed about one revision per transaction: at 32
/// peers 1.1 transactions per stored revision, against 0.1 point to point.
///
/// Thread-safety: an actor; the batch runs on the database queue through `inBatch`.
actor RevisionInserter {
    static let maxBatch = 500
    /// How long a revision waits for others before its transaction starts: at most this much
    /// is added to a revision's hop (and to the time until the `rev` is answered).
    static let insertionDelay: Duration = .milliseconds(20)
    let database: Database
    private var waiting: [(revision: RevisionInsert, arrived: ContinuousClock.Instant,
                           continuation: CheckedContinuation<RevisionInsertOutcome, any Error>)] = []
    private var committing = false

    init(database: Database) {
        self.database = database
    }

    /// Inserts `revision` with the next batch. Per-document refusals are outcomes; storage
    /// failures (the whole transaction rolled back) throw.
    func insert(_ revision: RevisionInsert) async throws -> RevisionInsertOutcome {
        try await withCheckedThrowingContinuation { continuation in
            waiting.append((revision, ContinuousClock.now, continuation))
            if !committing {
                committing = true
                Task { await self.commitWaiting() }
            }
        }
    }

    private func commitWaiting() async {
        while let oldest = waiting.first?.arrived {
            let wait = oldest + Self.insertionDelay - ContinuousClock.now
            // Not cut short when the batch fills meanwhile: that would take a task per batch
            // (its sleep cancelled, never the transaction), and the busiest session measured
            // (point to point, ~2,500 revisions a second) gathers ~50 in a wait.
            if wait > .zero && waiting.count < Self.maxBatch { try? await Task.sleep(for: wait) }
            let batch = Array(waiting.prefix(Self.maxBatch))
            waiting.removeFirst(batch.count)
            let revisions = batch.map(\.revision)
            do {
                let outcomes = try await database.inBatch { txn in
                    try revisions.map { try Self.apply($0, txn) }
                }
                for (i, item) in batch.enumerated() { item.continuation.resume(returning: outcomes[i]) }
            } catch {
                for item in batch { item.continuation.resume(throwing: error) }
            }
        }
        committing = false
    }

    /// Errors about one document, raised before anything of it is written: the batch goes on.
    static let documentErrors: Set<PeerSyncError.Code> = [
        .conflict, .invalidArgument, .invalidJSON, .invalidDocumentID, .invalidRevisionID, .tooLarge, .notFound, .corrupt,
    ]

    private static func apply(_ r: RevisionInsert, _ txn: DatabaseTransaction) throws -> RevisionInsertOutcome {
        do {
            if r.readBack {
                // The tree as written, without reading the record again.
                let (result, revs) = try txn.insertRevisionReturningRevisions(
                    docID: r.docID, revID: r.revID, history: r.history, body: r.body, deleted: r.deleted,
                    in: r.collection, allowConflict: r.allowConflict)
                return .inserted(result, revs)
            }
            let result = try txn.insertRevision(docID: r.docID, revID: r.revID, history: r.history, body: r.body,
                                                deleted: r.deleted, in: r.collection, allowConflict: r.allowConflict)
            return .inserted(result, nil)
        } catch let error as PeerSyncError where documentErrors.contains(error.code) {
            return .refused(error)
        }
    }
}
