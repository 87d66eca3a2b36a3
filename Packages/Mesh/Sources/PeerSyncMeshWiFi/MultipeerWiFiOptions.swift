import PeerSyncCore

/// Settings of the Wi-Fi/LAN side of a mesh (``WiFiMeshLinkTransport`` and the DNS-SD discovery
/// that `MultipeerReplicator.init(config:wifi:)` pairs with it). The defaults suit a phone or
/// laptop on one network: an ephemeral port on every address, every interface Avahi uses.
public struct MultipeerWiFiOptions: Sendable, Hashable {
    /// The TCP port of the mesh's own TLS listener, announced through DNS-SD. 0 (default): a
    /// free port picked when the mesh starts (a new one after every restart).
    public var port: UInt16 = 0
    /// A network interface (e.g. `"wlan0"`, `"eth0"`, `"lo"`) to use alone: the listener binds
    /// its IPv4 address, links are dialled from it, and DNS-SD publishes and browses only on it.
    /// nil (default): every interface (the listener binds every address; DNS-SD uses every
    /// interface the Avahi daemon allows). An unknown interface makes ``WiFiMeshLinkTransport/start(_:)``
    /// throw `PeerSyncError.Code.invalidArgument`.
    public var interface: String?
    /// A numeric address to bind the listener to instead of every address (ignored when
    /// ``interface`` is set). nil (default): every address.
    public var bindAddress: String?
    /// The database name in the path dialled, `wss://host:port/<databaseName>/_blipsync`.
    /// Couchbase Lite's release value is not public; the listener accepts any
    /// `/<name>/_blipsync`. Default `"db"`.
    public var databaseName: String = "db"
    /// Time allowed for the TCP connection of a dial, per address tried. Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// How often an idle link sends a WebSocket ping, so that a peer that vanished without a
    /// close (its network gone, its machine off) is noticed within this plus the dead-peer
    /// timeout (30 s) rather than at the next write. Default 15 s; nil: never.
    public var heartbeatInterval: Duration? = .seconds(15)

    /// Options with this port, interface and bind address; the other settings keep their defaults.
    /// Not validated here: see ``validate()``.
    public init(port: UInt16 = 0, interface: String? = nil, bindAddress: String? = nil) {
        self.port = port
        self.interface = interface
        self.bindAddress = bindAddress
    }

    /// Throws `PeerSyncError.Code.invalidArgument` for an empty or over-long interface name,
    /// an empty bind address, a database name that is not one path segment, or a
    /// non-positive timeout.
    public func validate() throws(PeerSyncError) {
        if let interface, interface.isEmpty || interface.utf8.count > 15 {
            throw PeerSyncError(.invalidArgument, "invalid network interface name '\(interface)'")
        }
        if let bindAddress, bindAddress.isEmpty {
            throw PeerSyncError(.invalidArgument, "the bind address is empty")
        }
        guard !databaseName.isEmpty,
              databaseName.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/")
                                             && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }) else {
            throw PeerSyncError(.invalidArgument, "the database name must be one URL path segment, got '\(databaseName)'")
        }
        guard connectTimeout > .zero, heartbeatInterval.map({ $0 > .zero }) ?? true else {
            throw PeerSyncError(.invalidArgument, "connectTimeout and heartbeatInterval must be positive")
        }
    }
}
