import Foundation

/// Couchbase Lite's named defaults and its `TimeInterval` forms of the time settings.
///
/// The constants carry Couchbase Lite's names and values, typed like the PeerSync settings they
/// are the defaults of (`Duration` for times, `Int` for attempt counts), so that
/// `config.heartbeat == ReplicatorConfiguration.defaultHeartbeat` holds on a new configuration.
/// Couchbase Lite's `defaultAllowReplicatingInBackground` and `defaultAcceptParentCookies`
/// have no counterpart: PeerSync has no app background mode and keeps no cookie jar.
/// `defaultSelfSignedCertificateOnly` is the WebSocket connector's (PeerSyncWebSocketReplication).
extension ReplicatorConfiguration {
    /// `.pushAndPull`: replicate in both directions.
    public static let defaultType: ReplicatorType = .pushAndPull
    /// false: one-shot, stop once caught up.
    public static let defaultContinuous = false
    /// 300 s between keep-alive pings.
    public static let defaultHeartbeat: Duration = .seconds(300)
    /// 10 attempts in a row for a one-shot replicator before it gives up.
    public static let defaultMaxAttemptsSingleShot = 10
    /// Unlimited (`Int.max`, Couchbase Lite's `UInt.max`) for a continuous replicator: it never
    /// gives up on its own.
    public static let defaultMaxAttemptsContinuous = Int.max
    /// 300 s at most between two attempts.
    public static let defaultMaxAttemptWaitTime: Duration = .seconds(300)
    /// true: purge documents the peer revoked access to.
    public static let defaultEnableAutoPurge = true

    /// ``heartbeat`` in seconds, as Couchbase Lite's `heartbeat: TimeInterval` (Swift cannot
    /// give one stored setting two types under one name, so the `Duration` form keeps the
    /// name). Zero means the default; a negative value, NaN, an infinity or more than 10^15 s
    /// makes creating the replicator throw `.invalidArgument` (it is stored as `-1 s`).
    public var heartbeatTimeInterval: TimeInterval {
        get { Self.seconds(heartbeat) }
        set { heartbeat = Self.duration(newValue) }
    }

    /// ``maxAttemptWaitTime`` in seconds, as Couchbase Lite's `maxAttemptWaitTime:
    /// TimeInterval`; the same rules as ``heartbeatTimeInterval``.
    public var maxAttemptWaitTimeInterval: TimeInterval {
        get { Self.seconds(maxAttemptWaitTime) }
        set { maxAttemptWaitTime = Self.duration(newValue) }
    }

    /// A `Duration` as seconds.
    private static func seconds(_ duration: Duration) -> TimeInterval {
        let (seconds, attoseconds) = duration.components
        return TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18
    }

    /// Seconds as a `Duration`; NaN, infinities and magnitudes over 10^15 s become `-1 s`,
    /// which the replicator refuses.
    private static func duration(_ seconds: TimeInterval) -> Duration {
        guard seconds.isFinite, abs(seconds) <= 1e15 else { return .seconds(-1) }
        return .seconds(seconds)
    }
}
