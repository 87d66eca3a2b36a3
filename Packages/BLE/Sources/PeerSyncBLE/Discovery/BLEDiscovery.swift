import PeerSyncCore
import PeerSyncDiscovery

/// `Discovery` over Bluetooth LE, as Couchbase Lite's multipeer replicator does it
/// (`shared/reference/multipeer-protocol.md` §2).
///
/// - **Publishing** advertises the group's service UUID (``BLEServiceUUID/forPeerGroup(_:)``)
///   with the announcement's name as the local name (``BLEAdvertisement``), and serves a
///   ``GATTServer`` behind the advertisement: the PSM characteristic holds the
///   announcement's port (the L2CAP PSM of the peer's data channel), the metadata
///   characteristic its DNS-SD TXT record (peer ID, protocol version, metadata — the same
///   encoding as PeerSyncDNSSD). Metadata updates notify subscribed browsers.
/// - **Names** are the local name, so at most 29 bytes: longer names are cut. BLE has no
///   name registry: before advertising, a publication listens for
///   ``BLEDiscoveryConfiguration/nameProbeDuration`` and takes ` #2`, ` #3`, … when the name
///   is in use in its group (two hosts publishing one name at the same instant can still
///   collide).
/// - **Browsing** scans for the group's service UUID, connects GATT to each advertiser
///   (``GATTClient``), reads the PSM and metadata, subscribes to the metadata, and reports
///   the peer with its address (the advertiser's Bluetooth address) and the PSM as port,
///   stamped `DiscoveryKind/bluetoothLE`. A peer disappears when its GATT connection ends or
///   its advertisements stop for ``BLEDiscoveryConfiguration/advertisementTimeout``. A radio
///   does not hear its own advertisements: this instance's own publications are reported to
///   its browsers directly.
/// - **Status** follows the radio: `running`; `unavailable` (code
///   `PeerSyncError/Code/discoveryUnavailable`) while the adapter is off or absent — on a
///   system without Bluetooth, at once and for good, with the message "Bluetooth is not
///   available on this system: …"; `recovered` when it is back, after publications were
///   advertised again. Browsers keep their peers through an outage and then report what
///   changed.
///
/// Two radios: the system's adapter through BlueZ (``init(configuration:)``; one publication
/// at a time, legacy advertising) and a ``SimulatedBLEAir`` (``init(air:hostName:deviceAddress:configuration:)``),
/// on which the discovery conformance suite runs.
///
/// Threading: every method from any task. Keep the instance while using it.
public final class BLEDiscovery: Discovery {
    /// The timing.
    public let configuration: BLEDiscoveryConfiguration
    /// A name for logs and failures (the simulated host's name, or "bluez").
    public let hostName: String
    let radio: any BLERadio
    let broadcast: DiscoveryStatusBroadcast

    struct State {
        var publications: [Int: BLEPublication] = [:]
        var browses: [Int: BLEBrowse] = [:]
        var nextID = 0
        var shutDown = false
        var watcher: Task<Void, Never>?

        mutating func makeID() -> Int {
            nextID += 1
            return nextID
        }
    }

    // Guards the publications and browses; never held across a suspension, and browse feeds
    // are only enqueued under it (flushed after).
    let state = LockedValue(State())

    /// Discovery on the system's default Bluetooth adapter (BlueZ). On a system without
    /// Bluetooth it is created all the same and reports `DiscoveryStatus/unavailable(_:)`
    /// with "Bluetooth is not available on this system: …"; publishing and browsing then do
    /// nothing visible. Throws `PeerSyncError/Code/invalidArgument` for an invalid
    /// configuration.
    public convenience init(configuration: BLEDiscoveryConfiguration = BLEDiscoveryConfiguration()) throws(PeerSyncError) {
        try configuration.validate()
        self.init(radio: BlueZRadio(), hostName: "bluez", configuration: configuration)
    }

    /// Discovery on a simulated radio of `air`, as the host `hostName`. `deviceAddress` is the
    /// host's L2CAP device address (its ``SimulatedL2CAPConnector/localAddress``), so that a
    /// ``SimulatedL2CAPNetwork`` made with the same air reaches it at the addresses its
    /// advertisements are seen at; nil (default): discovery only. Throws
    /// `PeerSyncError/Code/invalidArgument` for an invalid configuration.
    public convenience init(air: SimulatedBLEAir, hostName: String, deviceAddress: String? = nil,
                            configuration: BLEDiscoveryConfiguration = BLEDiscoveryConfiguration()) throws(PeerSyncError) {
        try configuration.validate()
        self.init(radio: SimulatedBLERadio(air: air, device: deviceAddress), hostName: hostName, configuration: configuration)
    }

    init(radio: any BLERadio, hostName: String, configuration: BLEDiscoveryConfiguration) {
        self.radio = radio
        self.hostName = hostName
        self.configuration = configuration
        self.broadcast = DiscoveryStatusBroadcast(radio.unavailability.map { .unavailable(Self.statusError($0)) } ?? .running)
        let updates = radio.availabilityUpdates()
        let watcher = Task { [weak self] in
            for await unavailability in updates {
                guard let self else { return }
                await self.availabilityChanged(unavailability)
            }
        }
        state.withLock { $0.watcher = watcher }
    }

    deinit {
        let (watcher, publications, browses) = state.withLock { ($0.watcher, Array($0.publications.values), Array($0.browses.values)) }
        watcher?.cancel()
        for browse in browses { browse.stop() }
        for publication in publications { publication.withdrawWithoutWaiting() }
    }

    public var kind: DiscoveryKind { .bluetoothLE }

    public var status: DiscoveryStatus { broadcast.current }

    public func statusUpdates() -> AsyncStream<DiscoveryStatus> { broadcast.stream() }

    /// Chooses a unique name (listening for ``BLEDiscoveryConfiguration/nameProbeDuration``
    /// while the radio works), starts the GATT server and the advertisement, and returns.
    /// While the radio is unavailable it returns at once; the advertisement starts when the
    /// radio is back. Throws `PeerSyncError/Code/closed` after ``shutdown()``,
    /// `PeerSyncError/Code/tooLarge` when the TXT record is over 512 bytes (ATT's limit),
    /// `PeerSyncError/Code/discoveryFailed` when the radio refuses the advertisement.
    public func publish(_ announcement: PeerAnnouncement) async throws -> any PeerPublication {
        try checkOpen()
        let serviceUUID = BLEServiceUUID.forPeerGroup(announcement.group.rawValue)
        let heard = radio.unavailability == nil ? try await namesInUse(serviceUUID) : []
        let server = try GATTServer(serviceUUID: serviceUUID, psm: announcement.port,
                                    metadata: TXTRecord.wireFormat(TXTRecord.entries(for: announcement)),
                                    maxMTU: configuration.preferredMTU)
        let publication = try state.withLock { state throws(PeerSyncError) -> BLEPublication in
            guard !state.shutDown else { throw Self.closedError() }
            var taken = Set(heard.map { $0.lowercased() })
            for other in state.publications.values where other.announcement.group == announcement.group {
                taken.insert(other.name.lowercased())
            }
            var name = BLEAnnouncementName.fitted(announcement.name)
            while taken.contains(name.lowercased()) { name = BLEAnnouncementName.alternative(after: name) }
            let id = state.makeID()
            let publication = BLEPublication(discovery: self, id: id, announcement: announcement, name: name, server: server)
            state.publications[id] = publication
            for browse in state.browses.values { browse.localChanged(publication.discovered(by: hostName)) }
            return publication
        }
        flushBrowses()
        do {
            try await publication.startAdvertising()
        } catch {
            await publication.unpublish()
            throw error
        }
        return publication
    }

    /// Starts scanning for `group`'s service UUID; returns at once. Throws
    /// `PeerSyncError/Code/closed` after ``shutdown()``.
    public func browse(group: PeerGroupID) async throws -> PeerBrowser {
        let (stream, feed) = OrderedStreamFeed<PeerEvent>.makeStream()
        let (browse, id) = try state.withLock { state throws(PeerSyncError) -> (BLEBrowse, Int) in
            guard !state.shutDown else { throw Self.closedError() }
            let id = state.makeID()
            let browse = BLEBrowse(discovery: self, group: group, feed: feed)
            state.browses[id] = browse
            for publication in state.publications.values where publication.announcement.group == group {
                browse.localChanged(publication.discovered(by: hostName))
            }
            return (browse, id)
        }
        feed.flush()
        feed.onTermination { [weak self] in self?.endBrowse(id) }
        browse.start()
        return PeerBrowser(group: group, events: stream, onStop: { [weak self] in
            guard let self else { return browse.stop() }
            self.endBrowse(id)
        })
    }

    /// Withdraws every publication (stops advertising, closes the GATT servers), ends every
    /// browse, reports `DiscoveryStatus/stopped`. Idempotent.
    public func shutdown() async {
        let (publications, browses) = state.withLock { state -> ([BLEPublication], [BLEBrowse]) in
            state.shutDown = true
            let result = (Array(state.publications.values), Array(state.browses.values))
            state.publications.removeAll()
            state.browses.removeAll()
            return result
        }
        for browse in browses { browse.stop() }
        for publication in publications { await publication.withdraw() }
        state.withLock { $0.watcher }?.cancel()
        broadcast.update(.stopped)
    }

    // MARK: For publications and browses

    /// Names advertised in the group of `serviceUUID` during the probe.
    private func namesInUse(_ serviceUUID: BLEUUID) async throws -> Set<String> {
        let sightings = try await radio.scan()
        let names = LockedValue<Set<String>>([])
        let listener = Task {
            for try await sighting in sightings where sighting.advertisement.advertises(serviceUUID) {
                if let name = sighting.advertisement.localName { names.withLock { _ = $0.insert(name) } }
            }
        }
        try? await Task.sleep(for: configuration.nameProbeDuration)
        listener.cancel()
        return names.withLock { $0 }
    }

    func checkOpen() throws(PeerSyncError) {
        if state.withLock({ $0.shutDown }) { throw Self.closedError() }
    }

    /// Removes a publication (unpublished) and tells the local browses.
    func removed(_ publication: BLEPublication) {
        let found = state.withLock { state -> Bool in
            guard state.publications.removeValue(forKey: publication.id) != nil else { return false }
            for browse in state.browses.values { browse.localRemoved(publication.name) }
            return true
        }
        if found { flushBrowses() }
    }

    /// Tells the local browses a publication's metadata changed.
    func changed(_ publication: BLEPublication) {
        state.withLock { state in
            guard state.publications[publication.id] != nil else { return }
            for browse in state.browses.values { browse.localChanged(publication.discovered(by: hostName)) }
        }
        flushBrowses()
    }

    func flushBrowses() {
        for browse in state.withLock({ Array($0.browses.values) }) { browse.flush() }
    }

    private func endBrowse(_ id: Int) {
        state.withLock { $0.browses.removeValue(forKey: id) }?.stop()
    }

    private func availabilityChanged(_ unavailability: PeerSyncError?) async {
        if let unavailability {
            broadcast.update(.unavailable(Self.statusError(unavailability)))
            return
        }
        guard case .unavailable = broadcast.current else { return }
        for publication in state.withLock({ Array($0.publications.values) }) {
            try? await publication.startAdvertising()
        }
        for browse in state.withLock({ Array($0.browses.values) }) { browse.radioRecovered() }
        broadcast.update(.recovered)
    }

    /// The error a status carries: `discoveryUnavailable`, the radio's message kept.
    static func statusError(_ error: PeerSyncError) -> PeerSyncError {
        guard error.code != .discoveryUnavailable else { return error }
        return PeerSyncError(.discoveryUnavailable, error.message, context: error.context.merging(["cause": error.code.rawValue]) { a, _ in a })
    }

    static func closedError(_ what: String = "the Bluetooth LE discovery was shut down") -> PeerSyncError {
        PeerSyncError(.closed, what)
    }
}
