import PeerSyncCore

/// The shape of a simulated Bluetooth LE link (``SimulatedBLELink``), each direction apart.
///
/// Defaults (``bluetoothLE``): 247-byte MTU, 1.2 Mbit/s, 30 ms one-way latency, 16 KiB in
/// flight per direction, no loss — roughly an LE 2M PHY link with data length extension as
/// phones achieve it, not a measurement. Everything random is drawn from ``seed``: the same
/// conditions and the same traffic lose the link at the same packet every run.
public struct BLELinkConditions: Sendable, Hashable {
    /// The largest packet (L2CAP SDU) the link carries. A larger one breaks the link (see
    /// ``SimulatedBLELink``). Default 247.
    public var mtu: Int
    /// The link rate, in bits per second of packet payload, per direction. Default 1,200,000.
    public var bitsPerSecond: Int
    /// The one-way delay added to every packet after its transmission time. Default 30 ms.
    public var latency: Duration
    /// Payload bytes a direction holds in flight (sent by one end, not yet delivered to the
    /// other); the sender's socket fills up beyond it (the radio's credits). It must exceed
    /// rate × latency for the link to reach its rate. Default 16 KiB.
    public var inFlightBytes: Int
    /// The link is lost once this many payload bytes (both directions together) have crossed
    /// it: the packet that would cross the limit is lost with the link. nil (default): never.
    public var lossAfterBytes: Int?
    /// The chance, per packet, that the link is lost there (the packet with it). Default 0.
    public var lossProbability: Double
    /// Seeds the random loss. Default 0.
    public var seed: UInt64

    /// Conditions with every setting given; the defaults are ``bluetoothLE``'s (see the
    /// properties).
    public init(mtu: Int = 247, bitsPerSecond: Int = 1_200_000, latency: Duration = .milliseconds(30),
                inFlightBytes: Int = 16 * 1024, lossAfterBytes: Int? = nil, lossProbability: Double = 0,
                seed: UInt64 = 0) {
        self.mtu = mtu
        self.bitsPerSecond = bitsPerSecond
        self.latency = latency
        self.inFlightBytes = inFlightBytes
        self.lossAfterBytes = lossAfterBytes
        self.lossProbability = lossProbability
        self.seed = seed
    }

    /// The default BLE-like shape (see the type's documentation).
    public static let bluetoothLE = BLELinkConditions()

    /// The time `bytes` of payload occupy one direction of the link.
    func transmissionTime(_ bytes: Int) -> Duration {
        .nanoseconds(Int64((Double(bytes) * 8 / Double(bitsPerSecond) * 1e9).rounded()))
    }

    /// Throws `PeerSyncError.Code.invalidArgument` for a value out of range.
    public func validate() throws(PeerSyncError) {
        func fail(_ what: String) -> PeerSyncError { PeerSyncError(.invalidArgument, "invalid BLE link conditions: \(what)") }
        if mtu < 1 { throw fail("mtu must be at least 1 byte") }
        if bitsPerSecond < 1 { throw fail("bitsPerSecond must be at least 1") }
        if latency < .zero { throw fail("latency is negative") }
        if inFlightBytes < mtu { throw fail("inFlightBytes must hold at least one packet (the mtu)") }
        if let lossAfterBytes, lossAfterBytes < 0 { throw fail("lossAfterBytes is negative") }
        if !(0...1).contains(lossProbability) { throw fail("lossProbability must be in 0...1") }
    }
}
