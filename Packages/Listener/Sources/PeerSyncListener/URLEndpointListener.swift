import Foundation
import PeerSyncAuth
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket

/// Settings of a ``URLEndpointListener`` (Couchbase Lite's `URLEndpointListenerConfiguration`).
public struct URLEndpointListenerConfiguration: Sendable {
    /// The collections served, all of one database. Replicators may ask for any subset.
    public var collections: [Collection]
    /// The TCP port; 0 (default) picks a free one (read ``URLEndpointListener/port`` after
    /// ``URLEndpointListener/start()``).
    public var port: Int = 0
    /// Bind only to this network interface (e.g. `lo`, `eth0`) or address (e.g. `127.0.0.1`).
    /// nil (default): every interface.
    public var networkInterface: String?
    /// Serve plain `ws://` instead of `wss://`. Default false: TLS on.
    public var disableTLS = false
    /// The identity presented over TLS. nil (default): an anonymous self-signed identity is
    /// created on the first start, kept in the database folder and reused on later starts.
    public var tlsIdentity: TLSIdentity?
    /// `ListenerPasswordAuthenticator` (HTTP Basic, checked before the WebSocket upgrade and on
    /// every REST request) or `ListenerCertificateAuthenticator` (TLS client certificates;
    /// needs TLS). nil (default): everyone is accepted.
    public var authenticator: (any ListenerAuthenticator)?
    /// Delta sync with replicators (Couchbase Lite's `enableDeltaSync`): when true, the
    /// listener may send pulled revisions as deltas against an ancestor the replicator holds,
    /// and lets replicators push deltas; when false (default) whole revisions travel both
    /// ways. A replicator always offers and accepts deltas.
    public var enableDeltaSync = false
    /// Peers may pull but not push (pushes are answered `HTTP`/403); REST writes are refused
    /// with 403. Default false.
    public var readOnly = false
    /// PeerSync extension: the database name in URLs (`/<name>/_blipsync`). It must follow
    /// Couchbase Lite's rule for the database name of a `URLEndpoint` URL,
    /// `[a-z][a-z0-9_$()+-]*` (`/` excluded: it separates the path), or
    /// ``URLEndpointListener/init(config:)`` throws `.invalidArgument`. nil (default): derived
    /// from the database's own name by ``URLEndpointListener/defaultDatabaseName(for:)``.
    public var databaseName: String?
    /// PeerSync extension: also serve the REST API (`GET/PUT/DELETE /<db>/<docid>`,
    /// `_changes`, database info) on the replication port. Default false: like Couchbase
    /// Lite's listener, only `/<db>/_blipsync` is served and any other request gets `404`.
    public var enableREST = false
    /// PeerSync extension: the most bytes of unfinished incoming WebSocket messages (large
    /// frames or fragments still arriving) all of the listener's connections hold together.
    /// A connection whose partial message would take the total over it is closed with 1009
    /// (message too big) and its buffer freed; the others go on. nil: no shared limit (each
    /// message is still limited to 32 MiB). Default 64 MiB
    /// (`PeerSyncWebSocket.WebSocketServerConfiguration.maxPartialMessageBytes`).
    public var maxPartialMessageBytes: Int? = 64 << 20

    /// A configuration serving `collections` (all of one database; checked by
    /// ``URLEndpointListener/init(config:)``), every other setting at its default: a free
    /// port on every interface, TLS with an anonymous self-signed identity, no authentication.
    public init(collections: [Collection]) {
        self.collections = collections
    }
}

/// Connection counts of a listener (Couchbase Lite's `URLEndpointListener.ConnectionStatus`).
public struct URLEndpointListenerConnectionStatus: Sendable, Hashable {
    /// Open connections: replication connections plus REST requests in progress.
    public var connectionCount: Int
    /// Replication sessions currently running.
    public var activeConnectionCount: Int
}

/// The passive peer (Couchbase Lite's `URLEndpointListener`): serves replicators on
/// `ws[s]://<addr>:<port>/<db>/_blipsync` and, when
/// ``URLEndpointListenerConfiguration/enableREST`` is set, a small REST API on the same port.
///
/// - Subprotocols: `BLIP_3+CBMobile_3` and `BLIP_3+CBMobile_2`; the first of the client's
///   list that is one of these is chosen; a client offering none gets `400`.
/// - An unknown database path gets `404`. With a `ListenerPasswordAuthenticator`, a request
///   without valid HTTP Basic credentials gets `401` with
///   `WWW-Authenticate: Basic realm="PeerSync", charset="UTF-8"` (the same on the REST API)
///   and no upgrade.
/// - Each connection runs its own `PassiveReplicationSession`; one client's failure does not
///   affect the others.
///
/// Thread-safe: every method may be called from any task. ``start()`` and ``stop()`` are
/// serialized; ``stop()`` closes every replication connection. While running, the listener
/// is registered with its database: `Database.close()` stops it first (as ``stop()`` does),
/// and starting it on a closed database throws `.closed`.
public final class URLEndpointListener: Sendable {
    /// Couchbase Lite's name for ``URLEndpointListenerConnectionStatus``.
    public typealias ConnectionStatus = URLEndpointListenerConnectionStatus

    /// The configuration it was created with (``tlsIdentity`` may differ once started with an
    /// anonymous identity).
    public let config: URLEndpointListenerConfiguration
    let database: Database
    let databaseName: String

    private struct State {
        var server: WebSocketServer?
        var identity: TLSIdentity?
        var sessions: [UInt64: PassiveReplicationSession] = [:]
        var nextSession: UInt64 = 0
        var restInFlight = 0
        var generation = 0
        /// The registration with the database while running.
        var stoppable: ActiveStoppable?
    }

    private let state = LockedValue(State())
    /// Serializes start() and stop().
    private let lifecycle = AsyncLock()

    /// Validates the configuration: at least one collection, all of one open database, and
    /// a certificate authenticator only with TLS. Throws `.invalidArgument`.
    public init(config: URLEndpointListenerConfiguration) throws {
        guard let first = config.collections.first else {
            throw PeerSyncError(.invalidArgument, "the listener configuration has no collections")
        }
        let database = first.database
        guard config.collections.allSatisfy({ $0.database === database }) else {
            throw PeerSyncError(.invalidArgument, "all collections of a listener must belong to one database")
        }
        guard (0...65535).contains(config.port) else {
            throw PeerSyncError(.invalidArgument, "port \(config.port) is out of range")
        }
        if config.authenticator is ListenerCertificateAuthenticator && config.disableTLS {
            throw PeerSyncError(.invalidArgument, "client certificate authentication needs TLS (disableTLS is set)")
        }
        if let a = config.authenticator, !(a is ListenerCertificateAuthenticator), !(a is ListenerPasswordAuthenticator) {
            throw PeerSyncError(.invalidArgument, "unsupported listener authenticator \(type(of: a))")
        }
        let name = config.databaseName ?? Self.defaultDatabaseName(for: database.name)
        guard Self.isValidDatabaseName(name) else {
            throw PeerSyncError(.invalidArgument,
                                "invalid listener database name '\(name)': it must match [a-z][a-z0-9_$()+-]* "
                                + "(a lowercase letter, then lowercase letters, digits or _ $ ( ) + -)")
        }
        self.config = config
        self.database = database
        self.databaseName = name
    }

    /// Whether `name` may be the database name in the listener's URLs: Couchbase Lite's rule
    /// `[a-z][a-z0-9_$()+-]*` (a replicator refuses other names as an invalid URL endpoint;
    /// `/` is excluded because it separates the URL path).
    public static func isValidDatabaseName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy(isDatabaseNameCharacter)
    }

    /// The URL database name used when ``URLEndpointListenerConfiguration/databaseName`` is nil:
    /// `databaseName` (e.g. the folder's base name) lower-cased, every character the rule of
    /// ``isValidDatabaseName(_:)`` does not allow replaced by `_`, and prefixed with `db` when
    /// it would not start with a letter (`"L"` → `"l"`, `"My Tasks"` → `"my_tasks"`,
    /// `"2024"` → `"db2024"`, `""` → `"db"`). The result always satisfies the rule.
    public static func defaultDatabaseName(for databaseName: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in databaseName.lowercased().unicodeScalars {
            scalars.append(isDatabaseNameCharacter(scalar) ? scalar : "_")
        }
        let name = String(scalars)
        if let first = name.unicodeScalars.first, ("a"..."z").contains(first) { return name }
        return "db" + name
    }

    private static func isDatabaseNameCharacter(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) || "_$()+-".unicodeScalars.contains(scalar)
    }

    /// The WebSocket server while running (tests read its connection and memory counters).
    var webSocketServer: WebSocketServer? { state.withLock { $0.server } }

    /// The bound port while running, nil when stopped.
    public var port: Int? { state.withLock { $0.server?.port } }

    /// The identity presented over TLS while running (the configured one or the anonymous
    /// one); nil when stopped or without TLS.
    public var tlsIdentity: TLSIdentity? { state.withLock { $0.identity } }

    /// The connection counts.
    public var status: ConnectionStatus {
        state.withLock { s in
            ConnectionStatus(connectionCount: s.sessions.count + s.restInFlight, activeConnectionCount: s.sessions.count)
        }
    }

    /// The URLs replicators can use, `ws[s]://<address>:<port>/<db>`: one per IPv4 address of
    /// the bound interface(s) (loopback last). Empty when stopped.
    public var urls: [URL] {
        guard let server = state.withLock({ $0.server }) else { return [] }
        let scheme = config.disableTLS ? "ws" : "wss"
        var hosts: [String]
        if server.host == "0.0.0.0" || server.host == "::" || server.host.isEmpty {
            hosts = InterfaceAddresses.ipv4()
        } else {
            hosts = [server.host]
        }
        if hosts.isEmpty { hosts = ["127.0.0.1"] }
        return hosts.compactMap { host in
            let h = host.contains(":") ? "[\(host)]" : host
            return URL(string: "\(scheme)://\(h):\(server.port)/\(databaseName)")
        }
    }

    /// Starts listening. Throws `.addressInUse` when the port is taken, `.listenerState` when
    /// already running, `.closed` when the database is closed, identity errors from PeerSyncAuth.
    public func start() async throws {
        try await lifecycle.withLock {
            if state.withLock({ $0.server != nil }) {
                throw PeerSyncError(.listenerState, "the listener is already running")
            }
            let stoppable = try database.addActiveStoppable("listener for \(databaseName)") { [weak self] in
                await self?.stop()
            }
            do {
                try await startServer(stoppable)
            } catch {
                stoppable.remove()
                throw error
            }
        }
    }

    /// The body of ``start()``, under the life-cycle lock.
    private func startServer(_ stoppable: ActiveStoppable) async throws {
        var serverConfig = WebSocketServerConfiguration()
        var identity: TLSIdentity?
        if !config.disableTLS {
            let id = try config.tlsIdentity ?? AnonymousIdentity.loadOrCreate(databasePath: database.path)
            identity = id
            if let certAuth = config.authenticator as? ListenerCertificateAuthenticator {
                serverConfig.tls = certAuth.tlsConfiguration(identity: id)
            } else {
                serverConfig.tls = .server(identity: id)
            }
        }
        serverConfig.port = config.port
        serverConfig.maxPartialMessageBytes = config.maxPartialMessageBytes
        if let iface = config.networkInterface {
            if iface.contains(".") || iface.contains(":") {
                serverConfig.host = iface
            } else {
                serverConfig.interface = iface
            }
        }
        let generation = state.withLock { s -> Int in
            s.generation += 1
            return s.generation
        }
        let route = WebSocketRoute(
            path: "/\(databaseName)/_blipsync",
            subprotocols: Self.subprotocols,
            requireSubprotocol: true,
            authenticate: passwordHook(),
            onConnection: { [weak self] connection in
                guard let self else {
                    await connection.close(code: .goingAway, reason: "the listener stopped")
                    return
                }
                await self.serve(connection, generation: generation)
            })
        let rest: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> HTTPResponse)?
        if config.enableREST {
            let handler = RESTHandler(listener: self)
            rest = { request, _ in await handler.handle(request) }
        } else {
            rest = nil
        }
        let server = try await WebSocketServer.start(configuration: serverConfig, routes: [route], httpHandler: rest)
        state.withLock { s in
            s.server = server
            s.identity = identity
            s.stoppable = stoppable
        }
        Logger(.network).info("listener for \(databaseName) on port \(server.port) (\(config.disableTLS ? "ws" : "wss"))")
    }

    /// Stops accepting, closes every replication connection and waits until their sessions
    /// have ended. Idempotent.
    public func stop() async {
        await lifecycle.withLock {
            let (server, sessions, stoppable) = state.withLock { s in
                let out = (s.server, Array(s.sessions.values), s.stoppable)
                s.server = nil
                s.identity = nil
                s.stoppable = nil
                s.generation += 1
                return out
            }
            defer { stoppable?.remove() }
            await server?.stop()
            await withTaskGroup(of: Void.self) { group in
                for session in sessions { group.addTask { await session.stop() } }
            }
            // Sessions unregister themselves when run() returns; wait briefly for that.
            for _ in 0..<200 where state.withLock({ !$0.sessions.isEmpty }) {
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    /// The realm of the `401` challenge, the same on the WebSocket upgrade and REST paths:
    /// `WWW-Authenticate: Basic realm="PeerSync", charset="UTF-8"`.
    public static let authenticationRealm = "PeerSync"

    /// The subprotocols served, in order of preference.
    public static let subprotocols = ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"]

    // MARK: Internals

    /// The pre-upgrade check for a password authenticator (nil otherwise: certificates are
    /// checked by TLS).
    private func passwordHook() -> (@Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult)? {
        guard let auth = config.authenticator as? ListenerPasswordAuthenticator else { return nil }
        return { request, _ in
            let header = request.headers["Authorization"]
            guard auth.authenticate(authorizationHeaderValue: header) else {
                return .challenge(realm: Self.authenticationRealm)
            }
            return .accept(user: header.flatMap { BasicAuthorization.parse($0)?.username })
        }
    }

    /// Whether a REST request's credentials pass (password authenticator); certificate and
    /// no authenticator always pass here.
    func restAuthorized(_ request: HTTPRequest) -> Bool {
        guard let auth = config.authenticator as? ListenerPasswordAuthenticator else { return true }
        return auth.authenticate(authorizationHeaderValue: request.headers["Authorization"])
    }

    func restBegan() { state.withLock { $0.restInFlight += 1 } }
    func restEnded() { state.withLock { $0.restInFlight -= 1 } }

    private func serve(_ connection: WebSocketConnection, generation: Int) async {
        let blip: BLIPConnection
        do {
            blip = try BLIPConnection(connection: connection)
        } catch {
            await connection.close(code: .internalError, reason: "cannot start BLIP")
            return
        }
        let session = PassiveReplicationSession(
            connection: blip, database: database, collections: config.collections,
            options: .init(readOnly: config.readOnly, enableDeltaSync: config.enableDeltaSync))
        let id = state.withLock { s -> UInt64? in
            guard s.generation == generation, s.server != nil else { return nil }
            s.nextSession += 1
            s.sessions[s.nextSession] = session
            return s.nextSession
        }
        guard let id else {
            await connection.close(code: .goingAway, reason: "the listener stopped")
            return
        }
        let peer = connection.remoteAddressDescription
        Logger(.network).info("replication connection from \(peer) (\(connection.subprotocol ?? "-"))")
        await session.run()
        state.withLock { _ = $0.sessions.removeValue(forKey: id) }
        Logger(.network).info("replication connection from \(peer) ended")
    }
}

extension WebSocketConnection {
    var remoteAddressDescription: String { "\(self.remoteAddress ?? "?")" }
}
