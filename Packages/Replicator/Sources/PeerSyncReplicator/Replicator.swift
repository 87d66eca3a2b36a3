import Foundation
import PeerSyncCore
import PeerSyncBLIP
@_spi(Replication) import PeerSyncDatabase
import PeerSyncTransport

/// Direction of a replicator (Couchbase Lite's `ReplicatorType`).
public enum ReplicatorType: Sendable, Hashable {
    /// Send local changes to the peer and receive the peer's (the default).
    case pushAndPull
    /// Only send local changes to the peer.
    case push
    /// Only receive the peer's changes.
    case pull
}

/// Opens the connection a replicator runs over, from the configuration it is given (its
/// `target`, `authenticator` and the ``ReplicatorConfiguration/connectorOptions`` the connector
/// defines). Called once per connection attempt, from the replicator's task; errors it throws
/// are retried or stop the replicator like any other (see ``Replicator``). This module knows no
/// transport: `PeerSyncWebSocketReplication` provides the `ws://`/`wss://` connector (and
/// `Replicator(config:)`), tests and custom transports pass their own.
public typealias ReplicatorConnector = @Sendable (ReplicatorConfiguration) async throws -> any MessageConnection

/// Replicator settings (Couchbase Lite's `ReplicatorConfiguration`), with its defaults (the
/// `default…` constants, with Couchbase Lite's names and values, e.g. ``defaultHeartbeat``).
/// A value type: a replicator keeps the copy it was created with.
public struct ReplicatorConfiguration: Sendable {
    /// The peer to replicate with, e.g. `wss://host:4984/db`.
    public let target: Endpoint
    /// Collections and their settings, in the order given.
    public private(set) var collectionConfigurations: [(collection: Collection, config: CollectionConfiguration)] = []
    /// Push, pull or both. Default ``defaultType`` (`.pushAndPull`).
    public var replicatorType: ReplicatorType = Self.defaultType
    /// Keep replicating changes made after the first catch-up. Default ``defaultContinuous``
    /// (false: stop when caught up).
    public var continuous = Self.defaultContinuous
    /// Credentials presented to the peer (used by the connector). Default nil.
    public var authenticator: (any Authenticator)?
    /// Settings that only a connector reads, under keys the connector's module defines; that
    /// module also adds them as typed properties of this struct (the WebSocket connector's
    /// `pinnedServerCertificate`, `acceptOnlySelfSignedServerCertificate`, `headers`,
    /// `networkInterface`). Empty by default: every key reads as its default value.
    public var connectorOptions = ReplicatorConnectorOptions()
    /// Keep-alive (ping) interval; default ``defaultHeartbeat`` (300 s). Also bounds how long a
    /// reply is awaited (see ``replyTimeout``). As in Couchbase Lite, zero means the default
    /// (the replicator's ``Replicator/config`` holds the value used) and a negative value
    /// throws `.invalidArgument` from ``Replicator/init(config:connector:)``.
    /// ``heartbeatTimeInterval`` is the same setting in seconds.
    public var heartbeat: Duration = Self.defaultHeartbeat
    /// Connection attempts in a row that may fail with a transient error before the replicator
    /// gives up (1: no retry); 0 = default: ``defaultMaxAttemptsSingleShot`` (10) for one-shot,
    /// ``defaultMaxAttemptsContinuous`` (unlimited) for continuous. The count starts again
    /// after a connection that got going (see ``Replicator``), so it bounds consecutive
    /// failures, not failures over the whole run. Negative values throw from
    /// ``Replicator/init(config:connector:)``.
    public var maxAttempts = 0
    /// Upper bound of the exponential backoff between attempts (1 s, 2 s, 4 s …); default
    /// ``defaultMaxAttemptWaitTime`` (300 s). As in Couchbase Lite, zero means the default and a
    /// negative value throws `.invalidArgument` from ``Replicator/init(config:connector:)``.
    /// ``maxAttemptWaitTimeInterval`` is the same setting in seconds.
    public var maxAttemptWaitTime: Duration = Self.defaultMaxAttemptWaitTime
    /// Purge documents the peer revoked access to (a revocation flag in `changes`, or a
    /// pulled revision with `"_removed": true`), as Couchbase Lite does. Default true. Either
    /// way a document replication event with ``DocumentFlags/accessRemoved`` is emitted; when
    /// false (or when the collection has a `documentIDs` filter, or its pull filter refuses
    /// the document with that flag) the document is kept. Peer-to-peer listeners never revoke
    /// access; Sync Gateway does. Default ``defaultEnableAutoPurge`` (true).
    public var enableAutoPurge = Self.defaultEnableAutoPurge
    /// PeerSync extension: how long an awaited reply may take before the connection is
    /// considered dead (then retried). Default 60 s.
    public var replyTimeout: Duration = .seconds(60)
    /// PeerSync extension: a stable name of the peer (the mesh: its peer ID) that keys the
    /// checkpoints instead of ``target``'s URL, so a peer reached at a new address (another
    /// IP, port or transport) resumes from the same checkpoints. Default nil: the URL keys them.
    public var remoteIdentity: String?

    /// A configuration replicating with `target` (e.g. `try URLEndpoint(url: listener.urls[0])`)
    /// and no collections yet: add them with ``addCollection(_:config:)``, or creating the
    /// replicator throws `.invalidArgument`. Every other setting has its default.
    public init(target: Endpoint) {
        self.target = target
    }

    /// A copy of `config` (Couchbase Lite's `init(config:)`; in Swift, `var copy = config`
    /// does the same).
    public init(config: ReplicatorConfiguration) {
        self = config
    }

    /// Adds a collection, or replaces the settings of one added before (it keeps its place).
    /// A nil `config` is the default `CollectionConfiguration()`. Returns the configuration
    /// after the change (Couchbase Lite's chaining form); the call changes `self` either way.
    @discardableResult
    public mutating func addCollection(_ collection: Collection, config: CollectionConfiguration? = nil) -> ReplicatorConfiguration {
        let settings = config ?? CollectionConfiguration()
        if let index = collectionConfigurations.firstIndex(where: { $0.collection == collection }) {
            collectionConfigurations[index].config = settings
        } else {
            collectionConfigurations.append((collection, settings))
        }
        return self
    }

    /// Adds several collections with the same settings (see ``addCollection(_:config:)``); an
    /// empty array changes nothing.
    @discardableResult
    public mutating func addCollections(_ collections: [Collection], config: CollectionConfiguration? = nil) -> ReplicatorConfiguration {
        for c in collections { addCollection(c, config: config) }
        return self
    }

    /// Removes a collection and its settings; a collection that was not added changes nothing.
    @discardableResult
    public mutating func removeCollection(_ collection: Collection) -> ReplicatorConfiguration {
        collectionConfigurations.removeAll { $0.collection == collection }
        return self
    }

    /// The configured collections.
    public var collections: [Collection] { collectionConfigurations.map(\.collection) }

    /// What identifies the peer in checkpoint IDs: ``remoteIdentity`` (prefixed so that it can
    /// never equal a URL) or else the target URL.
    var checkpointRemoteKey: String { remoteIdentity.map { "identity:" + $0 } ?? target.description }

    /// The settings of one collection, nil if it was not added. A copy: to change them, add
    /// the collection again with the new settings. Same as ``collectionConfig(_:)``.
    public func collectionConfiguration(_ collection: Collection) -> CollectionConfiguration? {
        collectionConfigurations.first { $0.collection == collection }?.config
    }

    /// Couchbase Lite's name for ``collectionConfiguration(_:)``.
    public func collectionConfig(_ collection: Collection) -> CollectionConfiguration? {
        collectionConfiguration(collection)
    }
}

/// Activity of a replicator (Couchbase Lite's `ReplicatorActivityLevel`).
public enum ReplicatorActivityLevel: Sendable, Hashable {
    /// Not running: never started, stopped, finished (one-shot) or failed (see
    /// ``ReplicatorStatus/error``).
    case stopped
    /// Waiting to reconnect after a network error (continuous, or retries left).
    case offline
    /// Opening the connection to the peer and handshaking.
    case connecting
    /// Connected and caught up; a continuous replicator waits for new changes.
    case idle
    /// Transferring changes.
    case busy
}

/// Progress: changes completed out of those known so far (not a percentage of the database).
public struct ReplicatorProgress: Sendable, Hashable {
    /// Changes handled so far.
    public var completed: Int
    /// Changes known so far; grows as the peer and the local database report more.
    public var total: Int

    /// A progress of `completed` out of `total`.
    public init(completed: Int, total: Int) {
        self.completed = completed
        self.total = total
    }
}

/// A snapshot of a replicator's state. Two statuses are equal when activity, progress,
/// error and retry are.
public struct ReplicatorStatus: Sendable, Hashable {
    /// What the replicator is doing.
    public var activity: ReplicatorActivityLevel
    /// How far it got with the changes it knows of.
    public var progress: ReplicatorProgress
    /// The last error (a stopped replicator keeps the one that stopped it).
    public var error: PeerSyncError?
    /// PeerSync extension (Couchbase Lite's status has no such field): which attempt just
    /// failed with a transient error and when the next one starts. Set while `.offline`
    /// (waiting to retry) and on the `.stopped` status of a replicator that gave up after
    /// `maxAttempts` transient failures (then ``ReplicatorRetry/nextAttemptIn`` is nil);
    /// nil otherwise, including after a permanent error.
    public var retry: ReplicatorRetry? = nil

    /// For components that report a replication's state in these terms (the mesh's incoming links).
    public init(activity: ReplicatorActivityLevel, progress: ReplicatorProgress, error: PeerSyncError?,
                retry: ReplicatorRetry? = nil) {
        self.activity = activity
        self.progress = progress
        self.error = error
        self.retry = retry
    }
}

/// A failed connection attempt of a replicator (see ``ReplicatorStatus/retry``).
public struct ReplicatorRetry: Sendable, Hashable {
    /// The attempt that failed, from 1, counted since the start or since the last connection
    /// that got going (the count and the backoff start again after such a connection).
    public var failedAttempt: Int
    /// How long the replicator waits before the next attempt: `min(2^(failedAttempt-1) s,
    /// maxAttemptWaitTime)`; nil when it gave up (no attempt left).
    public var nextAttemptIn: Duration?

    /// A retry with these values.
    public init(failedAttempt: Int, nextAttemptIn: Duration?) {
        self.failedAttempt = failedAttempt
        self.nextAttemptIn = nextAttemptIn
    }
}

/// A status change.
public struct ReplicatorChange: Sendable {
    /// The replicator whose status changed.
    public let replicator: Replicator
    /// Its new status.
    public let status: ReplicatorStatus
}

/// Returned by listener registrations (Couchbase Lite's `ListenerToken` for a replicator);
/// ``remove()`` or ``Replicator/removeChangeListener(withToken:)`` stops the notifications.
public final class ReplicatorListenerToken: Sendable {
    private let onRemove: @Sendable () -> Void
    init(_ onRemove: @escaping @Sendable () -> Void) { self.onRemove = onRemove }
    /// Removes the listener: no change after this call is reported to it (notifications
    /// already queued before it may still arrive). Idempotent; callable from any task.
    public func remove() { onRemove() }
}

/// Replicates a database with a peer (Couchbase Lite's `Replicator`).
///
/// Thread-safe; all methods may be called from any task. Listeners are called on an
/// internal serial queue, in order; a status listener is called only when the status
/// (activity, progress or error) changed, so no two consecutive calls carry equal statuses.
/// The replicator registers itself with its database while running: `Database.close()`
/// stops it first (it ends `.stopped`, no error), and starting it on a closed database stops
/// it at once with `.closed`. One-shot replicators stop (activity `.stopped`, `error`
/// nil) once both directions are caught up; continuous ones go `.idle` and pick up changes
/// on either side. Transient failures (refused, reset, timeouts, 5xx, peer closed) are
/// retried with exponential backoff (1 s, 2 s, 4 s … capped by `maxAttemptWaitTime`, at most
/// `maxAttempts` attempts in a row); permanent ones (401/403, collection not served, protocol
/// errors, TLS trust failures) stop the replicator with the error. As in Couchbase Lite, the
/// attempt count — and so the backoff — starts again after a connection that got going: one
/// whose replication started (the peer answered the opening checkpoint exchange and the
/// session reported busy or idle), so a connection that breaks after making progress is
/// retried after the first step (1 s) however many breaks came before it, and a one-shot
/// replicator over a link that keeps breaking completes as long as each connection gets
/// going. A peer that accepts connections but never answers does not reset the count.
public final class Replicator: Sendable {
    /// The configuration the replicator runs with: the one it was created with, a zero
    /// `heartbeat` or `maxAttemptWaitTime` replaced by its default.
    public let config: ReplicatorConfiguration
    private let connector: ReplicatorConnector

    private struct State {
        var status = ReplicatorStatus(activity: .stopped, progress: .init(completed: 0, total: 0), error: nil)
        var task: Task<Void, Never>?
        var generation = 0
        var statusListeners: [UInt64: @Sendable (ReplicatorChange) -> Void] = [:]
        var documentListeners: [UInt64: @Sendable (DocumentReplication) -> Void] = [:]
        var nextID: UInt64 = 1
        var serverCertificate: [UInt8]?
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// The registration with the database while running (removed when the run ends).
        var stoppable: ActiveStoppable?
        /// The status listeners were last given (nil before the first notification).
        var lastNotified: ReplicatorStatus?
        /// Set when the current connection's session reports busy or idle: the peer answered
        /// the opening exchange and the replication got going (the retry count starts again).
        var connectionGotGoing = false
    }

    private let state = LockedValue(State())
    /// Listener calls, in order, one at a time (a burst of events costs one thread wake-up).
    /// The replicator's own, or one it shares with others (``init(config:connector:listenerQueue:)``).
    private let queue: SerialDelivery

    /// A replicator that opens its connections with `connector` (a custom transport's, or a
    /// test's; `Replicator(config:)` uses the WebSocket connector). It does not start: call
    /// ``start(reset:)``.
    ///
    /// As in Couchbase Lite, a zero `heartbeat` or `maxAttemptWaitTime` means the default
    /// (``ReplicatorConfiguration/defaultHeartbeat``,
    /// ``ReplicatorConfiguration/defaultMaxAttemptWaitTime``): ``config`` holds the values used.
    /// Throws `.invalidArgument` for a configuration without collections, collections of more
    /// than one database, a negative heartbeat, `maxAttempts` or wait time, or a non-positive
    /// `replyTimeout`.
    public convenience init(config: ReplicatorConfiguration, connector: @escaping ReplicatorConnector) throws {
        try self.init(config: config, connector: connector,
                      listenerQueue: SerialDelivery(label: "peersync.replicator.listeners"))
    }

    /// A replicator whose listeners are called on `listenerQueue`, which other replicators
    /// (and their owner's own events) may share: the mesh runs every link's replicator on its
    /// event queue, so a burst of events from many links costs one thread wake-up, not one per
    /// link. Listeners on a shared queue delay each other: keep them quick.
    package init(config: ReplicatorConfiguration, connector: @escaping ReplicatorConnector,
                 listenerQueue: SerialDelivery) throws {
        guard !config.collectionConfigurations.isEmpty else {
            throw PeerSyncError(.invalidArgument, "the replicator configuration has no collections")
        }
        guard config.heartbeat >= .zero else { throw PeerSyncError(.invalidArgument, "heartbeat must not be negative") }
        guard config.maxAttempts >= 0 else { throw PeerSyncError(.invalidArgument, "maxAttempts must not be negative") }
        guard config.maxAttemptWaitTime >= .zero else {
            throw PeerSyncError(.invalidArgument, "maxAttemptWaitTime must not be negative")
        }
        guard config.replyTimeout > .zero else { throw PeerSyncError(.invalidArgument, "replyTimeout must be positive") }
        let dbs = Set(config.collections.map { ObjectIdentifier($0.database) })
        guard dbs.count == 1 else {
            throw PeerSyncError(.invalidArgument, "all collections of a replicator must belong to one database")
        }
        var effective = config
        if effective.heartbeat == .zero { effective.heartbeat = ReplicatorConfiguration.defaultHeartbeat }
        if effective.maxAttemptWaitTime == .zero { effective.maxAttemptWaitTime = ReplicatorConfiguration.defaultMaxAttemptWaitTime }
        self.config = effective
        self.connector = connector
        self.queue = listenerQueue
    }

    /// The current status (a snapshot; ``addChangeListener(_:)`` and ``changes()`` report
    /// every change). Thread-safe.
    public var status: ReplicatorStatus { state.withLock { $0.status } }

    /// The server's TLS certificate (DER) of the last connection, if it had TLS.
    public var serverCertificate: [UInt8]? { state.withLock { $0.serverCertificate } }

    /// Starts replicating; does nothing if already running. With `reset`, checkpoints are
    /// ignored and everything is compared again. On a closed (or closing) database the
    /// replicator does not run: it stops at once, its status `.stopped` with a `.closed` error.
    public func start(reset: Bool = false) {
        let database = config.collectionConfigurations[0].collection.database
        let description = "replicator to \(config.target)"
        state.withLock { s in
            guard s.task == nil else { return }
            s.generation += 1
            let generation = s.generation
            let stoppable: ActiveStoppable
            do throws(PeerSyncError) {
                // Lock order: the replicator's state, then the database's registry.
                stoppable = try database.addActiveStoppable(description) { [weak self] in
                    guard let self else { return }
                    self.stop()
                    await self.waitUntilStopped()
                }
            } catch {
                s.status = ReplicatorStatus(activity: .stopped, progress: .init(completed: 0, total: 0), error: error)
                notifyStatusLocked(&s)
                return
            }
            s.stoppable = stoppable
            s.status = ReplicatorStatus(activity: .connecting, progress: .init(completed: 0, total: 0), error: nil)
            notifyStatusLocked(&s)
            // Created under the lock so that a stop() right after start() finds the task.
            s.task = Task { await self.runLoop(reset: reset, generation: generation) }
        }
    }

    /// Stops replicating (asynchronously; the status becomes `.stopped`).
    public func stop() {
        let task = state.withLock { $0.task }
        task?.cancel()
    }

    /// Waits until the replicator is stopped and its listeners have been given the `.stopped`
    /// status (listeners registered when it stopped have returned from that call).
    public func waitUntilStopped() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let stopped = state.withLock { s -> Bool in
                if s.task == nil { return true }
                s.stopWaiters.append(c)
                return false
            }
            // Resumed on the listener queue, after the `.stopped` notification (notifications
            // are enqueued under the state lock, in order; the run enqueues it before clearing
            // `task`).
            if stopped { queue.async { c.resume() } }
        }
    }

    // MARK: Listeners

    /// Calls `listener` with every status change, in order, on the replicator's serial
    /// listener queue (never two equal statuses in a row); registered before ``start(reset:)``
    /// it sees every change from `.connecting` to `.stopped`. Keep it quick: it delays the
    /// notifications after it. The token (or ``removeChangeListener(withToken:)``) removes it.
    @discardableResult
    public func addChangeListener(_ listener: @escaping @Sendable (ReplicatorChange) -> Void) -> ReplicatorListenerToken {
        addListener(listener, at: \.statusListeners)
    }

    /// Calls `listener` with every batch of pushed or pulled documents (or documents that
    /// failed to replicate), on the same serial queue as the status listeners; add it before
    /// ``start(reset:)`` to see every document. Every document stored or sent by a run is
    /// reported before that run's `.stopped` status — also a revision still being stored when
    /// the connection ended or ``stop()`` was called. The token (or
    /// ``removeChangeListener(withToken:)``) removes it.
    @discardableResult
    public func addDocumentReplicationListener(_ listener: @escaping @Sendable (DocumentReplication) -> Void) -> ReplicatorListenerToken {
        addListener(listener, at: \.documentListeners)
    }

    /// Removes a status or document listener (Couchbase Lite's name; the same as
    /// `token.remove()`): no change after this call is reported to it (notifications already
    /// queued may still arrive). Idempotent.
    public func removeChangeListener(withToken token: ReplicatorListenerToken) {
        token.remove()
    }

    /// Stores `listener` under a new ID in the table at `table`; the token removes it.
    private func addListener<Listener: Sendable>(_ listener: Listener,
                                                 at table: WritableKeyPath<State, [UInt64: Listener]> & Sendable) -> ReplicatorListenerToken {
        let id = state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s[keyPath: table][id] = listener
            return id
        }
        return ReplicatorListenerToken { [weak self] in _ = self?.state.withLock { $0[keyPath: table].removeValue(forKey: id) } }
    }

    /// Status changes as an async stream (ends when the consumer stops iterating).
    ///
    /// Its first element replays the status at the time of the call — so a stream created
    /// after ``start(reset:)`` misses nothing of the current state — followed by every later
    /// change, in order, none equal to the one before. Created before ``start(reset:)`` (or
    /// after the replicator stopped), the replayed first element is `.stopped`: a consumer
    /// that waits for `.stopped` should create the stream after starting.
    public func changes() -> AsyncStream<ReplicatorChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: ReplicatorChange.self)
        let id = state.withLock { s in
            let id = s.nextID
            s.nextID += 1
            s.statusListeners[id] = { continuation.yield($0) }
            // Under the lock: every later change is enqueued after this replay.
            continuation.yield(ReplicatorChange(replicator: self, status: s.status))
            return id
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.statusListeners.removeValue(forKey: id) } }
        return stream
    }

    /// Document replication events as an async stream. It has no replay: it yields the events
    /// of documents replicated after the call, not those before.
    public func documentReplications() -> AsyncStream<DocumentReplication> {
        let (stream, continuation) = AsyncStream.makeStream(of: DocumentReplication.self)
        let token = addDocumentReplicationListener { continuation.yield($0) }
        continuation.onTermination = { _ in token.remove() }
        return stream
    }

    // MARK: Pending documents

    /// IDs of documents of `collection` changed locally since the last saved checkpoint
    /// (they may already be on the peer if the checkpoint is behind). Throws `.invalidArgument`
    /// for a collection that is not configured or a pull-only replicator.
    public func pendingDocumentIDs(collection: Collection) async throws -> Set<String> {
        guard let cc = config.collectionConfiguration(collection) else {
            throw PeerSyncError(.invalidArgument, "collection is not part of this replicator", context: ["collection": collection.fullName])
        }
        guard config.replicatorType != .pull else {
            throw PeerSyncError(.invalidArgument, "a pull-only replicator has no pending documents")
        }
        let sc = SessionCollection(collection: collection, config: cc)
        let id = ActiveReplication.checkpointID(database: collection.database, remoteURL: config.checkpointRemoteKey, sc,
                                                push: config.replicatorType != .pull, pull: config.replicatorType != .push)
        let since = UInt64(clamping: try await collection.getLocal(id: id)?.properties["local"]?.intValue ?? 0)
        var out = Set<String>()
        var cursor = since
        while true {
            let batch = try await collection.changes(since: cursor, limit: 500)
            guard let last = batch.last else { break }
            for c in batch {
                if let ids = cc.documentIDs, !ids.contains(c.docID) { continue }
                if let filter = cc.pushFilter, (try? DocumentID.validate(c.docID)) != nil,
                   let doc = try await collection.documentIncludingDeleted(id: c.docID),
                   !filter(doc, c.deleted ? .deleted : []) { continue }
                out.insert(c.docID)
            }
            cursor = last.sequence
        }
        return out
    }

    /// Whether a document is among ``pendingDocumentIDs(collection:)``.
    public func isDocumentPending(_ documentID: String, collection: Collection) async throws -> Bool {
        try await pendingDocumentIDs(collection: collection).contains(documentID)
    }

    // MARK: Running

    private func setStatus(_ change: (inout ReplicatorStatus) -> Void) {
        state.withLock { s in
            change(&s.status)
            notifyStatusLocked(&s)
        }
    }

    /// Enqueues the current status for the status listeners unless it equals the last one
    /// enqueued. Called with the state lock held, so notifications are enqueued in the order
    /// of the changes.
    private func notifyStatusLocked(_ s: inout State) {
        guard s.status != s.lastNotified else { return }
        s.lastNotified = s.status
        let listeners = Array(s.statusListeners.values)
        guard !listeners.isEmpty else { return }
        let change = ReplicatorChange(replicator: self, status: s.status)
        queue.async { for l in listeners { l(change) } }
    }

    private func notifyDocuments(_ event: DocumentReplication) {
        let listeners = state.withLock { Array($0.documentListeners.values) }
        // Per document on a pull: no dispatch (a thread wake-up) when nobody listens.
        guard !listeners.isEmpty else { return }
        var stamped = event
        stamped.replicator = self
        let delivered = stamped
        queue.async { for l in listeners { l(delivered) } }
    }

    /// Disk full and damaged data stop a one-shot replicator at once (retrying cannot help it
    /// finish); a continuous one retries with backoff, the error in its status meanwhile, and
    /// resumes from its checkpoint once space is freed.
    private static func isPermanent(_ error: any Error, continuous: Bool) -> Bool {
        guard let e = error as? PeerSyncError else { return false }
        switch e.code {
        case .unauthorized, .collectionNotServed, .invalidArgument, .protocolError: return true
        case .diskFull, .corrupt: return !continuous
        default:
            // A 4xx from the peer (a BLIP error reply, or the HTTP status of a refused WebSocket
            // upgrade) but 408 and 429.
            if let status = e.blipError?.code ?? e.context["status"].flatMap(Int.init),
               (400..<500).contains(status), status != 408, status != 429 { return true }
            if e.code.rawValue.lowercased().contains("tls") || e.code.rawValue.lowercased().contains("certificate") { return true }
            return false
        }
    }

    /// The wait after failed attempt `attempt` (from 1) of a series: 1 s, 2 s, 4 s … capped
    /// by `maxWait`.
    private static func retryDelay(afterAttempt attempt: Int, maxWait: Duration) -> Duration {
        min(.seconds(1) * (1 << min(max(attempt - 1, 0), 30)), maxWait)
    }

    private func runLoop(reset: Bool, generation: Int) async {
        let cfg = config
        let maxAttempts = cfg.maxAttempts > 0 ? cfg.maxAttempts
            : (cfg.continuous ? ReplicatorConfiguration.defaultMaxAttemptsContinuous : ReplicatorConfiguration.defaultMaxAttemptsSingleShot)
        /// The current attempt of the series (from 1); the series starts again after a
        /// connection that got going.
        var attempt = 0
        var resetNext = reset
        var finalError: PeerSyncError?
        var finalRetry: ReplicatorRetry?
        let events = SessionEvents(
            documents: { [weak self] in self?.notifyDocuments($0) },
            progress: { [weak self] done, total in
                self?.setStatus { $0.progress.completed += done; $0.progress.total += total }
            },
            busy: { [weak self] busy in
                self?.state.withLock { $0.connectionGotGoing = true }
                // A one-shot replicator is busy until it stops; only continuous ones idle.
                guard busy || cfg.continuous else { return }
                self?.setStatus { s in
                    if s.activity == .busy || s.activity == .idle || s.activity == .connecting { s.activity = busy ? .busy : .idle }
                }
            })
        let collections = cfg.collectionConfigurations.map { SessionCollection(collection: $0.collection, config: $0.config) }
        let database = collections[0].collection.database
        while !Task.isCancelled {
            attempt += 1
            state.withLock { $0.connectionGotGoing = false }
            setStatus { $0.activity = .connecting; $0.retry = nil }
            do {
                let connection = try await connector(cfg)
                state.withLock { $0.serverCertificate = connection.peerCertificateChain.first }
                setStatus { $0.activity = .busy; $0.error = nil }
                let run = ActiveReplication(database: database, collections: collections,
                                            push: cfg.replicatorType != .pull, pull: cfg.replicatorType != .push,
                                            continuous: cfg.continuous, reset: resetNext, remoteURL: cfg.checkpointRemoteKey,
                                            enableAutoPurge: cfg.enableAutoPurge,
                                            replyTimeout: min(cfg.replyTimeout, cfg.heartbeat), events: events)
                resetNext = false
                try await withTaskCancellationHandler {
                    try await run.run(connection: connection)
                } onCancel: {
                    Task { await connection.close(code: .normal, reason: "replicator stopped") }
                }
                if !cfg.continuous { break }
                attempt = 0
            } catch {
                if Task.isCancelled { break }
                let e = (error as? PeerSyncError) ?? PeerSyncError(.io, "\(error)")
                // A connection that got going ends the series: this failure is the first of a new one.
                if state.withLock({ $0.connectionGotGoing }) { attempt = 1 }
                if Self.isPermanent(e, continuous: cfg.continuous) {
                    finalError = e
                    break
                }
                if attempt >= maxAttempts {
                    finalError = e
                    finalRetry = ReplicatorRetry(failedAttempt: attempt, nextAttemptIn: nil)
                    break
                }
                let delay = Self.retryDelay(afterAttempt: attempt, maxWait: cfg.maxAttemptWaitTime)
                setStatus { $0.activity = .offline; $0.error = e; $0.retry = ReplicatorRetry(failedAttempt: attempt, nextAttemptIn: delay) }
                do { try await Task.sleep(for: delay) } catch { break }
            }
        }
        state.withLock { s in
            s.status.activity = .stopped
            s.status.retry = finalRetry
            if let finalError { s.status.error = finalError }
            notifyStatusLocked(&s)
            s.task = nil
            s.stoppable?.remove()
            s.stoppable = nil
            // After the `.stopped` notification on the serial queue: waiters return once the
            // listeners have been given it.
            let waiters = s.stopWaiters
            s.stopWaiters = []
            if !waiters.isEmpty { queue.async { for w in waiters { w.resume() } } }
        }
    }
}
