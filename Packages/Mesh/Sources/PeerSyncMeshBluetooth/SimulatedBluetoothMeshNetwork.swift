import PeerSyncBLE
import PeerSyncCore
import PeerSyncMesh

/// Bluetooth LE for many mesh peers in one process, with nothing simulated above the kernel's
/// socket calls: each peer gets a `BLEDiscovery` on a shared `SimulatedBLEAir` (advertising,
/// GATT over `AF_UNIX` seqpacket pairs) and a ``BluetoothMeshLinkTransport`` over a
/// `SimulatedL2CAPNetwork` of shaped links (MTU, rate, latency: `BLELinkConditions`) — the
/// same TLS, WebSocket framing and BLIP as on a radio. For tests and simulations; the
/// production wiring is `MultipeerReplicator/init(config:wifi:bluetooth:)`.
///
/// Threading: any task.
public final class SimulatedBluetoothMeshNetwork: Sendable {
    /// The radios' air (advertisements, GATT).
    public let air: SimulatedBLEAir
    /// The data channels (L2CAP), reachable at the addresses the air's advertisements show.
    public let channels: SimulatedL2CAPNetwork
    /// The options of every peer's link transport and discovery.
    public let options: MultipeerBluetoothOptions

    /// - Parameters:
    ///   - conditions: the shape of every data channel. Default `BLELinkConditions/bluetoothLE`.
    ///   - options: every peer's options (timings of discovery, connect timeout).
    /// - Throws: `PeerSyncError/Code/invalidArgument` for invalid conditions or options.
    public init(conditions: BLELinkConditions = .bluetoothLE,
                options: MultipeerBluetoothOptions = MultipeerBluetoothOptions()) throws(PeerSyncError) {
        try conditions.validate()
        try options.validate()
        air = SimulatedBLEAir()
        channels = SimulatedL2CAPNetwork(conditions: conditions, air: air)
        self.options = options
    }

    /// The Bluetooth network of the peer on `host` (a name unique on this network; also its
    /// L2CAP device address).
    public func network(host: String) throws(PeerSyncError) -> MeshNetwork {
        MeshNetwork(discovery: try BLEDiscovery(air: air, hostName: host, deviceAddress: host, configuration: options.discovery),
                    links: try BluetoothMeshLinkTransport(connector: channels.connector(address: host), options: options))
    }

    /// Bluetooth goes away for everyone: advertising and scanning stop, every data channel is
    /// lost, new ones are refused (until ``powerOn()``).
    public func powerOff() {
        air.powerOff(reason: "the simulated Bluetooth radios were switched off")
        channels.cutAllLinks(reason: "the simulated Bluetooth radios were switched off")
    }

    /// Bluetooth is back.
    public func powerOn() {
        air.powerOn()
    }
}
