import PeerSyncBLIP
import PeerSyncCore

extension PeerSyncError.Code {
    /// The peer answered a replication request with an error (`PeerSyncError.blipError`
    /// holds its domain and code), or a request handler refuses one of the peer's requests.
    public static let replicationFailed = Self(rawValue: "replicationFailed")
    /// The peer refused the credentials (HTTP 401) or the operation (HTTP 403): permanent.
    public static let unauthorized = Self(rawValue: "unauthorized")
    /// The peer does not serve a configured collection: permanent.
    public static let collectionNotServed = Self(rawValue: "collectionNotServed")
    // `.invalidDelta` is declared in JSONDelta.swift: Tools/fuzz compiles that file on its own.
}

extension PeerSyncError {
    /// The error a request handler throws to answer the peer with `reply` (sent as is: the
    /// reply's domain, code and message).
    static func reply(_ reply: BLIPError) -> PeerSyncError {
        PeerSyncError(.replicationFailed, blip: reply)
    }
}

extension BLIPError {
    /// Whether this is `HTTP`/`status`.
    func isHTTP(_ status: Int) -> Bool { domain == "HTTP" && code == status }
}
