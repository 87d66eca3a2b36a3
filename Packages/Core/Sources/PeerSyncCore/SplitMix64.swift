/// SplitMix64: a tiny, fast, seedable random number generator. Deterministic for a given seed
/// on every platform, so seeded tests, simulations and benchmarks repeat exactly. Not for
/// anything security-related.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    /// The generator's whole state: copy it to repeat a sequence from here.
    public var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) { state = seed }
    /// A generator continuing from a saved ``state``.
    public init(state: UInt64) { self.state = state }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
