import PeerSyncBLE
import PeerSyncCore

/// Settings of the Bluetooth LE side of a mesh (``BluetoothMeshLinkTransport`` and the
/// `BLEDiscovery` that `MultipeerReplicator/init(config:wifi:bluetooth:)` pairs with it).
public struct MultipeerBluetoothOptions: Sendable, Hashable {
    /// The LE PSM of the mesh's L2CAP listener, announced through the GATT PSM characteristic.
    /// nil (default): a free dynamic PSM (0x0080–0x00FF) picked at each start.
    public var psm: UInt16?
    /// Time allowed to open the L2CAP channel of a dial. Default 10 s (LE connection set-up
    /// takes a few hundred milliseconds; a device out of range never answers).
    public var connectTimeout: Duration = .seconds(10)
    /// How often an idle link sends a WebSocket ping (see `MultipeerWiFiOptions`'s). Default
    /// 15 s; nil: never.
    public var heartbeatInterval: Duration? = .seconds(15)
    /// The subprotocol both ends assume (nothing is negotiated on the channel). Default
    /// `BLIP_3+CBMobile_3`.
    public var subprotocol: String = BLETransport.defaultSubprotocol
    /// The BLE discovery's timing.
    public var discovery = BLEDiscoveryConfiguration()

    /// Options listening on `psm` (nil: a free dynamic PSM picked at each start); the other
    /// settings at their defaults. ``validate()`` checks the PSM.
    public init(psm: UInt16? = nil) {
        self.psm = psm
    }

    /// Throws `PeerSyncError/Code/invalidArgument` for a PSM outside 1–255, a non-positive
    /// timeout or heartbeat, or an invalid discovery configuration.
    public func validate() throws(PeerSyncError) {
        if let psm, !(1...255).contains(psm) {
            throw PeerSyncError(.invalidArgument, "an LE PSM is 1–255, got \(psm)")
        }
        guard connectTimeout > .zero, heartbeatInterval.map({ $0 > .zero }) ?? true else {
            throw PeerSyncError(.invalidArgument, "connectTimeout and heartbeatInterval must be positive")
        }
        try discovery.validate()
    }
}
