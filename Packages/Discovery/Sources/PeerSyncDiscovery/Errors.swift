import PeerSyncCore

/// Error codes of peer discovery. Every ``Discovery`` reports failures as ``PeerSyncError``
/// with one of these codes or a Core code (`PeerSyncError.Code.invalidArgument` for a bad
/// identifier, name or metadata, `PeerSyncError.Code.tooLarge` for metadata over its limit,
/// `PeerSyncError.Code.closed` after ``Discovery/shutdown()``).
extension PeerSyncError.Code {
    /// The service a discovery relies on cannot be reached (the Avahi daemon or the system
    /// D-Bus is not running, the Bluetooth adapter is off, a simulated outage). Reported in
    /// ``DiscoveryStatus/unavailable(_:)``; a discovery keeps retrying and reports
    /// ``DiscoveryStatus/recovered`` when the service is back.
    public static let discoveryUnavailable = Self(rawValue: "discoveryUnavailable")
    /// The discovery service refused or failed a request (e.g. Avahi rejected a record);
    /// the message holds the service's own reason.
    public static let discoveryFailed = Self(rawValue: "discoveryFailed")
}
