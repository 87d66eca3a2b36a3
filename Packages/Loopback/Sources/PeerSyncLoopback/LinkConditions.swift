import PeerSyncCore
import PeerSyncTransport

/// Simulated conditions of a loopback link, applied to each direction separately. Everything
/// random is drawn from a generator seeded with ``seed``, so the same conditions and the same
/// traffic give the same fragments, delays and disconnects every run (see ``LinkTrace``).
///
/// With the default values (``perfect``) messages go straight into the peer's receive buffer.
/// With any condition set, each direction runs a simulated wire: a message is cut into
/// fragments of at most ``mtu`` bytes; each fragment occupies the wire for
/// `bytes / bandwidth` seconds (the sender waits for that), then arrives after ``latency`` plus
/// a uniform random ``jitter``, never before the fragment ahead of it (the link is ordered and
/// reliable, like TCP or an L2CAP channel); the receiver reassembles the message. Wire memory is
/// bounded, so backpressure from a slow reader reaches the sender.
public struct LinkConditions: Sendable, Hashable {
    /// One-way delay added to every fragment. Default zero.
    public var latency: Duration
    /// Extra delay per fragment, uniform in `0...jitter`. Default zero.
    public var jitter: Duration
    /// Bytes per second per direction, or `nil` for unlimited.
    public var bandwidth: Int?
    /// The largest fragment payload in bytes, or `nil` to send messages whole.
    public var mtu: Int?
    /// The link breaks (both sides see `PeerSyncError.Code.connectionReset`) when either
    /// direction has carried more than this many payload bytes: the fragment that would cross
    /// the limit is lost, what was ahead of it on the wire still arrives, then the link breaks.
    /// `nil`: never.
    public var dropAfterBytes: Int?
    /// The chance, per fragment, that the link breaks there (as with ``dropAfterBytes``, the
    /// fragment is lost and what is ahead of it arrives). Default zero.
    public var disconnectProbability: Double
    /// Seeds every random choice of the link. Each direction draws from its own sequence, and
    /// every connection made with these conditions replays the same sequences; vary the seed to
    /// vary them.
    public var seed: UInt64

    /// Conditions with every setting given; the defaults (no latency, jitter, bandwidth limit,
    /// fragmentation or loss; seed 0) make an ideal link.
    public init(latency: Duration = .zero, jitter: Duration = .zero, bandwidth: Int? = nil, mtu: Int? = nil,
                dropAfterBytes: Int? = nil, disconnectProbability: Double = 0, seed: UInt64 = 0) {
        self.latency = latency
        self.jitter = jitter
        self.bandwidth = bandwidth
        self.mtu = mtu
        self.dropAfterBytes = dropAfterBytes
        self.disconnectProbability = disconnectProbability
        self.seed = seed
    }

    /// No simulation: messages are handed over directly.
    public static let perfect = LinkConditions()

    /// Rough Bluetooth LE (L2CAP connection-oriented channel) figures: 244-byte fragments,
    /// 15 ms ± 10 ms latency, 100 kB/s. A starting point for BLE-like tests, not a measurement.
    public static func bluetoothLE(seed: UInt64 = 0) -> LinkConditions {
        LinkConditions(latency: .milliseconds(15), jitter: .milliseconds(10), bandwidth: 100_000, mtu: 244, seed: seed)
    }

    /// Whether no condition is set (messages are handed over directly).
    public var isPerfect: Bool {
        latency == .zero && jitter == .zero && bandwidth == nil && mtu == nil && dropAfterBytes == nil
            && disconnectProbability == 0
    }

    /// Throws `PeerSyncError.Code.invalidArgument` if a value is out of range (negative
    /// durations, `mtu` or `bandwidth` below 1, negative `dropAfterBytes`, probability outside 0...1).
    public func validate() throws {
        func fail(_ what: String) -> PeerSyncError {
            PeerSyncError(.invalidArgument, "invalid link conditions: \(what)")
        }
        if latency < .zero { throw fail("latency is negative") }
        if jitter < .zero { throw fail("jitter is negative") }
        if let bandwidth, bandwidth < 1 { throw fail("bandwidth must be at least 1 byte/s") }
        if let mtu, mtu < 1 { throw fail("mtu must be at least 1 byte") }
        if let dropAfterBytes, dropAfterBytes < 0 { throw fail("dropAfterBytes is negative") }
        if !(0...1).contains(disconnectProbability) { throw fail("disconnectProbability must be in 0...1") }
    }
}

/// One seeded random stream per link direction (`PeerSyncCore.SplitMix64`), the same on every platform.
struct LinkRandom {
    private var generator: SplitMix64

    init(seed: UInt64, stream: UInt64) {
        generator = SplitMix64(state: seed ^ (stream &* 0xD1B5_4A32_D192_ED03))
    }

    mutating func next() -> UInt64 { generator.next() }

    /// Uniform in `0..<1`.
    mutating func nextUnit() -> Double {
        Double(next() >> 11) * 0x1p-53
    }

    /// Uniform in `0...limit`, to the nanosecond.
    mutating func duration(upTo limit: Duration) -> Duration {
        let nanos = limit.nanoseconds
        guard nanos > 0 else { return .zero }
        return .nanoseconds(Int64(next() % UInt64(nanos + 1)))
    }
}

extension Duration {
    /// The whole duration in nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return scaled &+ attoseconds / 1_000_000_000
    }
}
