import PeerSyncCore
import PeerSyncDiscovery

/// One announcement of a ``BLEDiscovery``: its GATT server and, while the radio works, its
/// advertisement.
final class BLEPublication: PeerPublication {
    let id: Int
    let name: String
    let server: GATTServer
    private weak let discovery: BLEDiscovery?
    private let radio: any BLERadio

    private struct State {
        var announcement: PeerAnnouncement
        var advertising: (any BLEAdvertisingSet)?
        var starting = false
        var withdrawn = false
    }

    // Guards the announcement and the advertising set; never held across a suspension.
    private let state: LockedValue<State>

    init(discovery: BLEDiscovery, id: Int, announcement: PeerAnnouncement, name: String, server: GATTServer) {
        self.discovery = discovery
        self.radio = discovery.radio
        self.id = id
        self.name = name
        self.server = server
        self.state = LockedValue(State(announcement: announcement))
    }

    var announcement: PeerAnnouncement { state.withLock { $0.announcement } }

    /// The peer as this host's own browsers report it.
    func discovered(by hostName: String) -> DiscoveredPeer {
        let announcement = self.announcement
        return DiscoveredPeer(name: name, peerID: announcement.peerID, group: announcement.group, hostName: hostName,
                              addresses: [hostName], port: announcement.port, metadata: announcement.metadata,
                              protocolVersion: announcement.protocolVersion, discovery: .bluetoothLE)
    }

    /// Serves the new TXT record (subscribed browsers are notified). Throws
    /// ``PeerSyncError/Code/closed`` after ``unpublish()`` or the discovery's shutdown,
    /// ``PeerSyncError/Code/tooLarge`` over 512 bytes.
    func updateMetadata(_ metadata: PeerMetadata) async throws {
        guard let discovery, !state.withLock({ $0.withdrawn }) else {
            throw BLEDiscovery.closedError("the announcement '\(name)' was unpublished")
        }
        try discovery.checkOpen()
        var updated = announcement
        updated.metadata = metadata
        try await server.updateMetadata(TXTRecord.wireFormat(TXTRecord.entries(for: updated)))
        state.withLock { $0.announcement.metadata = metadata }
        discovery.changed(self)
    }

    func unpublish() async {
        await withdraw()
        discovery?.removed(self)
    }

    /// Advertises, unless already advertising, withdrawn, or the radio is unavailable (then
    /// the discovery calls again when it is back). Throws what the radio refused, as
    /// ``PeerSyncError/Code/discoveryFailed`` unless it is `tooLarge`.
    func startAdvertising() async throws {
        let go = state.withLock { state -> Bool in
            guard !state.withdrawn, state.advertising == nil, !state.starting else { return false }
            state.starting = true
            return true
        }
        guard go, radio.unavailability == nil else {
            if go { state.withLock { $0.starting = false } }
            return
        }
        let advertisement = BLEAdvertisement(serviceUUID: server.serviceUUID, localName: name)
        let set: any BLEAdvertisingSet
        do {
            set = try await radio.advertise(advertisement, server: server)
        } catch {
            state.withLock { $0.starting = false }
            // Switched off meanwhile: advertised when it is back.
            if radio.unavailability != nil { return }
            if let error = error as? PeerSyncError, error.code == .tooLarge || error.code == .discoveryFailed { throw error }
            throw PeerSyncError(.discoveryFailed, "the Bluetooth radio refused the advertisement of '\(name)': \(error)")
        }
        let keep = state.withLock { state -> Bool in
            state.starting = false
            guard !state.withdrawn else { return false }
            state.advertising = set
            return true
        }
        if !keep { await set.stop() }
    }

    /// Stops advertising and closes the GATT server. Idempotent.
    func withdraw() async {
        let set = state.withLock { state -> (any BLEAdvertisingSet)? in
            state.withdrawn = true
            defer { state.advertising = nil }
            return state.advertising
        }
        await set?.stop()
        server.stop()
    }

    /// ``withdraw()`` from a context that cannot wait (the discovery's deinit).
    func withdrawWithoutWaiting() {
        let set = state.withLock { state -> (any BLEAdvertisingSet)? in
            state.withdrawn = true
            defer { state.advertising = nil }
            return state.advertising
        }
        server.stop()
        if let set { Task { await set.stop() } }
    }
}
