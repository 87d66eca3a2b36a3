import PeerSyncCore
import PeerSyncDiscovery

/// `Discovery` over DNS-SD (mDNS) through the Avahi daemon, as Couchbase Lite's multipeer
/// replicator announces itself on Wi-Fi/LAN: service type `_couchbaseP2P._tcp`, the peer group
/// as the subtype `<group>._sub._couchbaseP2P._tcp`, the port of the peer's own (TLS) listener,
/// and a TXT record with the peer ID, the protocol version and the metadata (keys in
/// `Packages/DNSSD/README.md`).
///
/// ```swift
/// let discovery = try DNSSDDiscovery()
/// let group = try PeerGroupID("tasks")
/// let me = try await discovery.publish(PeerAnnouncement(peerID: myPeerID, group: group, port: listenerPort))
/// for await event in try await discovery.browse(group: group) { print(event) }
/// ```
///
/// Needs `avahi-daemon` and the system D-Bus (`DBUS_SYSTEM_BUS_ADDRESS` overrides where it
/// is). Neither has to be running when the discovery starts or stay up: ``status`` says
/// `DiscoveryStatus.unavailable(_:)` (with the reason) while they are not, the discovery
/// waits for them, and once the daemon is back it registers every publication again and
/// restarts every browse (`DiscoveryStatus.recovered`). Browsers keep the peers they
/// reported meanwhile and report the differences afterwards.
///
/// Name conflicts — another publication with the same name on this daemon or another host
/// claiming it — are resolved the Avahi way (`name #2`, …); `PeerPublication.name` follows.
/// Two publications on one daemon that are identical record for record (same name, port and
/// TXT) are one DNS-SD service to Avahi: it accepts both under that name. DNS compares names
/// and subtypes without regard to ASCII case.
///
/// Threading: any task; every call suspends (never blocks) while a thread of the discovery's
/// own talks to the daemon. Keep the instance while you use it: releasing the last reference
/// shuts it down.
public final class DNSSDDiscovery: Discovery {
    /// The settings it was made with.
    public let configuration: DNSSDConfiguration
    private let engine: AvahiEngine

    /// Starts connecting to the daemon (in the background: the status stream tells how it goes).
    /// Throws `PeerSyncError.Code.invalidArgument` for an invalid configuration or unknown
    /// interface, `PeerSyncError.Code.io` if its thread cannot be started.
    public init(configuration: DNSSDConfiguration = DNSSDConfiguration()) throws(PeerSyncError) {
        try configuration.validate()
        self.configuration = configuration
        self.engine = try AvahiEngine(configuration: configuration)
    }

    deinit {
        engine.shutdownSoon()
    }

    public var kind: DiscoveryKind { .dnssd }

    public var status: DiscoveryStatus { engine.status.current }

    public func statusUpdates() -> AsyncStream<DiscoveryStatus> { engine.status.stream() }

    /// Publishes `announcement` on the daemon. Returns after the daemon probed the name and
    /// established it (about a second; the name may have been replaced by then), or at once
    /// while the daemon is unavailable. `PeerAnnouncement.addresses` is not used: the daemon
    /// announces its host's own addresses.
    public func publish(_ announcement: PeerAnnouncement) async throws -> any PeerPublication {
        let (id, snapshot) = try await engine.publish(announcement)
        return DNSSDPublication(engine: engine, id: id, snapshot: snapshot)
    }

    public func browse(group: PeerGroupID) async throws -> PeerBrowser {
        try await engine.browse(group)
    }

    public func shutdown() async {
        await engine.shutdown()
    }
}

/// A publication of a ``DNSSDDiscovery``.
final class DNSSDPublication: PeerPublication {
    private let engine: AvahiEngine
    private let id: Int
    // The loop thread writes it when it renames the publication or changes its metadata.
    private let snapshot: LockedValue<(name: String, announcement: PeerAnnouncement)>

    init(engine: AvahiEngine, id: Int, snapshot: LockedValue<(name: String, announcement: PeerAnnouncement)>) {
        self.engine = engine
        self.id = id
        self.snapshot = snapshot
    }

    var announcement: PeerAnnouncement { snapshot.withLock { $0.announcement } }

    var name: String { snapshot.withLock { $0.name } }

    func updateMetadata(_ metadata: PeerMetadata) async throws {
        try await engine.updateMetadata(metadata, of: id)
    }

    func unpublish() async {
        await engine.unpublish(id)
    }
}
