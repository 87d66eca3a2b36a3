import PeerSyncCore

/// A ``Discovery`` on an ``InProcessDiscoveryRegistry``: one simulated host. Create one per
/// host, all on the same registry:
///
/// ```swift
/// let registry = try InProcessDiscoveryRegistry()
/// let alice = InProcessDiscovery(registry: registry, hostName: "alice")
/// let bob = InProcessDiscovery(registry: registry, hostName: "bob")
/// let group = try PeerGroupID("team")
/// let browser = try await bob.browse(group: group)
/// _ = try await alice.publish(PeerAnnouncement(peerID: PeerID("alice-1"), group: group, port: 4984))
/// for await event in browser { print(event); break }    // appeared alice-1 'alice-1' in team …
/// ```
///
/// Events are stamped ``DiscoveryKind/inProcess``; a peer's ``DiscoveredPeer/hostName`` is the
/// publishing instance's host name and its addresses are the announcement's, or the host's
/// when the announcement has none.
///
/// Keep the instance while using it: releasing the last reference shuts it down (its
/// publications are withdrawn, its browses end).
public final class InProcessDiscovery: Discovery {
    /// The registry the instance is on.
    public let registry: InProcessDiscoveryRegistry
    /// The simulated host's name (partitions name hosts by it).
    public let hostName: String
    /// The addresses announced for publications that give none. Default: `[hostName]`, which
    /// PeerSyncLoopback accepts as a `loopback://` host.
    public let addresses: [String]

    private let instance: Int
    private let broadcast: DiscoveryStatusBroadcast

    /// An instance on `registry` acting as host `hostName`, announcing `addresses` (default
    /// `[hostName]`) for publications that give none.
    public init(registry: InProcessDiscoveryRegistry, hostName: String, addresses: [String]? = nil) {
        self.registry = registry
        self.hostName = hostName
        self.addresses = addresses ?? [hostName]
        (instance, broadcast) = registry.register(hostName: hostName)
    }

    deinit {
        registry.shutdown(instance)
    }

    public var kind: DiscoveryKind { .inProcess }

    public var status: DiscoveryStatus { broadcast.current }

    public func statusUpdates() -> AsyncStream<DiscoveryStatus> { broadcast.stream() }

    /// Returns at once; the announcement is visible (after the registry's simulated delay) to
    /// every browser of its group that can see this host.
    public func publish(_ announcement: PeerAnnouncement) async throws -> any PeerPublication {
        let id = try registry.publish(announcement, from: instance, hostAddresses: addresses)
        return InProcessPublication(registry: registry, id: id, announcement: announcement)
    }

    public func browse(group: PeerGroupID) async throws -> PeerBrowser {
        try registry.browse(group, from: instance)
    }

    public func shutdown() async {
        registry.shutdown(instance)
    }
}

/// A publication on an ``InProcessDiscoveryRegistry``.
final class InProcessPublication: PeerPublication {
    private let registry: InProcessDiscoveryRegistry
    private let id: Int
    // The last known name and announcement, answered after unpublishing.
    private let last: LockedValue<(name: String, announcement: PeerAnnouncement)>

    init(registry: InProcessDiscoveryRegistry, id: Int, announcement: PeerAnnouncement) {
        self.registry = registry
        self.id = id
        self.last = LockedValue((registry.published(id)?.name ?? announcement.name, announcement))
    }

    private var current: (name: String, announcement: PeerAnnouncement) {
        if let now = registry.published(id) {
            last.withLock { $0 = now }
            return now
        }
        return last.withLock { $0 }
    }

    var announcement: PeerAnnouncement { current.announcement }

    var name: String { current.name }

    func updateMetadata(_ metadata: PeerMetadata) async throws {
        try registry.update(metadata, of: id)
    }

    func unpublish() async {
        registry.unpublish(id)
    }
}
