import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// What a session reports while it runs (all optional; called from the workers' tasks, never
/// with a worker suspended in the middle of an update).
struct SessionEvents: Sendable {
    var documents: @Sendable (DocumentReplication) -> Void = { _ in }
    /// Completed and total change counts grew by these amounts.
    var progress: @Sendable (_ completed: Int, _ total: Int) -> Void = { _, _ in }
    /// The session became busy (true) or caught up / idle (false). Called under the session
    /// context's lock, so busy and idle reports arrive in the order they happened: it must not
    /// call back into the session.
    var busy: @Sendable (Bool) -> Void = { _ in }
}

struct SessionCollection: Sendable {
    let collection: Collection
    let config: CollectionConfiguration
    var resolver: any ConflictResolver { config.conflictResolver ?? ConflictResolvers.default }
    /// `name` for the default scope, `scope.name` otherwise (the `getCollections` path).
    var path: String {
        collection.scope.name == "_default" ? collection.name : "\(collection.scope.name).\(collection.name)"
    }
    var isDefault: Bool { collection.scope.name == "_default" && collection.name == "_default" }
}

/// Which collection each protocol index names, and whether requests carry a `collection`
/// property (a small state machine; see ``SessionContext/collection(of:)``).
enum CollectionTable: Sendable {
    /// Passive side before the first message: `getCollections` picks among `served`
    /// (``SessionContext/beginCollectionAwareMode()``); any other first message selects legacy
    /// mode with the default collection.
    case awaitingFirstMessage(served: [SessionCollection])
    /// Every request names its collection by index in a `collection` property; nil where the
    /// peer asked for a collection that is not served.
    case collectionAware([SessionCollection?])
    /// No `collection` property (Couchbase Lite 2.x/3.0, or a peer that answered BLIP/404 to
    /// `getCollections`): only the default collection; nil when it is not served.
    case legacy(SessionCollection?)
}

/// What keeps a session busy: a push not caught up, or a pull not caught up or with revisions
/// still pending, per collection index. The session is idle when no part is busy.
enum BusyPart: Hashable, Sendable { case push(Int), pull(Int) }

/// The thin part of one replication connection that its workers share (LiteCore's
/// `Replicator` object without its workers): the BLIP connection, the collection table, the
/// events, the cache of revisions known to be on the peer, the busy/idle state, and the
/// session's failure and stop. It sends nothing on its own: the workers (``Pusher``,
/// ``Puller``, ``Responder``) speak the protocol; ``ActiveSession`` and ``PassiveSession`` decide
/// which workers exist and route the peer's requests to them.
///
/// Thread-safety: immutable references plus one ``LockedValue`` for the mutable state, so the
/// workers (separate actors) use it without a hop. Nothing suspends under the lock. Lock order:
/// this lock, then whatever `events.busy` takes (the replicator's status lock).
final class SessionContext: Sendable {
    let blip: BLIPConnection
    let database: Database
    let events: SessionEvents
    /// How long an awaited reply may take (then the request throws `.timeout`).
    let replyTimeout: Duration
    /// Changes per `changes`/`proposeChanges` batch, and the `batch` asked for in `subChanges`.
    static let batchSize = 200
    /// The history length sent with a revision unless the peer's reply names another.
    static let maxHistory = 50

    private struct State {
        var table: CollectionTable
        /// Revisions known to be on the peer, per collection index and document. Bounded (see
        /// ``RecentMap``): memory stays flat however many documents replicate.
        var peerRevisions: [Int: RecentMap<PackedRevisionID>] = [:]
        var busyParts: Set<BusyPart> = []
        var reportedBusy: Bool?
        var closed = false
        var failure: PeerSyncError?
        var stopActions: [@Sendable () async -> Void] = []
        /// Documents whose conflict handling is under way (``handlingConflicts(of:isolation:_:)``),
        /// with how many tasks hold or wait for each.
        var documentLocks: [String: (lock: AsyncLock, users: Int)] = [:]
    }

    private let state: LockedValue<State>

    init(blip: BLIPConnection, database: Database, table: CollectionTable, replyTimeout: Duration,
         events: SessionEvents = SessionEvents()) {
        self.blip = blip
        self.database = database
        self.events = events
        self.replyTimeout = replyTimeout
        state = LockedValue(State(table: table))
    }

    // MARK: - Requests

    /// Sends `message` and waits for its reply, at most ``replyTimeout`` (the connection's one
    /// reply watchdog: no task, timer or lock per request). Throws `.timeout` naming `what`, or
    /// the connection's error. Runs in the caller's isolation (a worker sending a `rev` does
    /// not hop to the global executor and back on top of the hop to the connection).
    func send(_ message: BLIPMessage, _ what: String,
              isolation: isolated (any Actor)? = #isolation) async throws -> BLIPMessage {
        try await blip.sendRequest(message, timeout: replyTimeout, waitingFor: what)
    }

    /// The `collection` property naming collection `index` (none in legacy mode).
    func collectionProperty(_ index: Int) -> BLIPProperties {
        state.withLock { s in
            if case .collectionAware = s.table { return [("collection", String(index))] }
            return [:]
        }
    }

    // MARK: - Collection table

    /// The collection a request is about, checked as LiteCore does: in collection-aware mode
    /// the `collection` property must name a served collection (`HTTP`/400 otherwise); in
    /// legacy mode it must be absent and the default collection served (`HTTP`/400, `HTTP`/404).
    /// On a passive side that has not seen a message yet, this first message (not
    /// `getCollections`) selects legacy mode.
    func collection(of request: BLIPRequest) throws -> (index: Int, collection: SessionCollection) {
        let value = request.properties["collection"]
        let table = state.withLock { s in
            if case .awaitingFirstMessage(let served) = s.table {
                s.table = .legacy(served.first { $0.isDefault })
            }
            return s.table
        }
        switch table {
        case .collectionAware(let indexed):
            guard let value, let index = Int(value) else {
                throw PeerSyncError.reply(.http(400, "inappropriate use of the collection property."))
            }
            guard indexed.indices.contains(index), let c = indexed[index] else {
                throw PeerSyncError.reply(.http(400, "the collection property is out of range."))
            }
            return (index, c)
        case .legacy(let c):
            guard value == nil else { throw PeerSyncError.reply(.http(400, "inappropriate use of the collection property.")) }
            guard let c else { throw PeerSyncError.reply(.http(404, "the default collection is not served")) }
            return (0, c)
        case .awaitingFirstMessage:
            preconditionFailure("the first message selected a mode above")
        }
    }

    /// Passive: `getCollections` arrived, which must be the first message (`BLIP`/400
    /// otherwise). Switches to collection-aware mode, with no collection until
    /// ``setCollections(_:)``, and returns the served collections to choose from.
    func beginCollectionAwareMode() throws -> [SessionCollection] {
        try state.withLock { s throws(PeerSyncError) in
            guard case .awaitingFirstMessage(let served) = s.table else {
                throw PeerSyncError.reply(.blip(400, "getCollections must be the first message"))
            }
            s.table = .collectionAware([])
            return served
        }
    }

    /// Passive: the collections the peer's `getCollections` named, in protocol-index order
    /// (nil where not served).
    func setCollections(_ indexed: [SessionCollection?]) {
        state.withLock { $0.table = .collectionAware(indexed) }
    }

    /// Active: the peer answered `getCollections` with BLIP/404 (a legacy peer): requests go
    /// without a `collection` property, for `collection` only.
    func useLegacyMode(_ collection: SessionCollection) {
        state.withLock { $0.table = .legacy(collection) }
    }

    // MARK: - Revisions known to be on the peer

    /// The revision of `docID` the peer is known to have (its current one, as far as this
    /// session saw), if still remembered.
    func peerRevision(_ index: Int, _ docID: String) -> RevisionID? {
        state.withLock { $0.peerRevisions[index]?[docID] }?.revisionID
    }

    /// Whether the peer is known to have `revID` of `docID` as its current revision (the
    /// same as `peerRevision(index, docID) == revID`, without building a revision ID).
    func peerHas(_ index: Int, _ docID: String, _ revID: RevisionID) -> Bool {
        let known = state.withLock { $0.peerRevisions[index]?[docID] }
        return known == PackedRevisionID(revID)
    }

    /// Records that the peer has `revID` of `docID` (nil: forget what it had).
    func setPeerRevision(_ index: Int, _ docID: String, _ revID: RevisionID?) {
        state.withLock { s in
            if let revID {
                s.peerRevisions[index, default: RecentMap()][docID] = PackedRevisionID(revID)
            } else {
                s.peerRevisions[index]?[docID] = nil
            }
        }
    }

    // MARK: - Conflict handling, one document at a time

    /// Runs `body` as the only conflict handling of `docID` in this session at a time (FIFO).
    /// The Pusher (settling a proposal the peer refused) and the Puller (storing a pulled
    /// revision and resolving it, or resolving against the peer's current revision) may meet
    /// the same conflict at once; the second waits, then finds the document resolved, so the
    /// resolver is asked once per conflict. `body` runs in the caller's isolation; waiting is
    /// not cancellable. Other documents are not held up.
    func handlingConflicts<T: Sendable>(of docID: String, isolation: isolated (any Actor)? = #isolation,
                                        _ body: () async throws -> T) async rethrows -> T {
        let lock = state.withLock { s -> AsyncLock in
            let entry = s.documentLocks[docID] ?? (AsyncLock(), 0)
            s.documentLocks[docID] = (entry.lock, entry.users + 1)
            return entry.lock
        }
        defer { leaveConflictHandling(of: docID) }
        // The common case, nobody else on this document, without a suspension.
        if !lock.tryAcquire() { await lock.acquire() }
        defer { lock.release() }
        return try await body()
    }

    /// Begins the conflict handling of `docID` (as ``handlingConflicts(of:isolation:_:)``
    /// does) only if nobody is in it or waiting for it, without suspending: the hold, to be
    /// ended exactly once with ``endConflictHandling(_:)``, or nil (nothing changed). For a
    /// caller that holds several documents across one suspension (the revisions of a `revs`
    /// message, inserted together): never waiting is what keeps two such callers, or one and
    /// a waiting ``handlingConflicts(of:isolation:_:)``, from waiting for each other.
    func tryBeginConflictHandling(of docID: String) -> ConflictHandlingHold? {
        state.withLock { s -> ConflictHandlingHold? in
            let entry = s.documentLocks[docID] ?? (AsyncLock(), 0)
            guard entry.lock.tryAcquire() else { return nil }
            s.documentLocks[docID] = (entry.lock, entry.users + 1)
            return ConflictHandlingHold(docID: docID, lock: entry.lock)
        }
    }

    /// Ends a hold from ``tryBeginConflictHandling(of:)``: the next waiter, if any, goes on.
    func endConflictHandling(_ hold: ConflictHandlingHold) {
        hold.lock.release()
        leaveConflictHandling(of: hold.docID)
    }

    /// One user of `docID`'s lock fewer; the entry goes with its last user.
    private func leaveConflictHandling(of docID: String) {
        state.withLock { s in
            guard let entry = s.documentLocks[docID] else { return }
            s.documentLocks[docID] = entry.users > 1 ? (entry.lock, entry.users - 1) : nil
        }
    }

    // MARK: - Busy, failure, stop

    /// Records whether `part` is busy and reports a change of the whole session's state (busy
    /// while any direction of any collection is busy) through `events.busy`, in order.
    func setBusy(_ part: BusyPart, _ busy: Bool) {
        state.withLock { s in
            if busy { s.busyParts.insert(part) } else { s.busyParts.remove(part) }
            let now = !s.busyParts.isEmpty
            guard now != s.reportedBusy else { return }
            s.reportedBusy = now
            events.busy(now)
        }
    }

    /// Whether the session was stopped (or failed): workers stop starting new work.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Why the session failed on its own side (see ``fail(_:)``), if it did.
    var failure: PeerSyncError? { state.withLock { $0.failure } }

    /// Ends the session with `error` (the first one wins): the run that owns it throws `error`
    /// instead of completing, and the session stops (``stop()``). Used by a pull that cannot
    /// complete: a pulled revision that could not be stored, a revision the peer could not read.
    func fail(_ error: PeerSyncError) {
        let first = state.withLock { s -> Bool in
            guard s.failure == nil else { return false }
            s.failure = error
            return true
        }
        if first { Task { await self.stop() } }
    }

    /// Registers what ``stop()`` must do to a worker (cancel its tasks, release its waiters);
    /// `action` should hold the worker weakly (workers hold the context). After the session
    /// stopped, `action` runs at once (in a new task).
    func onStop(_ action: @escaping @Sendable () async -> Void) {
        let closed = state.withLock { s -> Bool in
            if !s.closed { s.stopActions.append(action) }
            return s.closed
        }
        if closed { Task { await action() } }
    }

    /// Stops the session: marks it closed, stops every worker (``onStop(_:)``), closes the
    /// connection. Idempotent.
    func stop() async {
        let actions = state.withLock { s -> [@Sendable () async -> Void] in
            s.closed = true
            defer { s.stopActions = [] }
            return s.stopActions
        }
        for action in actions { await action() }
        database.revisionsInFlight.releaseAll(owner: ObjectIdentifier(self))
        await blip.close()
    }
}

/// One document's conflict handling, begun without waiting
/// (``SessionContext/tryBeginConflictHandling(of:)``) and not yet ended.
struct ConflictHandlingHold: Sendable {
    let docID: String
    fileprivate let lock: AsyncLock
}
