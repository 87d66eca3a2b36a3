import PeerSyncBLE
import PeerSyncCore
import PeerSyncMesh
import PeerSyncMeshWiFi

extension MultipeerReplicator {
    /// A replicator on the real networks `config.transports` lists, Bluetooth LE included: for
    /// `MultipeerTransport/wifi` DNS-SD + WebSocket over mutual TLS (as `init(config:wifi:)`),
    /// for `MultipeerTransport/bluetooth` `BLEDiscovery` on the system's adapter (BlueZ)
    /// paired with ``BluetoothMeshLinkTransport`` over a `BlueZL2CAPConnector`. Wi-Fi is
    /// preferred: a peer seen on both is linked over Wi-Fi, over Bluetooth only when Wi-Fi
    /// cannot reach it (module README, "Transports").
    ///
    /// Nothing touches the network before `start()`. On a system without Bluetooth (no
    /// `AF_BLUETOOTH`, no adapter) the replicator is made all the same; at start the Bluetooth
    /// transport fails with `PeerSyncError/Code/bluetoothUnavailable` ("Bluetooth is not
    /// available on this system: …"), reported as the Bluetooth status's error, and the mesh
    /// carries on over Wi-Fi (`start()` throws only when no transport starts).
    ///
    /// - Throws: `PeerSyncError/Code/invalidArgument` for invalid options or tunables (see
    ///   `init(config:networks:)`); `PeerSyncError/Code/io` if the DNS-SD discovery's thread
    ///   cannot start.
    public convenience init(config: MultipeerReplicatorConfiguration, wifi: MultipeerWiFiOptions = MultipeerWiFiOptions(),
                            bluetooth: MultipeerBluetoothOptions) throws {
        let networks = try Self.networks(for: config, wifi: wifi) {
            MeshNetwork(discovery: try BLEDiscovery(configuration: bluetooth.discovery),
                        links: try BluetoothMeshLinkTransport(connector: BlueZL2CAPConnector(), options: bluetooth))
        }
        try self.init(config: config, networks: networks)
    }

    /// The Bluetooth link transport of this replicator; nil without one.
    public var bluetoothLinks: BluetoothMeshLinkTransport? {
        networks.lazy.compactMap { $0.links as? BluetoothMeshLinkTransport }.first
    }
}
