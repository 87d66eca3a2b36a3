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
/// where `blip` is a not-yet-started ``BLIPConnection`` (e.g. `BLIPConnection(connection:)`
/// over an accepted transport connection). `run()` starts it and returns when it closes.
public struct PassiveReplicationSession: Sendable {
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

        public init(readOnly: Bool = false, enableDeltaSync: Bool = false, replyTimeout: Duration = .seconds(60)) {
            self.readOnly = readOnly
            self.enableDeltaSync = enableDeltaSync
            self.replyTimeout = replyTimeout
        }
    }

    private let session: PassiveSession

    /// - Parameters:
    ///   - connection: a BLIP connection that has not been started.
    ///   - collections: the collections this side serves (all of `database`).
    public init(connection: BLIPConnection, database: Database, collections: [Collection], options: Options = Options()) {
        session = PassiveSession(blip: connection, database: database,
                                 collections: collections.map { SessionCollection(collection: $0, config: CollectionConfiguration()) },
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
