import PeerSyncAuth
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncReplicator

/// Keeps a database in sync with every peer of a group, through a self-organising mesh
/// (Couchbase Lite's `MultipeerReplicator`): it publishes itself and browses the group on each
/// network's discovery, links to a bounded number of peers chosen by the topology rules
/// (module README, "Topology"), runs one continuous push-and-pull replication per link, shares
/// its links in its discovery metadata so every peer knows the graph, and heals: lost links
/// are dialled again with back-off, and a part of the group it cannot reach is bridged.
/// Documents reach every peer through the intermediate peers' databases, with Couchbase
/// Lite's conflict rules (the side that dialled a link resolves).
///
/// Beyond Couchbase Lite: a stopped replicator can be started again (`start()` after
/// `stop()`), and every getter (``peerID``, ``neighborPeers``, ``peerInfo(for:)``,
/// ``status``, ``graph``) answers from state at once, never waiting on the network.
///
/// Threading: every member from any task, concurrently. `start()` and `stop()` are
/// serialized. Listeners are called on one internal serial queue, in the order the events
/// happened; the `AsyncSequence`s deliver the same events. The replicator stops itself when
/// its database closes.
public final class MultipeerReplicator: Sendable {
    /// The configuration (copied at init).
    public let config: MultipeerReplicatorConfiguration
    /// This peer's ID: SHA-256 of its identity's DER certificate, lowercase hex
    /// (`Certificate/peerID`). Valid before start and after stop.
    public let peerID: PeerID
    /// The networks it runs on. A peer seen on several is linked over the preferred transport
    /// (Wi-Fi, then Bluetooth; between networks of one transport, the first given), over
    /// another when that one keeps failing, and moved back when it works again (module README,
    /// "Transports").
    public let networks: [MeshNetwork]

    private let hub = MeshEventHub()
    private let lifecycle = AsyncLock()

    private struct State {
        var run: MeshRun?
        var stoppable: ActiveStoppable?
    }

    private let state = LockedValue(State())

    /// Checks `config` (its tunables, see ``MultipeerReplicatorConfiguration``) and the networks;
    /// does not touch the network.
    ///
    /// - Throws: `PeerSyncError/Code/invalidArgument` for a tunable out of range, no network,
    ///   two networks of one transport, or a network whose transport `config.transports` does
    ///   not list.
    public init(config: MultipeerReplicatorConfiguration, networks: [MeshNetwork]) throws {
        try config.validateTunables()
        guard !networks.isEmpty else { throw PeerSyncError(.invalidArgument, "a multipeer replicator needs at least one network") }
        let transports = networks.map { $0.links.transport }
        guard Set(transports).count == transports.count else {
            throw PeerSyncError(.invalidArgument, "two networks have the same transport")
        }
        for transport in transports where !config.transports.contains(transport) {
            throw PeerSyncError(.invalidArgument, "a network uses \(transport), which config.transports does not list",
                                context: ["transport": transport.rawValue])
        }
        self.config = config
        self.peerID = try PeerID(digest: config.identity.certificate.sha256Digest)
        self.networks = networks
    }

    // MARK: - Life cycle

    /// Starts: each network's link transport listens, this peer is published and the group
    /// browsed; links follow as peers appear. Returns once all of that is set up (not once
    /// peers are linked). Does nothing if already running. Works again after ``stop()``.
    ///
    /// A network whose link transport cannot start (Bluetooth on a system without it:
    /// `bluetoothUnavailable`) is left out until the next start; its
    /// transport's ``status(for:)`` is inactive with that error, and the others run.
    ///
    /// - Throws: the first link transport's error when none starts, what a discovery throws
    ///   (the replicator is then stopped again); `PeerSyncError/Code/closed` if the database
    ///   is closed.
    public func start() async throws {
        try await lifecycle.withLock {
            guard state.withLock({ $0.run == nil }) else { return }
            let run = MeshRun(me: peerID, config: config, networks: networks, hub: hub)
            let stoppable = try config.database.addActiveStoppable("multipeer replicator \(peerID.rawValue.prefix(12))") {
                [weak self] in await self?.stop()
            }
            state.withLock { $0.run = run; $0.stoppable = stoppable }
            do {
                try await run.start()
            } catch {
                state.withLock { $0 = State() }
                stoppable.remove()
                throw error
            }
        }
    }

    /// Stops: every link closes (per-peer statuses end `.stopped`), this peer is withdrawn
    /// from discovery, the transports stop. Returns when all of it is done. Idempotent; the
    /// replicator may be started again.
    public func stop() async {
        await lifecycle.withLock {
            let (run, stoppable) = state.withLock { s in (s.run, s.stoppable) }
            guard let run else { return }
            await run.stop()
            state.withLock { $0 = State() }
            stoppable?.remove()
        }
    }

    /// For tests: the replicators of the current run's outgoing links (empty when stopped).
    var outgoingLinkReplicators: [Replicator] {
        guard let run = state.withLock({ $0.run }) else { return [] }
        return run.state.withLock { s in s.links.values.compactMap(\.replicator) }
    }

    // MARK: - State (non-blocking)

    private func withRun<T>(_ body: (MeshRun.RunState, MeshRun) -> T, otherwise: T) -> T {
        guard let run = state.withLock({ $0.run }) else { return otherwise }
        return run.state.withLock { s in s.stopped ? otherwise : body(s, run) }
    }

    /// The peers of the group currently seen by a discovery (self excluded), sorted.
    public var neighborPeers: [PeerID] {
        withRun({ s, _ in s.peers.filter { !$0.value.sightings.isEmpty }.keys.sorted() }, otherwise: [])
    }

    /// What is known about `peerID`: nil for a peer never seen in this run; this peer's own
    /// info for ``peerID``.
    public func peerInfo(for peerID: PeerID) -> PeerInfo? {
        if peerID == self.peerID {
            let (running, links) = withRun({ s, _ in (true, s.links.keys.sorted()) }, otherwise: (false, []))
            return PeerInfo(peerID: peerID, certificate: config.identity.certificate, online: running, neighborPeers: links,
                            transports: Set(networks.map { $0.links.transport }), replicatorTransport: nil,
                            replicatorStatus: .stoppedWithoutError)
        }
        return withRun({ s, run in
            guard let known = s.peers[peerID] else { return nil }
            let graph = MeshRun.knownGraph(s, me: self.peerID)
            let link = s.links[peerID]
            return PeerInfo(peerID: peerID, certificate: known.certificate, online: !known.sightings.isEmpty,
                            neighborPeers: (graph.adjacency[peerID] ?? []).sorted(), transports: known.transportsOnline,
                            replicatorTransport: link?.transport, replicatorStatus: link?.status ?? .stoppedWithoutError)
        }, otherwise: nil)
    }

    /// The mesh as this peer knows it: the announced neighbour lists of the peers it sees, and
    /// its own links. Empty when stopped.
    public var graph: MeshGraph {
        withRun({ s, run in MeshRun.knownGraph(s, me: run.me) }, otherwise: MeshGraph(neighborLists: [:]))
    }

    /// The aggregate status (``MultipeerReplicatorStatus/transport`` nil).
    public var status: MultipeerReplicatorStatus {
        withRun({ s, _ in MeshRun.aggregate(s.statuses) }, otherwise: MultipeerReplicatorStatus(active: false))
    }

    /// The status of one transport; nil if the replicator has no network of that transport.
    public func status(for transport: MultipeerTransport) -> MultipeerReplicatorStatus? {
        guard networks.contains(where: { $0.links.transport == transport }) else { return nil }
        return withRun({ s, _ in s.statuses[transport] }, otherwise: nil)
            ?? MultipeerReplicatorStatus(active: false, transport: transport)
    }

    // MARK: - Listeners

    /// Status changes: each transport's, then the aggregate (transport nil).
    @discardableResult
    public func addStatusListener(_ listener: @escaping @Sendable (MultipeerReplicatorStatus) -> Void) -> MultipeerListenerToken {
        hub.add(listener, to: \.status)
    }

    /// Peers appearing and disappearing, per transport.
    @discardableResult
    public func addPeerDiscoveryStatusListener(_ listener: @escaping @Sendable (PeerDiscoveryStatus) -> Void) -> MultipeerListenerToken {
        hub.add(listener, to: \.discovery)
    }

    /// Each link's replication status changes (and a failed dial, as `.stopped` with its error).
    @discardableResult
    public func addPeerReplicatorStatusListener(_ listener: @escaping @Sendable (PeerReplicatorStatus) -> Void) -> MultipeerListenerToken {
        hub.add(listener, to: \.replicator)
    }

    /// Documents sent to and received from each peer.
    @discardableResult
    public func addPeerDocumentReplicationListener(_ listener: @escaping @Sendable (PeerDocumentReplication) -> Void) -> MultipeerListenerToken {
        hub.add(listener, to: \.documents)
    }

    /// Removes a listener (Couchbase Lite's name; the same as `token.remove()`). Idempotent.
    public func removeChangeListener(withToken token: MultipeerListenerToken) {
        token.remove()
    }

    // MARK: - Async sequences

    /// Status changes as a stream: first the current aggregate status, then every change (each
    /// transport's and the aggregate). Ends when the consumer stops iterating.
    public func statusChanges() -> AsyncStream<MultipeerReplicatorStatus> {
        let inactive = MultipeerReplicatorStatus(active: false)
        guard let run = state.withLock({ $0.run }) else { return hub.stream(of: \.status, replay: [inactive]) }
        // Under the run's lock, where statuses change and are emitted: nothing is missed or replayed twice.
        return run.state.withLock { s in
            hub.stream(of: \.status, replay: [s.stopped ? inactive : MeshRun.aggregate(s.statuses)])
        }
    }

    /// Peer discovery changes from now on.
    public func peerDiscoveryChanges() -> AsyncStream<PeerDiscoveryStatus> { hub.stream(of: \.discovery) }

    /// Per-peer replication status changes from now on.
    public func peerReplicatorChanges() -> AsyncStream<PeerReplicatorStatus> { hub.stream(of: \.replicator) }

    /// Per-peer document replications from now on.
    public func peerDocumentReplications() -> AsyncStream<PeerDocumentReplication> { hub.stream(of: \.documents) }
}
