import PeerSyncCore

/// Error codes of the transport layer. Every transport reports failures as ``PeerSyncError``
/// with one of these codes (or a Core code such as `PeerSyncError.Code.tooLarge`,
/// `PeerSyncError.Code.invalidArgument`, `PeerSyncError.Code.timeout` or
/// `PeerSyncError.Code.cancelled`), so callers can react without knowing the transport.
extension PeerSyncError.Code {
    /// The connection was closed, by this side or by the peer, with a close handshake. Also the
    /// error of every `send` made after the close ("use after close").
    public static let connectionClosed = Self(rawValue: "connectionClosed")
    /// Nobody accepts connections at the endpoint (nothing listens there, the listener's backlog
    /// is full, or a network partition separates the two sides).
    public static let connectionRefused = Self(rawValue: "connectionRefused")
    /// The connection broke without a close handshake: the peer vanished, the link dropped, or
    /// a partition cut it. ``MessageConnection/closeInfo`` then reports
    /// ``CloseCode/abnormalClosure``.
    public static let connectionReset = Self(rawValue: "connectionReset")
    /// `listen` was asked to bind an endpoint that another listener already holds.
    public static let addressInUse = Self(rawValue: "addressInUse")
    /// The endpoint's host name could not be resolved.
    public static let hostNotFound = Self(rawValue: "hostNotFound")
}

extension PeerSyncError {
    /// `connectionClosed` with a standard message; `context` names the operation.
    static func closedConnection(_ operation: String) -> PeerSyncError {
        PeerSyncError(.connectionClosed, "the connection is closed", context: ["operation": operation])
    }
}
