import PeerSyncCore

/// The shared "network" of ``InProcessDiscovery`` instances: many simulated hosts in one
/// process, each with its own `Discovery`, seeing each other's announcements. For tests and
/// simulations of code above discovery (the mesh), with seeded delay and loss
/// (``SimulatedDiscoveryConditions``), partitions, and outages of the "service".
///
/// It behaves like one DNS-SD domain: announcement names are unique across the registry
/// (compared without regard to case; a taken name becomes `name #2`, …), every host sees the
/// announcements of its browsed group (its own included), and an outage is what a restart of
/// `avahi-daemon` is to PeerSyncDNSSD.
///
/// Threading: every method may be called from any thread; all are non-blocking (a short
/// internal lock) and none suspends.
public final class InProcessDiscoveryRegistry: Sendable {
    struct Publication {
        let instance: Int
        let hostName: String
        let addresses: [String]
        var announcement: PeerAnnouncement
        var name: String
    }

    struct Browse {
        let instance: Int
        let hostName: String
        let group: PeerGroupID
        var delivered = PeerTable()
        let delivery: BrowseDelivery
    }

    struct Instance {
        let hostName: String
        let status: DiscoveryStatusBroadcast
    }

    struct State {
        var random: SplitMix64
        var nextID = 0
        var instances: [Int: Instance] = [:]
        var publications: [Int: Publication] = [:]
        var browses: [Int: Browse] = [:]
        /// Host name → partition number, while partitioned; hosts not listed share one.
        var partitions: [String: Int]?
        var outage: PeerSyncError?

        mutating func makeID() -> Int {
            nextID += 1
            return nextID
        }
    }

    /// How events are delivered.
    public let conditions: SimulatedDiscoveryConditions
    // Guards every publication, browse and instance. Lock order: registry → browse delivery →
    // stream feed; feeds are flushed (and status streams told) only after it is released.
    private let state: LockedValue<State>

    /// Throws `PeerSyncError.Code.invalidArgument` if `conditions` are invalid.
    public init(conditions: SimulatedDiscoveryConditions = .perfect) throws(PeerSyncError) {
        try conditions.validate()
        self.conditions = conditions
        self.state = LockedValue(State(random: SplitMix64(seed: conditions.seed)))
    }

    // MARK: Simulated network events

    /// Splits the hosts into groups that see only each other: hosts named in one inner array
    /// form a partition; every host not named forms one more. Browsers see the peers of the
    /// other partitions disappear. Replaces any earlier partition.
    public func partition(_ groups: [[String]]) {
        var partitions: [String: Int] = [:]
        for (index, hosts) in groups.enumerated() {
            for host in hosts { partitions[host] = index }
        }
        change { state in state.partitions = partitions }
    }

    /// Ends a partition: every host sees every other again.
    public func heal() {
        change { state in state.partitions = nil }
    }

    /// Simulates the service going away (as `avahi-daemon` stopping): every instance reports
    /// ``DiscoveryStatus/unavailable(_:)`` with a `PeerSyncError.Code.discoveryUnavailable`
    /// error, and browsers see no change until ``endOutage()``. Publishing and browsing keep
    /// working (they take effect afterwards).
    public func beginOutage(reason: String = "simulated outage of the in-process discovery registry") {
        let error = PeerSyncError(.discoveryUnavailable, reason)
        let statuses = state.withLock { state -> [DiscoveryStatusBroadcast] in
            state.outage = error
            return state.instances.values.map(\.status)
        }
        for status in statuses { status.update(.unavailable(error)) }
    }

    /// Ends an outage: browsers catch up with everything that changed meanwhile (as a restarted
    /// browse does), then every instance reports ``DiscoveryStatus/recovered``.
    public func endOutage() {
        let statuses = state.withLock { state -> [DiscoveryStatusBroadcast] in
            guard state.outage != nil else { return [] }
            state.outage = nil
            return state.instances.values.map(\.status)
        }
        guard !statuses.isEmpty else { return }
        change { _ in }
        for status in statuses { status.update(.recovered) }
    }

    // MARK: Operations of the instances

    func register(hostName: String) -> (id: Int, status: DiscoveryStatusBroadcast) {
        state.withLock { state in
            let id = state.makeID()
            let status = DiscoveryStatusBroadcast(state.outage.map { .unavailable($0) } ?? .running)
            state.instances[id] = Instance(hostName: hostName, status: status)
            return (id, status)
        }
    }

    func publish(_ announcement: PeerAnnouncement, from instance: Int, hostAddresses: [String]) throws(PeerSyncError) -> Int {
        try change { state throws(PeerSyncError) in
            guard let host = state.instances[instance] else { throw Self.closedError() }
            var name = announcement.name
            let taken = Set(state.publications.values.map { $0.name.lowercased() })
            while taken.contains(name.lowercased()) { name = PeerAnnouncement.alternativeName(after: name) }
            let id = state.makeID()
            state.publications[id] = Publication(
                instance: instance, hostName: host.hostName,
                addresses: announcement.addresses.isEmpty ? hostAddresses : announcement.addresses,
                announcement: announcement, name: name)
            return id
        }
    }

    func update(_ metadata: PeerMetadata, of publication: Int) throws(PeerSyncError) {
        try change { state throws(PeerSyncError) in
            guard state.publications[publication] != nil else { throw Self.closedError("the announcement was unpublished") }
            state.publications[publication]?.announcement.metadata = metadata
        }
    }

    func unpublish(_ publication: Int) {
        change { state in state.publications[publication] = nil }
    }

    /// The name and announcement of a publication, nil once unpublished.
    func published(_ publication: Int) -> (name: String, announcement: PeerAnnouncement)? {
        state.withLock { state in
            state.publications[publication].map { ($0.name, $0.announcement) }
        }
    }

    func browse(_ group: PeerGroupID, from instance: Int) throws(PeerSyncError) -> PeerBrowser {
        let (stream, feed) = OrderedStreamFeed<PeerEvent>.makeStream()
        let delivery = BrowseDelivery(feed: feed, delayed: !conditions.isPerfect)
        let id = try change { state throws(PeerSyncError) in
            guard let host = state.instances[instance] else { throw Self.closedError() }
            let id = state.makeID()
            state.browses[id] = Browse(instance: instance, hostName: host.hostName, group: group, delivery: delivery)
            return id
        }
        feed.onTermination { [weak self] in self?.stopBrowse(id) }
        return PeerBrowser(group: group, events: stream, onStop: { [weak self] in
            guard let self else {
                delivery.stop()
                return
            }
            self.stopBrowse(id)
        })
    }

    func stopBrowse(_ browse: Int) {
        let delivery = state.withLock { $0.browses.removeValue(forKey: browse)?.delivery }
        delivery?.stop()
    }

    /// Withdraws an instance's publications, ends its browses and reports it stopped.
    func shutdown(_ instance: Int) {
        var ended: [BrowseDelivery] = []
        var status: DiscoveryStatusBroadcast?
        change { state in
            status = state.instances.removeValue(forKey: instance)?.status
            state.publications = state.publications.filter { $0.value.instance != instance }
            for (id, browse) in state.browses where browse.instance == instance {
                state.browses[id] = nil
                ended.append(browse.delivery)
            }
        }
        for delivery in ended { delivery.stop() }
        status?.update(.stopped)
    }

    // MARK: Reconciling

    /// Applies `mutation`, then brings every browse's reported peers up to date (unless in an
    /// outage) and delivers the events after releasing the lock.
    @discardableResult
    private func change<T, E: Error>(_ mutation: (inout State) throws(E) -> T) throws(E) -> T {
        let conditions = self.conditions
        let (result, deliveries) = try state.withLock { state throws(E) -> (T, [BrowseDelivery]) in
            let result = try mutation(&state)
            guard state.outage == nil else { return (result, []) }
            var deliveries: [BrowseDelivery] = []
            for id in state.browses.keys.sorted() {
                guard var browse = state.browses[id] else { continue }
                let visible = state.publications.values
                    .filter { $0.announcement.group == browse.group && Self.canSee(browse.hostName, $0.hostName, state.partitions) }
                    .map { Self.discovered($0) }
                let events = browse.delivered.reconcile(with: visible)
                guard !events.isEmpty else { continue }
                state.browses[id] = browse
                for event in events {
                    browse.delivery.schedule(event, after: conditions.isPerfect ? .zero : conditions.drawDelay(&state.random))
                }
                deliveries.append(browse.delivery)
            }
            return (result, deliveries)
        }
        for delivery in deliveries { delivery.kick() }
        return result
    }

    private static func canSee(_ browser: String, _ publisher: String, _ partitions: [String: Int]?) -> Bool {
        guard let partitions, browser != publisher else { return true }
        return partitions[browser, default: -1] == partitions[publisher, default: -1]
    }

    private static func discovered(_ publication: Publication) -> DiscoveredPeer {
        let announcement = publication.announcement
        return DiscoveredPeer(name: publication.name, peerID: announcement.peerID, group: announcement.group,
                              hostName: publication.hostName, addresses: publication.addresses.sorted(),
                              port: announcement.port, metadata: announcement.metadata,
                              protocolVersion: announcement.protocolVersion, discovery: .inProcess)
    }

    static func closedError(_ why: String = "the discovery was shut down") -> PeerSyncError {
        PeerSyncError(.closed, why)
    }
}
