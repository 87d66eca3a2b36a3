import PeerSyncCore

/// A peer a browser saw: one announcement of one group.
public struct DiscoveredPeer: Sendable, Hashable, CustomStringConvertible {
    /// The announcement's name, unique within the group for this discovery: the key of every
    /// event about it (``PeerEvent``). Two announcements with the same peer ID have different
    /// names.
    public var name: String
    /// The announced peer ID.
    public var peerID: PeerID
    /// The group browsed.
    public var group: PeerGroupID
    /// The host name the peer's addresses belong to, when the discovery has one (DNS-SD:
    /// `host.local`).
    public var hostName: String?
    /// The addresses to reach the peer at (numeric IPv4/IPv6 text, or a discovery-specific
    /// form such as a Bluetooth address), sorted; never empty.
    public var addresses: [String]
    /// The port of the peer's listener.
    public var port: UInt16
    /// The announced metadata (DNS-SD: every TXT key that is not one of our own, unknown keys
    /// included).
    public var metadata: PeerMetadata
    /// The protocol version the peer announced.
    public var protocolVersion: Int
    /// Which discovery saw the peer (and so which transport reaches it).
    public var discovery: DiscoveryKind

    /// A peer with these values, taken as given (implementations of ``Discovery`` make these).
    public init(name: String, peerID: PeerID, group: PeerGroupID, hostName: String? = nil, addresses: [String],
                port: UInt16, metadata: PeerMetadata, protocolVersion: Int, discovery: DiscoveryKind) {
        self.name = name
        self.peerID = peerID
        self.group = group
        self.hostName = hostName
        self.addresses = addresses
        self.port = port
        self.metadata = metadata
        self.protocolVersion = protocolVersion
        self.discovery = discovery
    }

    public var description: String {
        "\(peerID) '\(name)' in \(group) at \(addresses.joined(separator: ","))#\(port) \(metadata) via \(discovery)"
    }
}

/// What a browser reports about one announcement. For each ``DiscoveredPeer/name`` the events
/// follow `appeared (updated)* disappeared`, and may start again: never an update or a
/// disappearance without an appearance before it, never two appearances in a row.
public enum PeerEvent: Sendable, Hashable, CustomStringConvertible {
    /// A peer is visible, with its current state.
    case appeared(DiscoveredPeer)
    /// A visible peer's metadata, addresses or port changed; the new complete state.
    case updated(DiscoveredPeer)
    /// A peer is gone (unpublished, shut down, or no longer reachable); its last known state.
    case disappeared(DiscoveredPeer)

    /// The peer the event is about.
    public var peer: DiscoveredPeer {
        switch self {
        case .appeared(let peer), .updated(let peer), .disappeared(let peer): peer
        }
    }

    public var description: String {
        switch self {
        case .appeared(let peer): "appeared \(peer)"
        case .updated(let peer): "updated \(peer)"
        case .disappeared(let peer): "disappeared \(peer)"
        }
    }
}
