/// Which discovery saw a peer, stamped on every ``DiscoveredPeer``: the mesh groups the
/// sightings of one peer ID from several discoveries and picks the transport from it.
public enum DiscoveryKind: Sendable, Hashable, CustomStringConvertible {
    /// DNS-SD / mDNS on an IP network (PeerSyncDNSSD); reached over TCP (WebSocket/TLS).
    case dnssd
    /// Bluetooth LE advertising (PeerSyncBLE); reached over L2CAP.
    case bluetoothLE
    /// The in-process registry of tests and simulations (``InProcessDiscovery``).
    case inProcess
    /// A discovery written outside PeerSync, named by its author.
    case custom(String)

    public var description: String {
        switch self {
        case .dnssd: "dnssd"
        case .bluetoothLE: "bluetoothLE"
        case .inProcess: "inProcess"
        case .custom(let name): name
        }
    }
}
