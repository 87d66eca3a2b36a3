import PeerSyncCore
import PeerSyncDNSSD
import PeerSyncMesh

extension MultipeerReplicator {
    /// A replicator on the real networks `config.transports` lists, as Couchbase Lite's
    /// `MultipeerReplicator(config:)`: for `MultipeerTransport/wifi`, DNS-SD through the Avahi
    /// daemon (`DNSSDDiscovery`, on `wifi.interface` when set) paired with
    /// ``WiFiMeshLinkTransport`` (WebSocket over mutual TLS on `wifi.port`).
    ///
    /// Nothing touches the network before `start()`; the DNS-SD discovery connects to the
    /// system D-Bus in the background (`DBUS_SYSTEM_BUS_ADDRESS` moves it) and waits for
    /// `avahi-daemon` if it is not running (the Wi-Fi status says so).
    ///
    /// - Throws: `PeerSyncError/Code/invalidArgument` if `config.transports` lists
    ///   `MultipeerTransport/bluetooth` (that needs `PeerSyncMeshBluetooth`'s
    ///   `init(config:wifi:bluetooth:)`), for
    ///   invalid `wifi` options or tunables (see `init(config:networks:)`);
    ///   `PeerSyncError/Code/io` if the discovery's thread cannot start.
    public convenience init(config: MultipeerReplicatorConfiguration,
                            wifi: MultipeerWiFiOptions = MultipeerWiFiOptions()) throws {
        try self.init(config: config, networks: Self.networks(for: config, wifi: wifi, bluetooth: nil))
    }

    /// The networks of `config.transports`, Wi-Fi's from `wifi`, Bluetooth's from `bluetooth`
    /// (nil: `invalidArgument`, Bluetooth needs `PeerSyncMeshBluetooth`), in preference order.
    package static func networks(for config: MultipeerReplicatorConfiguration, wifi: MultipeerWiFiOptions,
                                 bluetooth: (() throws -> MeshNetwork)?) throws -> [MeshNetwork] {
        try MultipeerTransport.allCases.filter(config.transports.contains).map { transport in
            switch transport {
            case .wifi:
                return try wifiNetwork(wifi)
            case .bluetooth:
                guard let bluetooth else {
                    throw PeerSyncError(.invalidArgument,
                                        "Bluetooth LE needs PeerSyncMeshBluetooth (the BLE trait) and its MultipeerReplicator(config:wifi:bluetooth:)",
                                        context: ["transport": transport.rawValue])
                }
                return try bluetooth()
            }
        }
    }

    /// The Wi-Fi network of ``init(config:wifi:)``: DNS-SD through Avahi (on `wifi.interface`
    /// when set) and ``WiFiMeshLinkTransport``. Throws as that initializer.
    package static func wifiNetwork(_ wifi: MultipeerWiFiOptions) throws -> MeshNetwork {
        var dnssd = DNSSDConfiguration()
        dnssd.interface = wifi.interface
        return MeshNetwork(discovery: try DNSSDDiscovery(configuration: dnssd), links: try WiFiMeshLinkTransport(options: wifi))
    }

    /// The Wi-Fi link transport of a replicator made by ``init(config:wifi:)`` (its
    /// ``WiFiMeshLinkTransport/port`` is the listening port while started); nil without one.
    public var wifiLinks: WiFiMeshLinkTransport? {
        networks.lazy.compactMap { $0.links as? WiFiMeshLinkTransport }.first
    }
}
