import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket

/// The active side's connection: turns a `ReplicatorConfiguration` into a `ws://`/`wss://`
/// WebSocket connection to `<target>/_blipsync`, as a Couchbase Lite client does.
///
/// - Subprotocols offered: `BLIP_3+CBMobile_3`, `BLIP_3+CBMobile_2`.
/// - `BasicAuthenticator`: sent pre-emptively (`Authorization: Basic …`). A `401` becomes a
///   `.unauthorized` error with `context["status"] == "401"` (permanent: the replicator stops,
///   no retry loop).
/// - `SessionAuthenticator` (Sync Gateway sessions): `Cookie: <cookieName>=<sessionID>`,
///   appended to a `Cookie` header given in `headers`; an invalid cookie name or session ID
///   fails with `.invalidArgument` before connecting. Other authenticators fail the same way,
///   except `ClientCertificateAuthenticator`.
/// - `ClientCertificateAuthenticator`: its identity is presented during the TLS handshake.
/// - Server trust (`wss` only): `pinnedServerCertificate`
///   wins, then `acceptOnlySelfSignedServerCertificate`,
///   then ``trustedRootCertificates`` when set, else the system CA roots (the rules of
///   Couchbase Lite's "Authenticating the Listener").
/// - `headers` are added to the upgrade request;
///   `heartbeat` is the WebSocket ping interval; a ping unanswered for
///   `min(30 s, replyTimeout)` drops the connection as dead.
/// - `networkInterface` (an interface name such
///   as `lo`/`eth0`, or a local IP address): the socket is bound to that interface's address
///   before connecting. An unknown interface fails with `.invalidArgument` (permanent: the
///   replicator stops).
///
/// Those four settings are this module's: it adds them to `ReplicatorConfiguration` (stored in
/// its `connectorOptions`), so they exist wherever this module is imported.
///
/// Thread-safety: a value type; ``connect(_:)`` may be called from any task, concurrently.
public struct WebSocketReplicatorConnector: Sendable {
    /// CA roots to verify the server against when no pin / self-signed policy is set. nil
    /// (default): the system roots.
    public var trustedRootCertificates: [Certificate]?
    /// Time allowed for TCP, TLS and the upgrade. Default 30 s.
    public var connectTimeout: Duration = .seconds(30)

    /// The subprotocols offered, in order of preference.
    public static let subprotocols = ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"]

    /// A connector verifying servers against `trustedRootCertificates` (nil: the system CA
    /// roots) when the configuration sets no pin and no self-signed-only policy.
    public init(trustedRootCertificates: [Certificate]? = nil) {
        self.trustedRootCertificates = trustedRootCertificates
    }

    /// This connector as the closure `Replicator(config:connector:)` takes.
    public var connector: ReplicatorConnector {
        let me = self
        return { config in try await me.connect(config) }
    }

    /// The `_blipsync` endpoint of a replication target (`wss://h:p/db` → `wss://h:p/db/_blipsync`).
    public static func syncEndpoint(for target: Endpoint) throws -> Endpoint {
        var path = target.path
        while path.hasSuffix("/") { path.removeLast() }
        guard !path.isEmpty else {
            throw PeerSyncError(.invalidArgument, "the replication URL has no database name (expected ws[s]://host:port/<db>)",
                                context: ["endpoint": target.description])
        }
        if !path.hasSuffix("/_blipsync") { path += "/_blipsync" }
        return try target.with(path: path)
    }

    /// The WebSocket options a configuration selects (exposed for tests and tools).
    public func options(for config: ReplicatorConfiguration) throws -> WebSocketClientOptions {
        var options = WebSocketClientOptions()
        options.subprotocols = Self.subprotocols
        options.connectTimeout = connectTimeout
        options.handshakeTimeout = connectTimeout
        for (name, value) in (config.headers ?? [:]).sorted(by: { $0.key < $1.key }) { options.headers.add(name, value) }
        options.connection.heartbeatInterval = config.heartbeat
        // A ping unanswered for this long drops the connection (the replicator then goes
        // offline and retries); never longer than the replicator waits for a reply.
        options.connection.deadPeerTimeout = min(options.connection.deadPeerTimeout, config.replyTimeout)
        options.interface = config.networkInterface
        if let basic = config.authenticator as? BasicAuthenticator {
            options.headers.set("Authorization", basic.authorizationHeaderValue)
        } else if let session = config.authenticator as? SessionAuthenticator {
            guard session.isValidCookie else {
                throw PeerSyncError(.invalidArgument, "the session authenticator's cookie name or session ID cannot be sent in a Cookie header",
                                    context: ["cookieName": session.cookieName])
            }
            // After any `Cookie` header of `headers`, in the same header (RFC 6265: one Cookie line).
            let cookie = options.headers["Cookie"].map { $0 + "; " + session.cookieHeaderValue } ?? session.cookieHeaderValue
            options.headers.set("Cookie", cookie)
        } else if let auth = config.authenticator, !(auth is ClientCertificateAuthenticator) {
            throw PeerSyncError(.invalidArgument, "unsupported authenticator \(type(of: auth))")
        }
        if config.target.scheme == "wss" {
            let trust: ServerTrust
            if let pinned = config.pinnedServerCertificate {
                trust = .pinned(pinned)
            } else if config.acceptOnlySelfSignedServerCertificate {
                trust = .selfSignedOnly
            } else if let roots = trustedRootCertificates {
                trust = .roots(roots)
            } else {
                trust = .systemRoots
            }
            if let certAuth = config.authenticator as? ClientCertificateAuthenticator {
                options.tls = certAuth.tlsConfiguration(serverName: config.target.host, serverTrust: trust)
            } else {
                options.tls = .client(serverName: config.target.host, serverTrust: trust)
            }
        } else if config.target.scheme != "ws" {
            throw PeerSyncError(.invalidArgument, "unsupported URL scheme '\(config.target.scheme)' (use ws:// or wss://)",
                                context: ["endpoint": config.target.description])
        }
        return options
    }

    /// Opens the connection. Errors: `.unauthorized` (401, permanent), TLS trust errors
    /// (permanent), `.connectionRefused` / `.timeout` / … (transient), `.invalidArgument`.
    public func connect(_ config: ReplicatorConfiguration) async throws -> any MessageConnection {
        let endpoint = try Self.syncEndpoint(for: config.target)
        let options = try options(for: config)
        do {
            return try await WebSocketTransport().connectWebSocket(to: endpoint, options: options)
        } catch let error as PeerSyncError where error.code == .webSocketUnauthorized {
            let message = config.authenticator == nil
                ? "HTTP 401: authentication required" : "HTTP 401: the listener rejected the credentials"
            throw PeerSyncError(.unauthorized, message, context: ["status": "401", "endpoint": config.target.description])
        } catch let error as PeerSyncError where error.code == .webSocketHandshakeFailed {
            var e = error
            if let status = error.context["status"] {
                let what = status == "404" ? "no database at this URL" : error.message
                e.message = "HTTP \(status): \(what)"
            }
            throw e
        }
    }
}

extension Replicator {
    /// A replicator that connects with ``WebSocketReplicatorConnector`` (system CA roots
    /// unless the configuration pins a certificate or accepts only self-signed ones).
    public convenience init(config: ReplicatorConfiguration) throws {
        try self.init(config: config, connector: WebSocketReplicatorConnector().connector)
    }
}
