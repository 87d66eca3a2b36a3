import PeerSyncCore

/// The state of a ``Discovery`` as a whole, reported by ``Discovery/status`` and
/// ``Discovery/statusUpdates()``.
///
/// A typical life: `starting → running`; when the service underneath goes away
/// (`avahi-daemon` stopped, the D-Bus gone) `→ unavailable(error)`, and when it is back and
/// every publication was registered again and every browse restarted `→ recovered`;
/// `stopped` after ``Discovery/shutdown()``. While unavailable, publishing and browsing still
/// succeed: they take effect once the service is back.
public enum DiscoveryStatus: Sendable, Hashable, CustomStringConvertible {
    /// Connecting to the service for the first time.
    case starting
    /// Working.
    case running
    /// The service underneath cannot be reached; the error (code
    /// `PeerSyncError.Code.discoveryUnavailable` or `PeerSyncError.Code.discoveryFailed`)
    /// says why. The discovery keeps retrying.
    case unavailable(PeerSyncError)
    /// Working again after being unavailable: publications were registered again and browses
    /// restarted (browsers then report what changed meanwhile).
    case recovered
    /// Shut down; final.
    case stopped

    /// Whether publications are visible and browses see changes (`running` or `recovered`).
    public var isRunning: Bool {
        switch self {
        case .running, .recovered: true
        default: false
        }
    }

    public var description: String {
        switch self {
        case .starting: "starting"
        case .running: "running"
        case .unavailable(let error): "unavailable (\(error))"
        case .recovered: "recovered"
        case .stopped: "stopped"
        }
    }
}
