import PeerSyncCore

/// Credentials a replicator (the active peer) presents to a listener — Couchbase Lite's
/// `Authenticator`. The connector that opens the replicator's connection reads them (the
/// WebSocket connector sends ``BasicAuthenticator`` in the upgrade request and presents a
/// `ClientCertificateAuthenticator` from PeerSyncAuth in the TLS handshake); a custom
/// transport may define its own.
///
/// It lives here, not in PeerSyncAuth, so that a replicator over a transport without TLS
/// never links OpenSSL.
public protocol Authenticator: Sendable {}

/// HTTP Basic authentication with a user name and password (sent in the WebSocket upgrade
/// request's `Authorization` header; use it only over TLS).
public struct BasicAuthenticator: Authenticator, Hashable {
    public let username: String
    public let password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    /// The `Authorization` header value: `Basic <base64(username:password)>`.
    public var authorizationHeaderValue: String {
        BasicAuthorization.headerValue(username: username, password: password)
    }
}
