import Foundation

/// Timing of the test suites under a slower build.
public enum TestTiming {
    /// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test
    /// --sanitize` sets it: 30 under TSan, 3 under ASan), 1 otherwise. Deadlines that only bound
    /// a failure are multiplied by it; no test asserts a speed.
    public static let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

    /// A deadline or timeout that assumes full speed, stretched by ``slowFactor``.
    public static func slow(_ duration: Duration) -> Duration { duration * slowFactor }

    /// Seconds that assume full speed, stretched by ``slowFactor``.
    public static func slow(seconds: Double) -> Double { seconds * Double(slowFactor) }
}
