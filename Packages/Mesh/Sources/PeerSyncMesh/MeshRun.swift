import PeerSyncAuth
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncPosix
import PeerSyncReplicator
import PeerSyncTransport

/// One run of a ``MultipeerReplicator``, from `start()` to `stop()`: the discovery loops, the
/// links and their replications, and the reconciliation that keeps the topology.
///
/// Concurrency: all state is in one ``LockedValue`` (``RunState``), never held across an
/// `await`. Decisions are made under the lock and carried out after it (dials, closes,
/// replicator starts), each in a task the run tracks and awaits on stop. Lock order: the
/// run's state, then the event hub's (a leaf); listeners and replicators are never called
/// with the state lock held, except that registering events enqueues them (the hub's lock).
final class MeshRun: Sendable {
    let me: PeerID
    let config: MultipeerReplicatorConfiguration
    let networks: [MeshNetwork]
    let hub: MeshEventHub

    /// How often the topology is reconciled (dials due, back-offs expired, pruning).
    static let tickInterval: Duration = .milliseconds(200)
    /// A link that lived this long before breaking resets its peer's failure count.
    static let healthyLinkAge: Duration = .seconds(30)
    /// An incoming link that moved no document for this long reports idle.
    static let idleAfter: Duration = .milliseconds(500)
    /// An outgoing link that moved documents and then stayed idle this long is compared again
    /// from scratch (see ``reconcile()``, "settle").
    static let settleAfter: Duration = .seconds(2)

    struct KnownPeer {
        /// Current sightings, by network index and announcement name.
        var sightings: [String: (network: Int, peer: DiscoveredPeer)] = [:]
        var certificate: Certificate?
        /// Neighbour prefixes from the most recent sighting's metadata.
        var neighborPrefixes: [String] = []
        var transportsOnline: Set<MultipeerTransport> = []
    }

    struct Link {
        let id: UInt64
        let peerID: PeerID
        let outgoing: Bool
        let network: Int
        let transport: MultipeerTransport
        let connection: any MessageConnection
        let since: ContinuousClock.Instant
        /// Dialled by the pair's designated dialler (``MeshTopology/dialler(_:_:)``).
        let designated: Bool
        var status: ReplicatorStatus
        var closing = false
        var replicator: Replicator?
        var passive: PassiveReplicationSession?
        var lastDocuments: ContinuousClock.Instant?
        /// Outgoing: documents moved since the link's last full comparison, and since when
        /// the replicator has been idle.
        var documentsSinceCompare = 0
        var idleSince: ContinuousClock.Instant?
        /// The database's closed-conflict count when the link's full comparison began.
        var closedConflictsAtCompare = 0
    }

    struct Backoff {
        var failures = 0
        var notBefore: ContinuousClock.Instant
    }

    /// What each reconciliation derives from the known peers and our links, kept while
    /// neither changed (every peer reconciles 5 times a second; at 64 peers rebuilding it each
    /// time was about 8 % of the mesh's CPU).
    struct Topology {
        var peersVersion: Int
        var linked: Set<PeerID>
        /// The online, trusted peers and this one, sorted.
        var view: [PeerID]
        var graph: MeshGraph
        /// The peers `graph` reaches from this one.
        var reached: Set<PeerID>
    }

    struct RunState {
        var stopped = false
        var peers: [PeerID: KnownPeer] = [:] { didSet { peersVersion &+= 1 } }
        var links: [PeerID: Link] = [:]
        var dialing: Set<PeerID> = []
        var backoff: [PeerID: Backoff] = [:]
        /// Peers that failed authentication: left out of the topology until they reappear.
        var untrusted: Set<PeerID> = [] { didSet { peersVersion &+= 1 } }
        /// Changes with every change of `peers` or `untrusted` (invalidates `topology`).
        var peersVersion = 0
        var topology: Topology?
        /// When each desired, unlinked peer became so (the non-designated side's fallback).
        var wantedSince: [PeerID: ContinuousClock.Instant] = [:]
        var disconnectedSince: ContinuousClock.Instant?
        var bridges: Set<PeerID> = []
        var desired: (view: [PeerID], neighbors: Set<PeerID>)?
        var publications: [Int: any PeerPublication] = [:]
        var browsers: [PeerBrowser] = []
        var tasks: [UInt64: Task<Void, Never>] = [:]
        var nextID: UInt64 = 1
        var statuses: [MultipeerTransport: MultipeerReplicatorStatus] = [:]
        var random = SplitMix64(seed: 0)
        var publishSignal: AsyncStream<Void>.Continuation?
        /// Per peer and transport: failures in a row and the upgrade back-off (MeshRun+Transports).
        var transportHealth: [PeerID: [MultipeerTransport: TransportHealth]] = [:]
        /// When moving each peer's link to a preferred transport became possible.
        var upgradeWantedSince: [PeerID: ContinuousClock.Instant] = [:]
        /// Networks whose link transport could not start: nothing runs on them this run.
        var failedNetworks: [Int: PeerSyncError] = [:]

        /// Runs `update` on link `id` to `peerID` in place and returns its result; nil (and
        /// `update` not run) when that is not the current link. In place through the values'
        /// index: `links[peerID]?.field = …` goes through the key subscript's accessor, which
        /// moves the whole `Link` out into an accessor frame on the heap — once per stored
        /// revision (document events, status changes), ~11 % of a 32-peer benchmark's mallocs.
        @discardableResult
        mutating func updateLink<T>(_ peerID: PeerID, id: UInt64, _ update: (inout Link) -> T) -> T? {
            guard let index = links.index(forKey: peerID), links.values[index].id == id else { return nil }
            return update(&links.values[index])
        }
    }

    let state: LockedValue<RunState>
    let clock = ContinuousClock()

    init(me: PeerID, config: MultipeerReplicatorConfiguration, networks: [MeshNetwork], hub: MeshEventHub) {
        self.me = me
        self.config = config
        self.networks = networks
        self.hub = hub
        var initial = RunState()
        initial.random = SplitMix64(seed: UInt64.random(in: 0...UInt64.max))
        state = LockedValue(initial)
    }

    /// Stretches the handshake timeout of every link this run dials or accepts (and of the
    /// run's own waits measured in handshakes) while handshakes time out: see
    /// ``MeshLinkContext/handshakeTimeout``.
    let handshakeStretch = HandshakeStretch()

    var context: MeshLinkContext {
        let authenticator = config.authenticator
        var context = MeshLinkContext(identity: config.identity, authenticate: { authenticator.authenticate($0) },
                                      handshakeTimeout: config.handshakeTimeout)
        context.stretch = handshakeStretch
        return context
    }

    /// The configured handshake timeout, stretched by ``handshakeStretch``.
    var handshakeTimeout: Duration { config.handshakeTimeout * handshakeStretch.factor }

    // MARK: - Start and stop

    /// Starts every network's transport, publishes this peer, browses the group and starts the
    /// loops. A network whose link transport cannot start (Bluetooth on a system without it)
    /// is left out of this run, its error kept as its transport's status, while the others
    /// run; only when none starts, or a discovery fails, does it undo what it did and throw.
    func start() async throws {
        do {
            var addresses: [Int: MeshListeningAddress] = [:]
            var firstFailure: (any Error)?
            for (index, network) in networks.enumerated() {
                do {
                    addresses[index] = try await network.links.start(context)
                } catch {
                    firstFailure = firstFailure ?? error
                    let failure = (error as? PeerSyncError) ?? PeerSyncError(.io, "\(error)")
                    state.withLock { $0.failedNetworks[index] = failure }
                    Logger(.network).info("mesh: the \(network.links.transport) transport did not start, running without it: \(failure)")
                }
            }
            if addresses.isEmpty, let firstFailure { throw firstFailure }
            for (index, network) in networks.enumerated() {
                guard let address = addresses[index] else { continue }
                let announcement = try PeerAnnouncement(peerID: me, group: config.peerGroupID, port: address.port,
                                                        addresses: address.addresses,
                                                        metadata: MeshNeighborMetadata.metadata(listing: []))
                let publication = try await network.discovery.publish(announcement)
                let browser = try await network.discovery.browse(group: config.peerGroupID)
                state.withLock { s in
                    s.publications[index] = publication
                    s.browsers.append(browser)
                }
                spawn { [self] in
                    for await event in browser { self.discovered(event, network: index) }
                }
                spawn { [self] in
                    for await incoming in network.links.incomingLinks() {
                        self.spawn { [self] in await self.accept(incoming, network: index) }
                    }
                }
                spawn { [self] in
                    for await status in network.discovery.statusUpdates() { self.discoveryStatus(status, network: index) }
                }
            }
        } catch {
            await stop()
            throw error
        }
        let (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        state.withLock { s in
            s.publishSignal = signal
            for (index, network) in networks.enumerated() {
                let failure = s.failedNetworks[index]
                s.statuses[network.links.transport] = MultipeerReplicatorStatus(active: failure == nil, error: failure,
                                                                                transport: network.links.transport)
            }
            emitStatuses(s)
        }
        spawn { [self] in await self.publishNeighbors(signals) }
        spawn { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.tickInterval)
                self.reconcile()
            }
        }
    }

    /// Stops everything the run started and waits for it. Idempotent.
    func stop() async {
        let (links, browsers, publications, signal, alreadyStopped) = state.withLock { s in
            let result = (Array(s.links.values), s.browsers, Array(s.publications.values), s.publishSignal, s.stopped)
            s.stopped = true
            for key in s.links.keys { s.links[key]?.closing = true }
            s.links = [:]
            s.browsers = []
            s.publications = [:]
            s.publishSignal = nil
            for transport in s.statuses.keys { s.statuses[transport]?.active = false }
            return result
        }
        signal?.finish()
        for browser in browsers { await browser.stop() }
        for publication in publications { await publication.unpublish() }
        for link in links { await close(link) }
        for network in networks { await network.links.stop() }
        // Every task ends now: loops see their streams end or their cancellation.
        while true {
            let tasks = state.withLock { s -> [Task<Void, Never>] in
                let tasks = Array(s.tasks.values)
                for task in tasks { task.cancel() }
                return tasks
            }
            if tasks.isEmpty { break }
            for task in tasks { await task.value }
        }
        if !alreadyStopped {
            state.withLock { s in emitStatuses(s) }
            // The links' sessions freed their buffers, queues and caches, scattered through the
            // allocator's heaps: glibc keeps such memory (a 64-peer benchmark run left ~800 MB
            // resident after every peer had stopped and deleted its database, and the next run
            // in the process peaked that much higher). One throttled trim per second at most.
            FreedMemory.releaseSoon(after: .seconds(1))
        }
    }

    /// Runs `body` in a task the run tracks (and awaits on stop).
    @discardableResult
    private func spawn(_ body: @escaping @Sendable () async -> Void) -> Bool {
        state.withLock { s in
            guard !s.stopped else { return false }
            let id = s.nextID
            s.nextID += 1
            // Created under the lock, so that its removal (which takes the lock) comes after.
            s.tasks[id] = Task { [weak self] in
                await body()
                _ = self?.state.withLock { $0.tasks.removeValue(forKey: id) }
            }
            return true
        }
    }

    private func emitStatuses(_ s: RunState) {
        for status in s.statuses.values.sorted(by: { $0.transport!.rawValue < $1.transport!.rawValue }) {
            hub.emit(status, to: \.status)
        }
        hub.emit(Self.aggregate(s.statuses), to: \.status)
    }

    static func aggregate(_ statuses: [MultipeerTransport: MultipeerReplicatorStatus]) -> MultipeerReplicatorStatus {
        MultipeerReplicatorStatus(active: statuses.values.contains { $0.active },
                                  error: statuses.values.sorted { $0.transport!.rawValue < $1.transport!.rawValue }
                                      .compactMap(\.error).first,
                                  transport: nil)
    }

    // MARK: - Discovery

    private func discovered(_ event: PeerEvent, network: Int) {
        let peer = event.peer
        guard peer.peerID != me, peer.group == config.peerGroupID else { return }
        let key = "\(network)|\(peer.name)"
        state.withLock { s in
            guard !s.stopped else { return }
            var known = s.peers[peer.peerID] ?? KnownPeer()
            let wasOnline = !known.sightings.isEmpty
            switch event {
            case .appeared, .updated:
                known.sightings[key] = (network, peer)
                known.neighborPrefixes = MeshNeighborMetadata.neighborPrefixes(in: peer.metadata)
            case .disappeared:
                known.sightings[key] = nil
            }
            let online = Set(known.sightings.values.map { networks[$0.network].links.transport })
            for gained in online.subtracting(known.transportsOnline) {
                hub.emit(PeerDiscoveryStatus(peerID: peer.peerID, transport: gained, online: true), to: \.discovery)
                transportAppeared(gained, for: peer.peerID, &s)
            }
            for lost in known.transportsOnline.subtracting(online) {
                hub.emit(PeerDiscoveryStatus(peerID: peer.peerID, transport: lost, online: false), to: \.discovery)
            }
            known.transportsOnline = online
            if !wasOnline, !known.sightings.isEmpty {
                // Back (or new): dial at once if due, keep the failure count (a flapping peer
                // still backs off on its next failure), trust it to prove itself again.
                s.untrusted.remove(peer.peerID)
                if s.backoff[peer.peerID] != nil { s.backoff[peer.peerID]?.notBefore = clock.now }
            }
            s.peers[peer.peerID] = known
        }
    }

    private func discoveryStatus(_ status: DiscoveryStatus, network: Int) {
        let transport = networks[network].links.transport
        state.withLock { s in
            guard !s.stopped, s.failedNetworks[network] == nil, var current = s.statuses[transport] else { return }
            switch status {
            case .unavailable(let error): current.error = error
            case .running, .recovered: current.error = nil
            case .starting, .stopped: return
            }
            guard current != s.statuses[transport] else { return }
            s.statuses[transport] = current
            hub.emit(current, to: \.status)
            hub.emit(Self.aggregate(s.statuses), to: \.status)
        }
    }

    /// Publishes the current links as neighbour metadata whenever signalled (coalesced).
    private func publishNeighbors(_ signals: AsyncStream<Void>) async {
        var published: Set<PeerID> = []
        for await _ in signals {
            let (neighbors, publications) = state.withLock { s in (Set(s.links.keys), s.publications) }
            guard neighbors != published else { continue }
            let metadata = MeshNeighborMetadata.metadata(listing: neighbors)
            for publication in publications.values { try? await publication.updateMetadata(metadata) }
            published = neighbors
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    // MARK: - Links

    /// An incoming link: find its peer ID, wait (up to the handshake timeout) until discovery
    /// shows that peer in our group, then adopt it. Anything else is closed.
    private func accept(_ connection: any MessageConnection, network: Int) async {
        guard let der = connection.peerCertificateChain.first, let certificate = try? Certificate(derBytes: der),
              let peerID = try? PeerID(digest: certificate.sha256Digest), peerID != me else {
            await connection.close(code: .policyViolation, reason: "no usable peer certificate")
            return
        }
        let deadline = clock.now + handshakeTimeout
        while true {
            let (known, stopped) = state.withLock { s in (s.peers[peerID]?.sightings.isEmpty == false, s.stopped) }
            if stopped { break }
            if known {
                adopt(connection, peerID: peerID, certificate: certificate, outgoing: false, network: network)
                return
            }
            if clock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(50))
            if Task.isCancelled { break }
        }
        await connection.close(code: .policyViolation, reason: "not a known peer of this group")
    }

    /// Dials `peer` and adopts the link if it proves to be `peerID`. An `upgrade` moves an
    /// existing link to a preferred transport: its failure counts against that transport only.
    private func dial(_ peerID: PeerID, _ peer: DiscoveredPeer, network: Int, upgrade: Bool = false) async {
        let started = clock.now
        do {
            let connection = try await networks[network].links.dial(peer)
            handshakeStretch.succeeded(after: clock.now - started, configured: config.handshakeTimeout)
            guard let der = connection.peerCertificateChain.first, let certificate = try? Certificate(derBytes: der),
                  (try? PeerID(digest: certificate.sha256Digest)) == peerID else {
                await connection.close(code: .policyViolation, reason: "the certificate is not the discovered peer's")
                throw PeerSyncError(.certificateRejected, "the dialled peer's certificate does not match its discovered peer ID",
                                    context: ["peerID": peerID.rawValue])
            }
            adopt(connection, peerID: peerID, certificate: certificate, outgoing: true, network: network)
        } catch {
            state.withLock { s in
                s.dialing.remove(peerID)
                let e = (error as? PeerSyncError) ?? PeerSyncError(.io, "\(error)")
                if e.code == .timeout { handshakeStretch.timedOut() }
                recordTransportFailure(networks[network].links.transport, of: peerID, &s)
                if !upgrade || Self.isAuthenticationFailure(e) {
                    recordFailure(of: peerID, &s, authentication: Self.isAuthenticationFailure(e))
                }
                if !s.stopped {
                    hub.emit(PeerReplicatorStatus(peerID: peerID, transport: networks[network].links.transport, outgoing: true,
                                                  status: ReplicatorStatus(activity: .stopped, progress: .init(completed: 0, total: 0),
                                                                           error: e)), to: \.replicator)
                }
            }
        }
    }

    static func isAuthenticationFailure(_ error: PeerSyncError) -> Bool {
        error.code == .certificateRejected || error.code == .untrustedCertificate
    }

    /// Takes an authenticated link to `peerID` into use, unless it loses to a link that already
    /// exists (one link per pair: the designated dialler's link wins, else the newer one) or
    /// this peer is at its maximum degree (incoming links only).
    private func adopt(_ connection: any MessageConnection, peerID: PeerID, certificate: Certificate,
                       outgoing: Bool, network: Int) {
        let transport = networks[network].links.transport
        let designated = outgoing == (MeshTopology.dialler(me, peerID) == me)
        var losers: [Link] = []
        var refused = false
        /// The new link moves an existing one to another transport.
        var moved = false
        let started: Link? = state.withLock { s in
            if outgoing { s.dialing.remove(peerID) }
            if s.stopped { refused = true; return nil }
            if let existing = s.links[peerID] {
                // Also a move to a preferred transport: the new link is in place before the
                // old one closes (make before break).
                guard Self.replaces(new: transport, newDesignated: designated, existing: existing) else { refused = true; return nil }
                var old = existing
                old.closing = true
                losers.append(old)
                moved = existing.transport != transport
                s.links[peerID] = nil
            } else if !outgoing, s.links.count >= config.maximumDegree {
                refused = true
                return nil
            }
            let id = s.nextID
            s.nextID += 1
            var link = Link(id: id, peerID: peerID, outgoing: outgoing, network: network, transport: transport,
                            connection: connection, since: clock.now, designated: designated,
                            status: ReplicatorStatus(activity: .connecting, progress: .init(completed: 0, total: 0), error: nil))
            link.closedConflictsAtCompare = config.database.closedConflictCount
            do {
                if outgoing {
                    link.replicator = try makeReplicator(link)
                } else {
                    link.passive = try makePassiveSession(link)
                }
            } catch {
                refused = true
                return nil
            }
            s.peers[peerID, default: KnownPeer()].certificate = certificate
            s.links[peerID] = link
            s.wantedSince[peerID] = nil
            s.upgradeWantedSince[peerID] = nil
            s.publishSignal?.yield()
            return link
        }
        let run = self
        let (closing, refuse) = (losers, refused)
        // A link this side dialled to move to a preferred transport: the old link stays open
        // until the new one got going, i.e. the peer adopted it too — closed at once, the
        // peer (still accepting the new link: handshake, discovery) was without a link.
        let overlap = moved && outgoing ? started?.id : nil
        if !closing.isEmpty || refuse {
            spawn {
                if let overlap { await run.waitUntilGoing(link: overlap, peerID: peerID) }
                for loser in closing { await run.close(loser) }
                if refuse { await connection.close(code: .policyViolation, reason: "a link to this peer exists, or too many links") }
            }
        }
        guard let link = started else { return }
        if let replicator = link.replicator {
            // The listeners capture the link's ID, never `link`: the link holds the replicator,
            // whose listener table would then hold the link — a cycle that kept every outgoing
            // link's replicator and connection alive after the run stopped.
            let linkID = link.id
            replicator.addChangeListener { [weak self] change in
                self?.outgoingStatus(change.status, link: linkID, peerID: peerID, transport: transport)
            }
            replicator.addDocumentReplicationListener { [weak self] event in
                self?.documents(event, link: linkID, peerID: peerID, transport: transport)
            }
            // Every new link compares everything (checkpoints ignored): cheap where the peers
            // meet for the first time, and it is what settles a document the two sides resolved
            // differently while apart (each side's closing tombstone stays local, so nothing in
            // either changes feed past the checkpoints would bring them together again).
            replicator.start(reset: true)
        } else if let passive = link.passive {
            let running = spawn {
                run.incomingStatus(.idle, link: link.id, peerID: peerID)
                await passive.run()
                let error: PeerSyncError? = connection.closeInfo.flatMap { info in
                    info.code == .normal || info.code == .goingAway ? nil
                        : PeerSyncError(.connectionReset, "the link ended: \(info.reason)", context: ["code": "\(info.code.rawValue)"])
                }
                run.linkEnded(link.id, peerID: peerID, transport: transport, error: error)
            }
            if !running { Task { await passive.stop() } }
        }
    }

    private func makeReplicator(_ link: Link) throws -> Replicator {
        var configuration = ReplicatorConfiguration(target: try Endpoint(scheme: "mesh", host: link.peerID.rawValue))
        configuration.continuous = true
        configuration.replicatorType = .pushAndPull
        configuration.maxAttempts = 1  // the mesh reconnects, with its own back-off
        configuration.remoteIdentity = link.peerID.rawValue
        for collection in config.collections {
            configuration.addCollection(collection.collection, config: collection.replicationConfiguration(for: link.peerID))
        }
        let handOver = LockedValue<(any MessageConnection)?>(link.connection)
        return try Replicator(config: configuration, connector: { _ in
            let connection = handOver.withLock { value -> (any MessageConnection)? in
                defer { value = nil }
                return value
            }
            guard let connection else { throw PeerSyncError(.closed, "the mesh link is gone") }
            return connection
        }, listenerQueue: hub.queue)
    }

    private func makePassiveSession(_ link: Link) throws -> PassiveReplicationSession {
        var options = PassiveReplicationSession.Options()
        let (id, peerID, transport) = (link.id, link.peerID, link.transport)
        options.onDocumentReplication = { [weak self] event in self?.documents(event, link: id, peerID: peerID, transport: transport) }
        return PassiveReplicationSession(connection: try BLIPConnection(connection: link.connection), database: config.database,
                                         collectionConfigurations: config.collections.map {
                                             ($0.collection, $0.replicationConfiguration(for: peerID))
                                         },
                                         options: options)
    }

    /// Returns once outgoing link `id` to `peerID` got going — its session opened on the
    /// peer's side (progress to report, or caught up) — or ended, or after four handshake
    /// timeouts, or when the calling task is cancelled (the run stops). The peer has to accept
    /// the link (a handshake's worth) and answer the session's first requests; on a loaded
    /// device that can take seconds, and the wait only costs the old link's duplicate offers.
    private func waitUntilGoing(link id: UInt64, peerID: PeerID) async {
        let deadline = clock.now + handshakeTimeout * 4
        while clock.now < deadline, !Task.isCancelled {
            let going = state.withLock { s -> Bool in
                guard let link = s.links[peerID], link.id == id else { return true }
                return link.status.progress.total > 0 || link.status.activity == .idle || link.status.activity == .stopped
            }
            if going { return }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Closes a link on purpose (no failure is counted).
    private func close(_ link: Link) async {
        if let replicator = link.replicator {
            replicator.stop()
            await replicator.waitUntilStopped()
        }
        if let passive = link.passive { await passive.stop() }
        await link.connection.close(code: .normal, reason: "closed by the mesh")
    }

    private func outgoingStatus(_ status: ReplicatorStatus, link id: UInt64, peerID: PeerID, transport: MultipeerTransport) {
        state.withLock { s in
            let updated: Void? = s.updateLink(peerID, id: id) { link in
                link.status = status
                link.idleSince = status.activity == .idle ? (link.idleSince ?? clock.now) : nil
            }
            guard updated != nil else {
                // A link closed on purpose: report its end only.
                if status.activity == .stopped {
                    hub.emit(PeerReplicatorStatus(peerID: peerID, transport: transport, outgoing: true, status: status), to: \.replicator)
                }
                return
            }
            hub.emit(PeerReplicatorStatus(peerID: peerID, transport: transport, outgoing: true, status: status), to: \.replicator)
            if status.activity == .stopped { endLocked(&s, id: id, peerID: peerID, error: status.error) }
        }
    }

    private func incomingStatus(_ activity: ReplicatorActivityLevel, link id: UInt64, peerID: PeerID, error: PeerSyncError? = nil) {
        state.withLock { s in incomingStatusLocked(&s, activity, link: id, peerID: peerID, error: error) }
    }

    private func incomingStatusLocked(_ s: inout RunState, _ activity: ReplicatorActivityLevel, link id: UInt64,
                                      peerID: PeerID, error: PeerSyncError?) {
        s.updateLink(peerID, id: id) { link in setIncoming(&link, activity, error: error) }
    }

    /// Sets incoming `link`'s activity and error and reports its status, unless neither changes.
    private func setIncoming(_ link: inout Link, _ activity: ReplicatorActivityLevel, error: PeerSyncError?) {
        guard link.status.activity != activity || error != nil else { return }
        link.status.activity = activity
        link.status.error = error
        hub.emit(PeerReplicatorStatus(peerID: link.peerID, transport: link.transport, outgoing: false, status: link.status),
                 to: \.replicator)
    }

    /// Documents moved on link `id`. Also reported for a link being closed on purpose (the one
    /// a move to a preferred transport replaced finishes what it had in flight): they moved.
    private func documents(_ event: DocumentReplication, link id: UInt64, peerID: PeerID, transport: MultipeerTransport) {
        state.withLock { s in
            // Called once per stored revision: the link is updated in place (`updateLink`) and
            // nothing is allocated but the event for the listeners.
            s.updateLink(peerID, id: id) { link in
                if link.outgoing {
                    // Only documents that moved: a failure a comparison cannot fix must not loop.
                    link.documentsSinceCompare += event.documents.reduce(0) { $1.error == nil ? $0 + 1 : $0 }
                    return
                }
                link.lastDocuments = clock.now
                setIncoming(&link, .busy, error: nil)
                link.status.progress.completed += event.documents.count
                link.status.progress.total += event.documents.count
            }
            guard hub.hasListeners(\.documents) else { return }
            hub.emit(PeerDocumentReplication(peerID: peerID, transport: transport, isPush: event.isPush,
                                             documents: event.documents.map(MultipeerReplicatedDocument.init)), to: \.documents)
        }
    }

    /// A passive session ended.
    private func linkEnded(_ id: UInt64, peerID: PeerID, transport: MultipeerTransport, error: PeerSyncError?) {
        state.withLock { s in
            guard let link = s.links[peerID], link.id == id else {
                hub.emit(PeerReplicatorStatus(peerID: peerID, transport: transport, outgoing: false,
                                              status: ReplicatorStatus(activity: .stopped, progress: .init(completed: 0, total: 0),
                                                                       error: nil)), to: \.replicator)
                return
            }
            var status = link.status
            status.activity = .stopped
            status.error = error
            hub.emit(PeerReplicatorStatus(peerID: peerID, transport: link.transport, outgoing: false, status: status), to: \.replicator)
            endLocked(&s, id: id, peerID: peerID, error: error)
        }
    }

    /// Forgets the link `id` to `peerID` (if current) and counts its end as a failure unless it
    /// was closed on purpose.
    private func endLocked(_ s: inout RunState, id: UInt64, peerID: PeerID, error: PeerSyncError?) {
        guard let link = s.links[peerID], link.id == id else { return }
        s.links[peerID] = nil
        s.publishSignal?.yield()
        guard !link.closing, !s.stopped else { return }
        let healthy = clock.now - link.since >= Self.healthyLinkAge
        recordTransportFailure(link.transport, of: peerID, healthy: healthy, &s)
        if healthy { s.backoff[peerID]?.failures = 0 }
        recordFailure(of: peerID, &s, authentication: error.map(Self.isAuthenticationFailure) ?? false)
    }

    /// One more failure in a row for `peerID`: the next dial waits `retryDelay × 2^(n-1)`
    /// capped by `maximumRetryDelay`, drawn from the upper half (jitter); an authentication
    /// failure waits the cap and leaves the peer out of the topology until it reappears.
    private func recordFailure(of peerID: PeerID, _ s: inout RunState, authentication: Bool) {
        var backoff = s.backoff[peerID] ?? Backoff(notBefore: clock.now)
        backoff.failures += 1
        var delay = config.retryDelay * (1 << min(backoff.failures - 1, 20))
        if authentication || delay > config.maximumRetryDelay { delay = config.maximumRetryDelay }
        let fraction = 0.5 + Double(s.random.next() >> 11) / Double(1 << 53) * 0.5
        backoff.notBefore = clock.now + delay * fraction
        s.backoff[peerID] = backoff
        if authentication { s.untrusted.insert(peerID) }
    }

    // MARK: - Topology

    /// The graph as this peer knows it: each online peer's announced neighbours, and ours.
    static func knownGraph(_ s: RunState, me: PeerID) -> MeshGraph {
        var byPrefix: [String: PeerID] = [MeshNeighborMetadata.prefix(of: me): me]
        for peerID in s.peers.keys { byPrefix[MeshNeighborMetadata.prefix(of: peerID)] = peerID }
        var lists: [PeerID: Set<PeerID>] = [me: Set(s.links.keys)]
        for (peerID, known) in s.peers where !known.sightings.isEmpty {
            lists[peerID] = Set(known.neighborPrefixes.compactMap { byPrefix[$0] })
        }
        return MeshGraph(neighborLists: lists)
    }

    /// The view, the known graph and what it reaches: the cached ones unless the known peers
    /// or our set of links changed since.
    func currentTopology(_ s: inout RunState) -> Topology {
        let linked = Set(s.links.keys)
        if let cached = s.topology, cached.peersVersion == s.peersVersion, cached.linked == linked { return cached }
        let online = s.peers.filter { !$0.value.sightings.isEmpty && !s.untrusted.contains($0.key) }.keys
        let graph = Self.knownGraph(s, me: me)
        let topology = Topology(peersVersion: s.peersVersion, linked: linked, view: (Array(online) + [me]).sorted(),
                                graph: graph, reached: Set(graph.distances(from: me).keys))
        s.topology = topology
        return topology
    }

    /// One reconciliation: dials due (desired links, bridges), an idle incoming link's status,
    /// and at most one prune.
    func reconcile() {
        let now = clock.now
        var dials: [(PeerID, DiscoveredPeer, Int)] = []
        var upgrades: [(PeerID, DiscoveredPeer, Int)] = []
        var prune: Link?
        state.withLock { s in
            guard !s.stopped else { return }
            let topology = currentTopology(&s)
            let view = topology.view
            if s.desired?.view != view {
                let graph = MeshTopology.desiredGraph(of: view, targetDegree: config.targetDegree, maximumDegree: config.maximumDegree)
                s.desired = (view, graph[me] ?? [])
            }
            let desired = s.desired!.neighbors
            for peerID in Array(s.wantedSince.keys) where !desired.contains(peerID) || s.links[peerID] != nil {
                s.wantedSince[peerID] = nil
            }
            var budget = config.maximumDegree - s.links.count - s.dialing.count
            func due(_ peerID: PeerID) -> Bool {
                s.links[peerID] == nil && !s.dialing.contains(peerID) && (s.backoff[peerID]?.notBefore ?? now) <= now
            }
            func startDial(_ peerID: PeerID) {
                guard budget > 0, let sighting = sightingToDial(peerID, s) else { return }
                s.dialing.insert(peerID)
                budget -= 1
                dials.append((peerID, sighting.peer, sighting.network))
            }
            for peerID in desired.sorted() where due(peerID) {
                let since = s.wantedSince[peerID] ?? now
                s.wantedSince[peerID] = since
                // The designated side dials; the other one too once it waited a handshake
                // timeout in vain (their views of the group differ).
                if MeshTopology.dialler(me, peerID) == me || now - since >= handshakeTimeout { startDial(peerID) }
            }
            // Bridging: a part of the group our links do not reach, for a handshake timeout.
            let graph = topology.graph
            let reached = topology.reached
            let viewSet = Set(view)
            if viewSet.isSubset(of: reached) {
                s.disconnectedSince = nil
                s.bridges = []
            } else {
                let since = s.disconnectedSince ?? now
                s.disconnectedSince = since
                if now - since >= handshakeTimeout {
                    let mine = reached.intersection(viewSet)
                    var unreached = viewSet.subtracting(reached)
                    while let start = unreached.min() {
                        let part = Set(graph.distances(from: start).keys).intersection(viewSet).union([start])
                        unreached.subtract(part)
                        if let (a, b) = MeshTopology.bridge(between: mine, and: part), a == me, due(b) {
                            s.bridges.insert(b)
                            startDial(b)
                        }
                    }
                }
            }
            // Links on a less preferred transport than the peer is seen on.
            upgrades = upgradesDue(&s, now: now)
            // Idle incoming links.
            for (peerID, link) in s.links where !link.outgoing && link.status.activity == .busy {
                if let last = link.lastDocuments, now - last >= Self.idleAfter {
                    incomingStatusLocked(&s, .idle, link: link.id, peerID: peerID, error: nil)
                }
            }
            // Settle: an outgoing link that moved documents and then went idle is closed and
            // dialled again, so that its new replication compares everything (reset). Two
            // peers can end a burst of concurrent edits with the same conflict resolved two
            // ways on a live link — each side's closing tombstone stays local and the session
            // believes the peer holds what it sent — and only a full comparison brings them
            // together. Only after this database closed a conflict since the link's comparison
            // began: documents that only travel (no conflict anywhere) need none, and at 64
            // peers the comparisons of 6,400 documents per link were most of the work. A
            // comparison that moves nothing ends it; one link per tick.
            let closedConflicts = config.database.closedConflictCount
            if prune == nil, let (peerID, link) = s.links.first(where: { _, link in
                link.outgoing && !link.closing && link.documentsSinceCompare > 0
                    && closedConflicts > link.closedConflictsAtCompare
                    && link.idleSince.map { now - $0 >= Self.settleAfter } == true
            }) {
                s.links[peerID]?.closing = true
                prune = link
                s.links[peerID] = nil
                s.publishSignal?.yield()
            }
            // Prune one link beyond the target that the topology does not want, if we still
            // reach its peer without it.
            if prune == nil, s.links.count > config.targetDegree {
                for (peerID, link) in s.links.sorted(by: { $0.key < $1.key })
                where !desired.contains(peerID) && !s.bridges.contains(peerID) && !link.closing
                    && now - link.since >= handshakeTimeout {
                    var lists = graph.adjacency
                    lists[me]?.remove(peerID)
                    lists[peerID]?.remove(me)
                    if MeshGraph(neighborLists: lists).distances(from: me)[peerID] != nil {
                        s.links[peerID]?.closing = true
                        prune = s.links[peerID]
                        s.links[peerID] = nil
                        s.publishSignal?.yield()
                        break
                    }
                }
            }
        }
        for (peerID, peer, network) in dials {
            spawn { [self] in await self.dial(peerID, peer, network: network) }
        }
        for (peerID, peer, network) in upgrades {
            spawn { [self] in await self.dial(peerID, peer, network: network, upgrade: true) }
        }
        if let prune { spawn { [self] in await self.close(prune) } }
    }
}
