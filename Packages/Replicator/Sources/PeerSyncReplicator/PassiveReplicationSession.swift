import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// The passive (listener) side of one replication connection: serves `getCollections`
/// (collection-aware clients) and legacy clients (first message anything else: only the
/// default collection, no `collection` property), checkpoints, pushes to subscribers
/// (`subChanges` → `changes` + `rev`), accepts pushes (`proposeChanges`/`changes` + `rev`,
/// conflicting ones answered 409), and answers `getAttachment` from the blob store.
///
/// Usage: `await PassiveReplicationSession(connection: blip, database: db, collections: [c]).run()`
/// where `blip` is a not-yet-started `BLIPConnection` (e.g. `BLIPConnection(connection:)`
/// over an accepted transport connection). `run()` starts it and returns when it closes.
public struct PassiveReplicationSession: Sendable {
    /// How a passive session treats its peer; the defaults are a listener's (read-write, no delta
    /// sync, 60 s reply timeout).
    public struct Options: Sendable {
        /// Peers may pull but not push (pushes are answered `HTTP`/403).
        public var readOnly: Bool
        /// Delta sync: replies to the peer's `changes`/`proposeChanges` carry `deltas: true`,
        /// so the peer may push revisions as JSON deltas (see ``JSONDelta``), and revisions
        /// this side sends to a subscribed peer go as deltas when it offers them (active peers
        /// always do). When `false` (the default) every revision travels whole.
        public var enableDeltaSync: Bool
        /// How long to wait for the peer to answer a request before closing the connection.
        public var replyTimeout: Duration
        /// Called with every batch of documents this side sent to the peer (`isPush` true) or
        /// stored from it (`isPush` false), on a session task, in the order they happened per
        /// direction; keep it quick. Default nil.
        public var onDocumentReplication: (@Sendable (DocumentReplication) -> Void)? = nil

        /// Options with these values and no document replication callback.
        public init(readOnly: Bool = false, enableDeltaSync: Bool = false, replyTimeout: Duration = .seconds(60)) {
            self.readOnly = readOnly
            self.enableDeltaSync = enableDeltaSync
            self.replyTimeout = replyTimeout
        }
    }

    private let session: PassiveSession

    /// - Parameters:
    ///   - connection: a BLIP connection that has not been started.
    ///   - database: the database whose collections are served.
    ///   - collections: the collections this side serves (all of `database`).
    ///   - options: read-only mode, delta sync and the reply timeout; default ``Options/init(readOnly:enableDeltaSync:replyTimeout:)``'s defaults.
    public init(connection: BLIPConnection, database: Database, collections: [Collection], options: Options = Options()) {
        self.init(connection: connection, database: database,
                  collectionConfigurations: collections.map { ($0, CollectionConfiguration()) }, options: options)
    }

    /// Serves `collectionConfigurations` with their settings: the push filter and document IDs
    /// choose what the peer may pull from this side, the pull filter which of the revisions it
    /// pushes are stored (a refused one is acknowledged and skipped, as when pulling). Conflict
    /// resolvers are not used: a passive side refuses conflicting pushes (409) instead.
    public init(connection: BLIPConnection, database: Database,
                collectionConfigurations: [(collection: Collection, config: CollectionConfiguration)],
                options: Options = Options()) {
        session = PassiveSession(blip: connection, database: database,
                                 collections: collectionConfigurations.map { SessionCollection(collection: $0.collection, config: $0.config) },
                                 options: options)
    }

    /// Serves the peer; returns when the connection has closed (either side).
    public func run() async {
        await session.run()
    }

    /// Closes the connection; ``run()`` then returns.
    public func stop() async {
        await session.stop()
    }
}
