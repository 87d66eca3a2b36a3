import PeerSyncCore
import PeerSyncPosix

/// What ``BLEDiscovery`` needs of a Bluetooth LE radio: advertise (with a GATT server behind
/// the advertisement), scan, and open ATT bearers to advertisers. Two implementations:
/// ``BlueZRadio`` (the adapter, through libbluetooth) and ``SimulatedBLERadio`` (an
/// in-process ``SimulatedBLEAir``).
///
/// Threading: every method from any task.
protocol BLERadio: Sendable {
    /// Nil while the radio works; else why it does not (an error whose code is
    /// ``PeerSyncError/Code/bluetoothUnavailable`` or ``PeerSyncError/Code/discoveryUnavailable``).
    var unavailability: PeerSyncError? { get }

    /// The current ``unavailability`` first, then every change. Ends when the consumer stops.
    func availabilityUpdates() -> AsyncStream<PeerSyncError?>

    /// Starts advertising `advertisement`; ATT bearers opened to the returned set's address
    /// are served by `server`. Throws while unavailable, or if the radio cannot add another
    /// advertisement.
    func advertise(_ advertisement: BLEAdvertisement, server: GATTServer) async throws -> any BLEAdvertisingSet

    /// Scans for advertisements. The stream yields each sighting (repeatedly, as long as the
    /// advertiser advertises and the radio works; never this radio's own advertisements) and
    /// ends only when its consumer stops or the radio fails for good.
    func scan() async throws -> AsyncThrowingStream<BLESighting, any Error>

    /// Opens an ATT bearer to the advertiser at `address`.
    func connectATT(to address: String) async throws -> SeqPacketSocket
}

/// One running advertisement of a ``BLERadio``.
protocol BLEAdvertisingSet: Sendable {
    /// The address it advertises from (what scanners see and connect to).
    var address: String { get }
    /// Stops advertising and closes the ATT bearers of its GATT server. Idempotent.
    func stop() async
}

/// One advertisement a scan saw.
struct BLESighting: Sendable, Hashable {
    /// The advertiser's address.
    var address: String
    /// What it advertised (advertising data and scan response together).
    var advertisement: BLEAdvertisement
}
