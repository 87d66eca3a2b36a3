import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncTransport
import PeerSyncWebSocket

/// The mesh's links on Wi-Fi/LAN: WebSocket over **mutual TLS**, as Couchbase Lite's
/// multipeer replicator connects peers found by DNS-SD (`shared/reference/multipeer-protocol.md`
/// §1, §3).
///
/// - **Listening** (``start(_:)``): a `WebSocketServer` on ``MultipeerWiFiOptions/port``
///   (default a free one) presenting `MeshLinkContext.identity` and **requiring** a client
///   certificate. It upgrades any `/<name>/_blipsync` path with subprotocol
///   ``subprotocols``. A request on another path is answered 404 and closed; bytes that are not
///   TLS end the handshake and the connection. A link appears in ``incomingLinks()`` only after
///   the TLS handshake (with the client's certificate accepted) and the upgrade completed.
/// - **Dialling** (``dial(_:)``): `wss://<address>:<port>/<databaseName>/_blipsync` to each of
///   the peer's addresses in turn until one answers, presenting the identity as the client
///   certificate.
/// - **Trust**: on both ends the TLS layer makes no host name, validity or CA chain check;
///   `MeshLinkContext.authenticate` alone decides, given the peer's chain (leaf first), during
///   the handshake. A dial it rejects — or whose certificate the peer rejects — throws
///   `PeerSyncError.Code.certificateRejected` (the TLS layer's reason kept in the context) and
///   no other address is tried: the same certificate would meet the same verdict.
/// - **Stalls**: a dial's TLS handshake plus upgrade, and an accepted connection's TLS handshake
///   plus request head, must finish within `MeshLinkContext.handshakeTimeout`; a peer that
///   stalls (connects and sends nothing, stops mid-handshake) is dropped then, and nothing else
///   waits on it (Couchbase Lite's CBL-8380/8515: a staller wedged its replicator). The TCP
///   connect of a dial has its own ``MultipeerWiFiOptions/connectTimeout`` per address.
///
/// Threading: every method from any task, concurrently; nothing blocks a thread (sockets are
/// non-blocking, on PeerSyncPosix's reactor). ``stop()`` closes the listener and every link
/// still open that this transport dialled or accepted (links the mesh already released are
/// not kept alive by it).
public final class WiFiMeshLinkTransport: MeshLinkTransport {
    /// The WebSocket subprotocol of mesh links: the rev-tree replication protocol
    /// (`BLIP_3+CBMobile_3`), the one Couchbase Lite 3.3+ multipeer peers speak. The legacy
    /// single-collection `BLIP_3+CBMobile_2` is not offered: no multipeer peer predates
    /// collections.
    public static let subprotocols = ["BLIP_3+CBMobile_3"]

    /// The settings it was made with.
    public let options: MultipeerWiFiOptions

    public var transport: MultipeerTransport { .wifi }

    private struct Running {
        var context: MeshLinkContext
        var server: WebSocketServer
        var incoming: AsyncStream<any MessageConnection>.Continuation
    }

    private struct State {
        var running: Running?
        /// The stream of the current start, handed out by ``incomingLinks()``.
        var incoming: AsyncStream<any MessageConnection>?
        /// Every link dialled or accepted since the last start, weakly.
        var links = MeshLinkRegistry()
    }

    private let state = LockedValue(State())

    /// Throws `PeerSyncError.Code.invalidArgument` for invalid options.
    public init(options: MultipeerWiFiOptions = MultipeerWiFiOptions()) throws(PeerSyncError) {
        try options.validate()
        self.options = options
    }

    /// The port the listener is bound to while started, else nil.
    public var port: UInt16? {
        state.withLock { $0.running.map { UInt16($0.server.port) } }
    }

    /// Starts the TLS listener; returns its port (and the bind address, when one was set).
    /// Throws `PeerSyncError.Code.addressInUse` for a taken port,
    /// `PeerSyncError.Code.hostNotFound` for an unknown interface or bind address,
    /// `PeerSyncError.Code.invalidArgument` if it is already started.
    public func start(_ context: MeshLinkContext) async throws -> MeshListeningAddress {
        // Reserve the start, so that two concurrent starts cannot both bind.
        let (stream, continuation) = AsyncStream.makeStream(of: (any MessageConnection).self)
        let tls = context.serverTLS
        var configuration = WebSocketServerConfiguration()
        configuration.host = options.bindAddress
        configuration.port = Int(options.port)
        configuration.interface = options.interface
        configuration.tls = tls
        configuration.handshakeTimeout = context.handshakeTimeout
        configuration.connection = connectionConfiguration
        let route = WebSocketRoute(
            path: "/*/_blipsync",
            subprotocols: Self.subprotocols,
            requireSubprotocol: true,
            authenticate: { _, client in
                // The TLS layer required a client certificate and `context.authenticate` accepted
                // it; a connection without one cannot get here, but say no rather than assume.
                client.peerCertificateChain.isEmpty ? .reject(status: 403, message: "a client certificate is required")
                                                     : .accept(user: nil)
            },
            onConnection: { [weak self] connection in
                guard let self else {
                    await connection.close(code: .goingAway, reason: "the mesh stopped")
                    return
                }
                await self.admit(connection, into: continuation)
            })
        let reserved = state.withLock { s -> Bool in
            guard s.running == nil, s.incoming == nil else { return false }
            s.incoming = stream
            return true
        }
        guard reserved else {
            throw PeerSyncError(.invalidArgument, "the Wi-Fi link transport is already started")
        }
        let server: WebSocketServer
        do {
            server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        } catch {
            state.withLock { $0.incoming = nil }
            continuation.finish()
            throw error
        }
        state.withLock { s in
            s.running = Running(context: context, server: server, incoming: continuation)
            s.links = MeshLinkRegistry()
        }
        let addresses = options.interface == nil ? options.bindAddress.map { [$0] } ?? [] : []
        return MeshListeningAddress(port: UInt16(server.port), addresses: addresses)
    }

    public func incomingLinks() -> AsyncStream<any MessageConnection> {
        state.withLock { $0.incoming } ?? AsyncStream { $0.finish() }
    }

    /// Dials `peer` (see the type's contract). Throws `PeerSyncError.Code.closed` when not
    /// started, `PeerSyncError.Code.certificateRejected` when either side refused the other's
    /// certificate, else the error of the last address tried (`PeerSyncError.Code.connectionRefused`,
    /// `PeerSyncError.Code.timeout`, …).
    public func dial(_ peer: DiscoveredPeer) async throws -> any MessageConnection {
        guard let context = state.withLock({ $0.running?.context }) else {
            throw PeerSyncError(.closed, "the Wi-Fi link transport is not started")
        }
        var clientOptions = WebSocketClientOptions()
        clientOptions.tls = context.clientTLS
        clientOptions.subprotocols = Self.subprotocols
        clientOptions.connectTimeout = options.connectTimeout
        clientOptions.handshakeTimeout = context.handshakeTimeout
        clientOptions.interface = options.interface
        clientOptions.connection = connectionConfiguration
        return try await MeshDialing.eachAddress(of: peer) { address in
            let endpoint = try Endpoint(scheme: "wss", host: address, port: Int(peer.port), path: "/\(options.databaseName)/_blipsync")
            let connection = try await WebSocketTransport().connectWebSocket(to: endpoint, options: clientOptions)
            guard register(connection) else {
                await connection.close(code: .goingAway, reason: "the mesh stopped")
                throw PeerSyncError(.closed, "the Wi-Fi link transport stopped while dialling")
            }
            return connection
        }
    }

    /// Stops accepting, ends ``incomingLinks()`` and closes every link still open. Idempotent.
    public func stop() async {
        let (running, links) = state.withLock { s -> (Running?, [any MessageConnection]) in
            guard let running = s.running else { return (nil, []) }   // not started, or still starting
            s.running = nil
            s.incoming = nil
            let links = s.links.open()
            s.links = MeshLinkRegistry()
            return (running, links)
        }
        guard let running else { return }
        running.incoming.finish()
        await running.server.stop()
        await MeshLinkRegistry.close(links)
    }

    // MARK: Links

    private var connectionConfiguration: WebSocketConfiguration {
        var configuration = WebSocketConfiguration()
        configuration.heartbeatInterval = options.heartbeatInterval
        return configuration
    }

    /// Records a link of the current start; false if the transport is stopped.
    private func register(_ connection: WebSocketConnection) -> Bool {
        state.withLock { s in
            guard s.running != nil else { return false }
            s.links.add(connection)
            return true
        }
    }

    /// Hands an upgraded, authenticated incoming connection to the mesh (or closes it if the
    /// start it belongs to is over).
    private func admit(_ connection: WebSocketConnection,
                       into continuation: AsyncStream<any MessageConnection>.Continuation) async {
        let admitted = state.withLock { s -> Bool in
            guard s.running != nil else { return false }
            s.links.add(connection)
            return true
        }
        if admitted, case .enqueued = continuation.yield(connection) { return }
        await connection.close(code: .goingAway, reason: "the mesh stopped")
    }
}
