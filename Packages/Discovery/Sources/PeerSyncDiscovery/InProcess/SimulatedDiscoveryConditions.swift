import PeerSyncCore

/// How an ``InProcessDiscoveryRegistry`` delivers events to browsers, to exercise code above
/// discovery (the mesh) under the conditions of a real network.
///
/// Every delivery of an event to a browser takes ``delay`` plus a uniform random part of
/// ``jitter``; each attempt is lost with ``lossProbability`` and repeated after
/// ``retransmitInterval`` (as mDNS repeats announcements and queries), so a lost event arrives
/// late, never not at all. A browser still gets its events in order (a late event delays the
/// ones behind it). Every random draw comes from a generator seeded with ``seed``, in the
/// order the registry's operations happen: the same operations in the same order give the
/// same delays.
public struct SimulatedDiscoveryConditions: Sendable, Hashable {
    /// Base delay of every delivery. Default zero.
    public var delay: Duration
    /// Extra delay, uniform in `0...jitter`. Default zero.
    public var jitter: Duration
    /// The chance that one delivery attempt is lost, in `0..<1`. Default zero.
    public var lossProbability: Double
    /// The wait before a lost delivery is tried again. Default 100 ms.
    public var retransmitInterval: Duration
    /// Seeds every random draw.
    public var seed: UInt64

    /// Conditions with every setting given; the defaults (no delay, no jitter, no loss, a 100 ms
    /// retransmit interval, seed 0) deliver every event at once.
    public init(delay: Duration = .zero, jitter: Duration = .zero, lossProbability: Double = 0,
                retransmitInterval: Duration = .milliseconds(100), seed: UInt64 = 0) {
        self.delay = delay
        self.jitter = jitter
        self.lossProbability = lossProbability
        self.retransmitInterval = retransmitInterval
        self.seed = seed
    }

    /// Immediate, lossless delivery.
    public static let perfect = SimulatedDiscoveryConditions()

    /// Whether events are delivered immediately (no delay, jitter or loss).
    public var isPerfect: Bool { delay == .zero && jitter == .zero && lossProbability == 0 }

    /// Throws `PeerSyncError.Code.invalidArgument` for negative durations, a non-positive
    /// retransmit interval with loss, or a loss probability outside `0..<1`.
    public func validate() throws(PeerSyncError) {
        func fail(_ what: String) -> PeerSyncError { PeerSyncError(.invalidArgument, "invalid discovery conditions: \(what)") }
        if delay < .zero { throw fail("delay is negative") }
        if jitter < .zero { throw fail("jitter is negative") }
        if !(lossProbability >= 0 && lossProbability < 1) { throw fail("lossProbability must be in 0..<1") }
        if lossProbability > 0 && retransmitInterval <= .zero { throw fail("retransmitInterval must be positive when there is loss") }
    }

    /// The delay of one delivery, drawn from `random`.
    func drawDelay(_ random: inout SplitMix64) -> Duration {
        var total = delay
        if jitter > .zero {
            total += jitter * (Double(random.next() >> 11) / Double(1 << 53))
        }
        if lossProbability > 0 {
            // Each attempt is lost with the given chance; the cap only guards absurd inputs.
            var attempts = 0
            while attempts < 1000, Double(random.next() >> 11) / Double(1 << 53) < lossProbability {
                total += retransmitInterval
                attempts += 1
            }
        }
        return total
    }
}
