import PeerSyncCore
import PeerSyncDiscovery

/// One browse of a ``BLEDiscovery``: scans for the group's service UUID, keeps a GATT client
/// per advertiser, and reports peers — the advertisers' and this host's own publications'.
final class BLEBrowse: Sendable {
    private struct Remote {
        var lastSeen: ContinuousClock.Instant
        var name: String?
        /// What was reported (nil: not yet, or never — not a PeerSync peer, or its name is
        /// taken by a peer already reported).
        var reported: DiscoveredPeer?
        var client: GATTClient?
        var connecting = false
        var retryAt: ContinuousClock.Instant
    }

    private struct State {
        var remotes: [String: Remote] = [:]
        var locals: [String: DiscoveredPeer] = [:]
        var tasks: [Task<Void, Never>] = []
        /// The task following each advertiser's GATT connection (one at a time per address).
        var followers: [String: Task<Void, Never>] = [:]
        var stopped = false

        func nameTaken(_ name: String, byOtherThan address: String) -> Bool {
            locals[name] != nil || remotes.contains { $0.key != address && $0.value.reported?.name == name }
        }
    }

    let group: PeerGroupID
    private let serviceUUID: BLEUUID
    private let radio: any BLERadio
    private let configuration: BLEDiscoveryConfiguration
    private let feed: OrderedStreamFeed<PeerEvent>
    // Guards the peers; the feed is only enqueued under it. Lock order: discovery → browse → feed.
    private let state = LockedValue(State())

    init(discovery: BLEDiscovery, group: PeerGroupID, feed: OrderedStreamFeed<PeerEvent>) {
        self.group = group
        self.serviceUUID = BLEServiceUUID.forPeerGroup(group.rawValue)
        self.radio = discovery.radio
        self.configuration = discovery.configuration
        self.feed = feed
    }

    /// Starts scanning and sweeping out silent advertisers.
    func start() {
        let scanning = Task { [weak self] in
            while let radio = self?.radio, !Task.isCancelled {
                do {
                    let sightings = try await radio.scan()
                    for try await sighting in sightings {
                        guard let self else { return }
                        self.sighted(sighting)
                    }
                } catch {
                    // The radio failed (or has no Bluetooth): retry later, the status says why.
                }
                guard let interval = self?.configuration.reconnectInterval else { return }
                try? await Task.sleep(for: interval)
            }
        }
        let sweeping = Task { [weak self] in
            while let interval = self.map({ $0.configuration.advertisementTimeout / 4 }), !Task.isCancelled {
                try? await Task.sleep(for: interval)
                self?.sweep()
            }
        }
        let stopped = state.withLock { state -> Bool in
            state.tasks += [scanning, sweeping]
            return state.stopped
        }
        if stopped { scanning.cancel(); sweeping.cancel() }
    }

    /// Ends the browse: stops scanning, closes every GATT client, ends the stream. Idempotent.
    func stop() {
        let (tasks, clients) = state.withLock { state -> ([Task<Void, Never>], [GATTClient]) in
            state.stopped = true
            defer { state.tasks.removeAll(); state.followers.removeAll(); state.remotes.removeAll() }
            return (state.tasks + state.followers.values, state.remotes.values.compactMap(\.client))
        }
        for task in tasks { task.cancel() }
        for client in clients { client.close() }
        feed.finish()
    }

    func flush() { feed.flush() }

    // MARK: This host's own publications (called under the discovery's lock)

    func localChanged(_ peer: DiscoveredPeer) {
        state.withLock { state in
            guard !state.stopped else { return }
            let before = state.locals.updateValue(peer, forKey: peer.name)
            if before == nil {
                feed.enqueue(.appeared(peer))
            } else if before != peer {
                feed.enqueue(.updated(peer))
            }
        }
    }

    func localRemoved(_ name: String) {
        state.withLock { state in
            guard !state.stopped, let peer = state.locals.removeValue(forKey: name) else { return }
            feed.enqueue(.disappeared(peer))
        }
    }

    // MARK: Advertisers

    private func sighted(_ sighting: BLESighting) {
        guard sighting.advertisement.advertises(serviceUUID) else { return }
        let now = ContinuousClock.now
        let connect = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            var remote = state.remotes[sighting.address] ?? Remote(lastSeen: now, retryAt: now)
            remote.lastSeen = now
            remote.name = sighting.advertisement.localName
            let connect = remote.client == nil && !remote.connecting && now >= remote.retryAt
            if connect { remote.connecting = true }
            state.remotes[sighting.address] = remote
            return connect
        }
        guard connect else { return }
        let task = Task { [weak self] in
            guard let self else { return }
            await self.follow(sighting.address)
        }
        state.withLock { state in
            // The previous follower of this address has ended (`connecting` was false).
            state.followers[sighting.address] = task
            if state.stopped { task.cancel() }
        }
    }

    /// Connects GATT to the advertiser at `address`, reports it, and follows its metadata
    /// until the connection ends.
    private func follow(_ address: String) async {
        var client: GATTClient?
        do {
            let socket = try await radio.connectATT(to: address)
            let connected = try await GATTClient.connect(over: socket, serviceUUID: serviceUUID,
                                                         preferredMTU: configuration.preferredMTU,
                                                         transactionTimeout: configuration.transactionTimeout)
            client = connected
            let psm = try await connected.readPSM()
            let first = try await connected.readMetadata()
            let updates = try await connected.metadataUpdates()
            guard let contents = TXTRecord.decode(try TXTRecord.entries(fromWireFormat: first)) else {
                // Not a PeerSync peer: leave it alone for a while.
                connected.close()
                state.withLock { state in
                    state.remotes[address]?.connecting = false
                    state.remotes[address]?.retryAt = .now + configuration.advertisementTimeout
                }
                return
            }
            let attached = state.withLock { state -> Bool in
                guard !state.stopped, state.remotes[address] != nil else { return false }
                state.remotes[address]?.client = connected
                state.remotes[address]?.connecting = false
                apply(contents, port: psm, address: address, &state)
                return true
            }
            feed.flush()
            guard attached else {
                connected.close()
                return
            }
            for try await value in updates {
                guard let entries = try? TXTRecord.entries(fromWireFormat: value), let contents = TXTRecord.decode(entries) else { continue }
                state.withLock { apply(contents, port: psm, address: address, &$0) }
                feed.flush()
            }
        } catch {
            // The connection failed or ended; handled below.
        }
        client?.close()
        connectionEnded(address)
    }

    private func apply(_ contents: TXTRecord.Contents, port: UInt16, address: String, _ state: inout State) {
        guard !state.stopped, var remote = state.remotes[address] else { return }
        var peer = DiscoveredPeer(name: remote.reported?.name ?? remote.name ?? address, peerID: contents.peerID, group: group,
                                  addresses: [address], port: port, metadata: contents.metadata,
                                  protocolVersion: contents.protocolVersion, discovery: .bluetoothLE)
        if let reported = remote.reported {
            peer.name = reported.name
            if reported != peer { feed.enqueue(.updated(peer)) }
        } else {
            guard !state.nameTaken(peer.name, byOtherThan: address) else { return }
            feed.enqueue(.appeared(peer))
        }
        remote.reported = peer
        state.remotes[address] = remote
    }

    /// The GATT connection to `address` ended (or never came up). While the radio is off the
    /// peer is kept (the outage dropped the link; it is re-read when the radio is back);
    /// otherwise a reported peer disappears, and a later advertisement connects again.
    private func connectionEnded(_ address: String) {
        let offline = radio.unavailability != nil
        state.withLock { state in
            guard !state.stopped, var remote = state.remotes[address] else { return }
            remote.client = nil
            remote.connecting = false
            remote.retryAt = .now + configuration.reconnectInterval
            if offline || remote.reported == nil {
                state.remotes[address] = remote
                return
            }
            state.remotes[address] = nil
            if let reported = remote.reported { feed.enqueue(.disappeared(reported)) }
        }
        feed.flush()
    }

    /// The radio is back: every advertiser gets a full timeout to be heard again.
    func radioRecovered() {
        let now = ContinuousClock.now
        state.withLock { state in
            for address in state.remotes.keys { state.remotes[address]?.lastSeen = now }
        }
    }

    /// Advertisers not heard for the timeout disappear (not while the radio is off).
    private func sweep() {
        guard radio.unavailability == nil else { return }
        let deadline = ContinuousClock.now - configuration.advertisementTimeout
        let clients = state.withLock { state -> [GATTClient] in
            guard !state.stopped else { return [] }
            var clients: [GATTClient] = []
            for (address, remote) in state.remotes where remote.lastSeen < deadline {
                state.remotes[address] = nil
                state.followers[address] = nil  // it ends when its client is closed below
                if let client = remote.client { clients.append(client) }
                if let reported = remote.reported { feed.enqueue(.disappeared(reported)) }
            }
            return clients
        }
        feed.flush()
        for client in clients { client.close() }
    }
}
