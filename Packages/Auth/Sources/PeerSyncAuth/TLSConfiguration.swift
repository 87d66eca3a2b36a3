import PeerSyncCore

/// A TLS protocol version. PeerSync never negotiates anything older than TLS 1.2.
public enum TLSVersion: Int, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// TLS 1.2 (RFC 5246): the oldest version PeerSync negotiates.
    case v1_2 = 0x0303
    /// TLS 1.3 (RFC 8446), preferred whenever both sides support it.
    case v1_3 = 0x0304

    public static func < (lhs: TLSVersion, rhs: TLSVersion) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { self == .v1_2 ? "TLSv1.2" : "TLSv1.3" }
}

/// How a TLS client decides whether to trust the server's certificate — Couchbase Lite's
/// rules from "Authenticating the Listener":
///
/// - ``pinned(_:)``: the pinned certificate must appear in the presented chain; nothing else
///   matters (no expiry, host name or CA check). When the pin is not the leaf, the leaf must
///   chain up to it by signature (so a server cannot just append someone else's pinned CA).
/// - ``selfSignedOnly``: any self-signed certificate is accepted (Couchbase Lite's
///   `acceptOnlySelfSignedServerCertificate`); CA-issued ones are rejected, whoever signed
///   them. The certificate must still be within its validity period and allow server auth;
///   the host name is not checked (peer certificates rarely name an address).
/// - ``roots(_:)`` / ``systemRoots``: standard X.509 path validation to one of the given roots
///   (any of them is a trust anchor, intermediates included) or to the system CA bundle
///   (`/etc/ssl/certs`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`), with validity period, server-auth
///   usage and, when ``TLSConfiguration/serverName`` is set, host name (or IP address) checks.
public enum ServerTrust: Sendable, Hashable {
    /// Trust exactly this certificate (see the rules above).
    case pinned(Certificate)
    /// Trust any valid self-signed server certificate, and no CA-issued one.
    case selfSignedOnly
    /// Trust certificates that chain to one of these roots.
    case roots([Certificate])
    /// Trust certificates that chain to the system's CA bundle (the default).
    case systemRoots

    /// The policy Couchbase Lite's `ReplicatorConfiguration` properties select: a pinned
    /// certificate wins; else `acceptOnlySelfSignedServerCertificate`; else the system roots.
    public init(pinnedServerCertificate: Certificate?, acceptOnlySelfSignedServerCertificate: Bool) {
        if let pinnedServerCertificate {
            self = .pinned(pinnedServerCertificate)
        } else if acceptOnlySelfSignedServerCertificate {
            self = .selfSignedOnly
        } else {
            self = .systemRoots
        }
    }
}

/// How a TLS server validates client certificates (mutual TLS). When set in
/// ``TLSConfiguration/clientCertificateValidation`` the server requires a client certificate;
/// a missing or rejected one fails the handshake.
public enum ClientCertificateValidation: Sendable {
    /// X.509 path validation to one of these roots (each is a trust anchor), with validity
    /// period and client-auth usage checks.
    case roots([Certificate])
    /// The application decides. The closure receives the client's chain (leaf first) after
    /// OpenSSL checked that the client holds the leaf's private key. It is called
    /// synchronously during the handshake, on an arbitrary thread: it must be quick and must
    /// not touch the stream.
    case callback(@Sendable ([Certificate]) -> Bool)
}

/// Everything a ``TLSStream`` handshake needs.
public struct TLSConfiguration: Sendable {
    /// Which end of the handshake this side plays.
    public enum Role: Sendable, Hashable {
        /// Connects and verifies the server (``serverTrust``); may present ``identity``.
        case client
        /// Accepts; must present ``identity``; may require client certificates.
        case server
    }

    /// Client or server; decides which of the other settings apply.
    public var role: Role
    /// The certificate chain and key to present. Required for servers; for clients it is
    /// the client certificate (Couchbase Lite's `ClientCertificateAuthenticator`).
    public var identity: TLSIdentity?
    /// Client only: how to trust the server. Default ``ServerTrust/systemRoots``.
    public var serverTrust: ServerTrust
    /// Client only: the server's host name or IP address. A DNS name is sent as SNI; with
    /// ``ServerTrust/roots(_:)`` and ``ServerTrust/systemRoots`` the certificate must match
    /// it. `nil` sends no SNI and skips the host name check.
    public var serverName: String?
    /// Server only: require and validate client certificates; `nil` (default) asks for none.
    public var clientCertificateValidation: ClientCertificateValidation?
    /// Client only: when set, the application decides whether to trust the server instead of
    /// ``serverTrust`` — no host name, validity period or CA chain check is made (a mesh
    /// peer's authenticator decides, on both ends of a link). The closure receives the
    /// server's chain (leaf first); the handshake still fails unless the server proves it holds
    /// the leaf's private key. It is called synchronously during the handshake, on an
    /// arbitrary thread: it must be quick and must not touch the stream. A rejection fails the
    /// handshake with `PeerSyncError.Code.untrustedCertificate` (reason
    /// ``CertificateTrustFailure/rejectedByCallback``). Default nil.
    public var serverCertificateCallback: (@Sendable ([Certificate]) -> Bool)?
    /// Default and floor: TLS 1.2.
    public var minimumVersion: TLSVersion
    /// Default: TLS 1.3 (preferred whenever both sides support it).
    public var maximumVersion: TLSVersion
    /// The whole handshake must finish within this time, or it fails with
    /// `PeerSyncError.Code.timeout` and the underlying stream is closed. `nil`: no limit.
    /// Default 30 seconds.
    public var handshakeTimeout: Duration?

    /// A configuration with every setting given; the defaults are the properties' (system roots, no
    /// SNI, no client certificates, TLS 1.2 to 1.3, a 30 s handshake). Nothing is validated here:
    /// an identity that cannot be used fails the handshake (`invalidCertificate`).
    public init(role: Role, identity: TLSIdentity? = nil, serverTrust: ServerTrust = .systemRoots,
                serverName: String? = nil, clientCertificateValidation: ClientCertificateValidation? = nil,
                minimumVersion: TLSVersion = .v1_2, maximumVersion: TLSVersion = .v1_3,
                handshakeTimeout: Duration? = .seconds(30)) {
        self.role = role
        self.identity = identity
        self.serverTrust = serverTrust
        self.serverName = serverName
        self.clientCertificateValidation = clientCertificateValidation
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.handshakeTimeout = handshakeTimeout
    }

    /// A client configuration.
    public static func client(serverName: String?, serverTrust: ServerTrust = .systemRoots,
                              identity: TLSIdentity? = nil) -> TLSConfiguration {
        TLSConfiguration(role: .client, identity: identity, serverTrust: serverTrust, serverName: serverName)
    }

    /// A server configuration.
    public static func server(identity: TLSIdentity,
                              clientCertificateValidation: ClientCertificateValidation? = nil) -> TLSConfiguration {
        TLSConfiguration(role: .server, identity: identity, clientCertificateValidation: clientCertificateValidation)
    }

    /// Checks the combination; throws ``PeerSyncError/Code/invalidArgument``.
    func validate() throws(PeerSyncError) {
        if role == .server, identity == nil {
            throw PeerSyncError(.invalidArgument, "a TLS server configuration needs an identity")
        }
        if minimumVersion > maximumVersion {
            throw PeerSyncError(.invalidArgument, "minimumVersion \(minimumVersion) is above maximumVersion \(maximumVersion)")
        }
        if let serverName {
            guard !serverName.isEmpty, serverName.utf8.count <= 253, !serverName.utf8.contains(0) else {
                throw PeerSyncError(.invalidArgument, "serverName must be a non-empty host name or IP address")
            }
        }
    }
}
