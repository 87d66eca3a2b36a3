import Foundation
import PeerSyncCore
import PeerSyncTransport

// MARK: Client side

// `Authenticator` and `BasicAuthenticator` live in PeerSyncTransport (they need no OpenSSL,
// and a replicator over a custom transport must not link it). These aliases keep
// `import PeerSyncAuth` + `BasicAuthenticator(...)` compiling.

/// Credentials a replicator presents to a listener: `PeerSyncTransport.Authenticator`.
public typealias Authenticator = PeerSyncTransport.Authenticator

/// HTTP Basic credentials: `PeerSyncTransport.BasicAuthenticator`.
public typealias BasicAuthenticator = PeerSyncTransport.BasicAuthenticator

/// Presents a TLS client certificate (mutual TLS). Put its ``identity`` into
/// ``TLSConfiguration/identity`` of the client (``tlsConfiguration(serverName:serverTrust:)``).
public struct ClientCertificateAuthenticator: Authenticator {
    /// The certificate and key presented to the listener; it must allow client authentication.
    public let identity: TLSIdentity

    /// Presents `identity` (see ``identity``).
    public init(identity: TLSIdentity) { self.identity = identity }

    /// A client TLS configuration presenting this identity.
    public func tlsConfiguration(serverName: String?, serverTrust: ServerTrust = .systemRoots) -> TLSConfiguration {
        .client(serverName: serverName, serverTrust: serverTrust, identity: identity)
    }
}

// MARK: Listener side

/// How a listener (the passive peer) authenticates clients — Couchbase Lite's
/// `ListenerAuthenticator`. Implemented by ``ListenerPasswordAuthenticator`` and
/// ``ListenerCertificateAuthenticator``.
public protocol ListenerAuthenticator: Sendable {}

/// Authenticates HTTP Basic credentials with an application callback.
///
/// The callback runs on an arbitrary task, once per connection attempt; compare secrets
/// with ``constantTimeEquals(_:_:)-(String,String)`` (or use ``matching(username:password:)``).
public struct ListenerPasswordAuthenticator: ListenerAuthenticator {
    private let check: @Sendable (String, String) -> Bool

    /// `authenticator(username, password)` returns whether the credentials are valid.
    public init(authenticator: @escaping @Sendable (_ username: String, _ password: String) -> Bool) {
        check = authenticator
    }

    /// Accepts exactly one user name and password, compared in constant time.
    public static func matching(username: String, password: String) -> ListenerPasswordAuthenticator {
        ListenerPasswordAuthenticator { user, pass in
            // Evaluate both comparisons so timing does not reveal which one failed.
            let userOK = constantTimeEquals(user, username)
            let passOK = constantTimeEquals(pass, password)
            return userOK && passOK
        }
    }

    /// Whether the credentials are valid: the callback's answer, computed on the calling task.
    public func authenticate(username: String, password: String) -> Bool { check(username, password) }

    /// Parses an `Authorization` header value and authenticates it; `false` when it is
    /// missing, not `Basic`, or malformed.
    public func authenticate(authorizationHeaderValue: String?) -> Bool {
        guard let value = authorizationHeaderValue,
              let credentials = BasicAuthorization.parse(value) else { return false }
        return check(credentials.username, credentials.password)
    }
}

/// Authenticates TLS client certificates: against root certificates, or with an application
/// callback that receives the client's chain (leaf first). The listener requires a client
/// certificate; a missing or rejected one fails the TLS handshake.
public struct ListenerCertificateAuthenticator: ListenerAuthenticator {
    /// What the listener's ``TLSConfiguration/clientCertificateValidation`` must be.
    public let clientCertificateValidation: ClientCertificateValidation

    /// Accepts client certificates that chain to one of `rootCerts` (any of them is a trust
    /// anchor), are within their validity period and allow client authentication.
    public init(rootCerts: [Certificate]) {
        clientCertificateValidation = .roots(rootCerts)
    }

    /// Accepts client certificates for which `authenticator` returns true. It is called
    /// synchronously during the handshake, on an arbitrary thread; keep it quick.
    /// Trailing-closure form: `ListenerCertificateAuthenticator { certs in ... }`.
    public init(authenticator: @escaping @Sendable (_ certs: [Certificate]) -> Bool) {
        clientCertificateValidation = .callback(authenticator)
    }

    /// A server TLS configuration presenting `identity` and validating client certificates.
    public func tlsConfiguration(identity: TLSIdentity) -> TLSConfiguration {
        .server(identity: identity, clientCertificateValidation: clientCertificateValidation)
    }
}

// MARK: Helpers

/// Compares two byte sequences in time that depends only on their lengths, not on where
/// they differ — for secrets (passwords, tokens, MACs).
public func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
    var difference = UInt(bitPattern: lhs.count ^ rhs.count)
    let count = max(lhs.count, rhs.count)
    for i in 0..<count {
        let a = i < lhs.count ? lhs[i] : 0
        let b = i < rhs.count ? rhs[i] : 0
        difference |= UInt(a ^ b)
    }
    return difference == 0
}

/// Compares the UTF-8 bytes of two strings with ``constantTimeEquals(_:_:)-([UInt8],[UInt8])``.
public func constantTimeEquals(_ lhs: String, _ rhs: String) -> Bool {
    constantTimeEquals(Array(lhs.utf8), Array(rhs.utf8))
}
