import Foundation

/// Couchbase Lite's name for a replication target URL: in PeerSync every target is an
/// ``Endpoint``, so `URLEndpoint(url:)` is `Endpoint(url:)`.
public typealias URLEndpoint = Endpoint

extension Endpoint {
    /// An endpoint from a `URL`, e.g. one of `URLEndpointListener.urls`:
    /// `ReplicatorConfiguration(target: try URLEndpoint(url: listener.urls[0]))`.
    ///
    /// Unlike Couchbase Lite's `URLEndpoint(url:)`, this throws instead of trapping:
    /// `.invalidArgument` for a URL the `String` form refuses (no host, user info, a
    /// fragment, …). Any scheme parses here; the connector that uses the endpoint checks it
    /// (the WebSocket connector takes `ws` and `wss`).
    public init(url: URL) throws {
        try self.init(url: url.absoluteString)
    }
}
