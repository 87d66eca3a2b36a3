/// Which kind of link carries a connection. Exposed as ``MessageConnection/kind`` so upper
/// layers (the mesh) can prefer one kind of link over another.
public enum TransportKind: Sendable, Hashable, CustomStringConvertible {
    /// In-process (PeerSyncLoopback), optionally with simulated link conditions.
    case loopback
    /// WebSocket over TCP, with or without TLS (PeerSyncWebSocket).
    case webSocket
    /// Bluetooth LE L2CAP (PeerSyncBLE).
    case bluetooth
    /// A transport written outside PeerSync, named by its author (e.g. `"serial"`).
    case custom(String)

    public var description: String {
        switch self {
        case .loopback: "loopback"
        case .webSocket: "webSocket"
        case .bluetooth: "bluetooth"
        case .custom(let name): name
        }
    }
}
