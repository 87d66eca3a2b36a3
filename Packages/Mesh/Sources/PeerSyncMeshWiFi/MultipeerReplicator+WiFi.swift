import PeerSyncCore
import PeerSyncDNSSD
import PeerSyncMesh

extension MultipeerReplicator {
    /// A replicator on the real networks `config.transports` lists, as Couchbase Lite's
    /// `MultipeerReplicator(config:)`: for `MultipeerTransport.wifi`, DNS-SD through the Avahi
    /// daemon (`DNSSDDiscovery`, on `wifi.interface` when set) paired with
    /// ``WiFiMeshLinkTransport`` (WebSocket over mutual TLS on `wifi.port`).
    ///
    /// Nothing touches the network before `start()`; the DNS-SD discovery connects to the
    /// system D-Bus in the background (`DBUS_SYSTEM_BUS_ADDRESS` moves it) and waits for
    /// `avahi-daemon` if it is not running (the Wi-Fi status says so).
    ///
    /// - Throws: `PeerSyncError.Code.invalidArgument` if `config.transports` lists
    ///   `MultipeerTransport.bluetooth` (the mesh does not use `PeerSyncBLE` yet, issue 12), for
    ///   invalid `wifi` options or tunables (see `init(config:networks:)`);
    ///   `PeerSyncError.Code.io` if the discovery's thread cannot start.
    public convenience init(config: MultipeerReplicatorConfiguration,
                            wifi: MultipeerWiFiOptions = MultipeerWiFiOptions()) throws {
        var networks: [MeshNetwork] = []
        for transport in MultipeerTransport.allCases where config.transports.contains(transport) {
            switch transport {
            case .wifi:
                var dnssd = DNSSDConfiguration()
                dnssd.interface = wifi.interface
                networks.append(MeshNetwork(discovery: try DNSSDDiscovery(configuration: dnssd),
                                            links: try WiFiMeshLinkTransport(options: wifi)))
            case .bluetooth:
                throw PeerSyncError(.invalidArgument,
                                    "Bluetooth LE is not built yet (issue 12): use transports [.wifi]",
                                    context: ["transport": transport.rawValue])
            }
        }
        try self.init(config: config, networks: networks)
    }

    /// The Wi-Fi link transport of a replicator made by ``init(config:wifi:)`` (its
    /// ``WiFiMeshLinkTransport/port`` is the listening port while started); nil without one.
    public var wifiLinks: WiFiMeshLinkTransport? {
        networks.lazy.compactMap { $0.links as? WiFiMeshLinkTransport }.first
    }
}
