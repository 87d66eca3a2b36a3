import Foundation

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it), 1 otherwise.
let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline that assumes full speed, stretched by ``slowFactor``.
func slow(_ duration: Duration) -> Duration { duration * slowFactor }
