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

/// Inserts received revisions in shared storage transactions (group commit): revisions wait
/// for the next tick of the process's ``InsertionTicker`` (at most ``insertionDelay``), then
/// one transaction takes every revision waiting (at most ``maxBatch``; a fuller queue is
/// committed in further transactions at once). `insert` returns only after the transactions
/// holding its revisions have committed, so a `rev` is never acknowledged before it is durable;
/// if the transaction fails, every revision in it gets the error.
///
/// Why the wait (Couchbase Lite's inserter waits likewise, `kInsertionDelay`, 20 ms): a
/// transaction costs far more than the revision it stores — the commit, the change poll
/// after it, the wake-ups of the writer queue and of every pusher of the database. Without
/// it a session that receives its `rev`s a few at a time (each link of a mesh, where a peer's
/// revisions come over several links) committed about one revision per transaction: at 32
/// peers 1.1 transactions per stored revision, against 0.1 point to point. Why one ticker for
/// the process rather than a sleep per batch: a timer costs a wake-up of dispatch's timer
/// thread and a re-arm of its timer, which at 32 peers ate most of what the batching saved.
///
/// Thread-safety: an actor; the batch runs on the database queue through `inBatch`.
actor RevisionInserter {
    static let maxBatch = 500
    /// The ticker's period: the longest a revision waits for others before its transaction
    /// starts (half of it on average), so at most this much is added to a revision's hop and
    /// to the time until its `rev` is answered.
    static let insertionDelay: Duration = .milliseconds(20)
    let database: Database
    /// The revisions waiting for a transaction, in arrival order, each with the caller that
    /// waits for it (one caller may wait for several).
    private var waiting: [(revision: RevisionInsert, waiter: Waiter, index: Int)] = []
    /// Waiting for a tick of the ticker, or committing.
    private var scheduled = false

    /// One call of ``insert(_:)`` waiting for the transactions of its
    /// revisions: resumed once every one of them has an outcome (a call's revisions may be
    /// split over two transactions when more than ``maxBatch`` wait). Only touched on the
    /// inserter.
    private final class Waiter {
        var results: [Result<RevisionInsertOutcome, any Error>?]
        var remaining: Int
        let continuation: CheckedContinuation<[Result<RevisionInsertOutcome, any Error>], Never>

        init(count: Int, continuation: CheckedContinuation<[Result<RevisionInsertOutcome, any Error>], Never>) {
            results = Array(repeating: nil, count: count)
            remaining = count
            self.continuation = continuation
        }

        func settle(_ index: Int, _ result: Result<RevisionInsertOutcome, any Error>) {
            results[index] = result
            remaining -= 1
            if remaining == 0 { continuation.resume(returning: results.map { $0! }) }
        }
    }

    init(database: Database) {
        self.database = database
    }

    /// Inserts `revisions`, in this order, with the next batch, and returns each one's
    /// outcome: a per-document refusal, or the storage failure of its transaction (which
    /// rolled back every revision in it). One suspension for all of them — a `revs` message's
    /// revisions are handed over together (`Puller+Batches.swift`) rather than each by a task
    /// of its own. Never throws; returns at once for no revisions.
    func insert(_ revisions: [RevisionInsert]) async -> [Result<RevisionInsertOutcome, any Error>] {
        guard !revisions.isEmpty else { return [] }
        return await withCheckedContinuation { continuation in
            let waiter = Waiter(count: revisions.count, continuation: continuation)
            for (i, revision) in revisions.enumerated() { waiting.append((revision, waiter, i)) }
            if !scheduled {
                scheduled = true
                InsertionTicker.shared.schedule(self)
            }
        }
    }

    /// Commits what waits (called on a tick). Revisions that arrive meanwhile wait for the
    /// next tick, unless a full batch of them waits.
    fileprivate func commitWaiting() async {
        repeat {
            let batch = Array(waiting.prefix(Self.maxBatch))
            waiting.removeFirst(batch.count)
            let revisions = batch.map(\.revision)
            do {
                let outcomes = try await database.inBatch { txn in
                    try revisions.map { try Self.apply($0, txn) }
                }
                for (i, item) in batch.enumerated() { item.waiter.settle(item.index, .success(outcomes[i])) }
            } catch {
                for item in batch { item.waiter.settle(item.index, .failure(error)) }
            }
        } while waiting.count >= Self.maxBatch
        if waiting.isEmpty {
            scheduled = false
        } else {
            InsertionTicker.shared.schedule(self)
        }
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

/// The clock of every ``RevisionInserter`` of the process: every ``RevisionInserter/insertionDelay``
/// while any inserter has revisions waiting, it starts the transactions of those that asked
/// since the previous tick. One timer for all sessions, however many (a mesh peer runs one
/// per link, a benchmark process dozens), and none while nothing waits.
///
/// Thread-safety: its state is under a lock; the ticking runs in one task at a time.
final class InsertionTicker: Sendable {
    static let shared = InsertionTicker(period: RevisionInserter.insertionDelay)

    private struct State {
        var due: [RevisionInserter] = []
        var ticking = false
    }

    let period: Duration
    private let state = LockedValue(State())

    init(period: Duration) {
        self.period = period
    }

    /// `inserter` commits on the next tick (each asks once per batch).
    func schedule(_ inserter: RevisionInserter) {
        let start = state.withLock { s -> Bool in
            s.due.append(inserter)
            defer { s.ticking = true }
            return !s.ticking
        }
        if start { Task { await self.tick() } }
    }

    private func tick() async {
        while true {
            try? await Task.sleep(for: period)
            let due = state.withLock { s -> [RevisionInserter] in
                defer { s.due = [] }
                if s.due.isEmpty { s.ticking = false }
                return s.due
            }
            if due.isEmpty { return }
            for inserter in due { Task { await inserter.commitWaiting() } }
        }
    }
}
