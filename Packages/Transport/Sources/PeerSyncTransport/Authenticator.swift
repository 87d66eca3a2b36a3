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
    /// The user name, sent as given.
    public let username: String
    /// The password, sent as given (base64, not encrypted: use TLS).
    public let password: String

    /// Credentials of `username` with `password`.
    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    /// The `Authorization` header value: `Basic <base64(username:password)>`.
    public var authorizationHeaderValue: String {
        BasicAuthorization.headerValue(username: username, password: password)
    }
}

/// A Sync Gateway session (Couchbase Lite's `SessionAuthenticator`): the session ID is sent as
/// a cookie, `Cookie: <cookieName>=<sessionID>`, on the WebSocket upgrade request. Obtain the
/// session from Sync Gateway (its `_session` endpoint, or an admin-created session) first; a
/// PeerSync listener does not use cookies, so this authenticator is for Sync Gateway only.
///
/// The connector refuses (with `.invalidArgument`, before connecting) a cookie name that is
/// not an RFC 6265 token or a session ID with characters a cookie value cannot hold
/// (whitespace, `"`, `,`, `;`, `\`, control characters): see ``isValidCookie``.
public struct SessionAuthenticator: Authenticator, Hashable {
    /// Sync Gateway's cookie name, used when none is given.
    public static let defaultCookieName = "SyncGatewaySession"

    /// The session ID Sync Gateway created.
    public let sessionID: String
    /// The name of the cookie carrying ``sessionID``.
    public let cookieName: String

    /// A session authenticator; a nil `cookieName` means ``defaultCookieName``.
    public init(sessionID: String, cookieName: String? = nil) {
        self.sessionID = sessionID
        self.cookieName = cookieName ?? Self.defaultCookieName
    }

    /// The `Cookie` header value: `<cookieName>=<sessionID>`.
    public var cookieHeaderValue: String { "\(cookieName)=\(sessionID)" }

    /// Whether ``cookieName`` is an RFC 6265 token and ``sessionID`` a non-empty run of
    /// cookie-octets, so that the header cannot be misread or split.
    public var isValidCookie: Bool {
        let separators = Set("()<>@,;:\\\"/[]?={} \t".unicodeScalars)
        let nameIsToken = !cookieName.isEmpty && cookieName.unicodeScalars.allSatisfy {
            $0.value > 0x20 && $0.value < 0x7F && !separators.contains($0)
        }
        let valueIsCookieOctets = !sessionID.isEmpty && sessionID.unicodeScalars.allSatisfy {
            $0.value == 0x21 || (0x23...0x2B).contains($0.value) || (0x2D...0x3A).contains($0.value)
                || (0x3C...0x5B).contains($0.value) || (0x5D...0x7E).contains($0.value)
        }
        return nameIsToken && valueIsCookieOctets
    }
}
