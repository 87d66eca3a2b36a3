import PeerSyncAuth
import PeerSyncBLE
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncTransport
import PeerSyncWebSocket

/// The mesh's links over Bluetooth LE: `BLETransport` (an L2CAP connection-oriented channel
/// carrying **mutual TLS**, WebSocket framing and BLIP, `shared/reference/multipeer-protocol.md`
/// §2), for peers found by `BLEDiscovery`.
///
/// - **Listening** (``start(_:)``): an L2CAP listener on ``MultipeerBluetoothOptions/psm`` (nil:
///   a free dynamic LE PSM), announced as the publication's port (the PSM characteristic),
///   presenting `MeshLinkContext/identity` and **requiring** a client certificate. A link
///   appears in ``incomingLinks()`` once its TLS handshake finished with the client's
///   certificate accepted.
/// - **Dialling** (``dial(_:)``): `l2cap://<address>:<psm>` to each address the discovery
///   reported, in turn, presenting the identity as the client certificate.
/// - **Trust**: as on Wi-Fi, the TLS layer checks nothing itself; `MeshLinkContext/authenticate`
///   decides on both ends during the handshake. A dial it rejects, or whose certificate the peer
///   rejects, throws `PeerSyncError/Code/certificateRejected`.
/// - **Stalls**: the TLS handshake of a dial and of an accepted channel must finish within
///   `MeshLinkContext/handshakeTimeout`; opening the channel has its own
///   ``MultipeerBluetoothOptions/connectTimeout``.
///
/// Channels come from an `L2CAPConnector`: `BlueZL2CAPConnector` on a real adapter (compiled,
/// never run on a radio: without Bluetooth ``start(_:)`` throws
/// `PeerSyncError/Code/bluetoothUnavailable` and the mesh carries on over its other
/// transports), or a `SimulatedL2CAPConnector` (shaped `AF_UNIX` seqpacket links) in tests.
///
/// Threading: every method from any task, concurrently; nothing blocks a thread. ``stop()``
/// closes the listener and every link still open that this transport dialled or accepted.
public final class BluetoothMeshLinkTransport: MeshLinkTransport {
    /// Where channels come from.
    public let connector: any L2CAPConnector
    /// The settings it was made with.
    public let options: MultipeerBluetoothOptions

    public var transport: MultipeerTransport { .bluetooth }

    private struct Running {
        var context: MeshLinkContext
        var listener: BLEListener
        var acceptor: Task<Void, Never>
        var incoming: AsyncStream<any MessageConnection>.Continuation
    }

    private struct State {
        var starting = false
        var running: Running?
        var incoming: AsyncStream<any MessageConnection>?
        var links = MeshLinkRegistry()
    }

    private let state = LockedValue(State())

    /// Throws `PeerSyncError/Code/invalidArgument` for invalid options.
    public init(connector: any L2CAPConnector, options: MultipeerBluetoothOptions = MultipeerBluetoothOptions()) throws(PeerSyncError) {
        try options.validate()
        self.connector = connector
        self.options = options
    }

    /// The PSM listened on while started, else nil.
    public var psm: UInt16? {
        state.withLock { $0.running.flatMap { $0.listener.endpoint.port.map(UInt16.init) } }
    }

    /// Starts the L2CAP listener; returns its PSM as the port to announce. Throws the
    /// connector's errors (`PeerSyncError/Code/bluetoothUnavailable` without Bluetooth,
    /// `PeerSyncError/Code/addressInUse` for a PSM taken), `PeerSyncError/Code/invalidArgument`
    /// if already started.
    public func start(_ context: MeshLinkContext) async throws -> MeshListeningAddress {
        let reserved = state.withLock { s -> Bool in
            guard s.running == nil, !s.starting else { return false }
            s.starting = true
            return true
        }
        guard reserved else { throw PeerSyncError(.invalidArgument, "the Bluetooth link transport is already started") }
        var listenOptions = BLEListenOptions()
        listenOptions.tls = context.serverTLS
        listenOptions.handshakeTimeout = context.handshakeTimeout
        listenOptions.connection = connectionConfiguration
        listenOptions.subprotocol = options.subprotocol
        let listener: BLEListener
        do {
            listener = try await BLETransport(connector: connector)
                .listenBLE(on: Endpoint(scheme: "l2cap", host: "local", port: Int(options.psm ?? 0)), options: listenOptions)
        } catch {
            state.withLock { $0.starting = false }
            throw error
        }
        let (stream, continuation) = AsyncStream.makeStream(of: (any MessageConnection).self)
        let acceptor = Task { [weak self] in
            while let connection = try? await listener.acceptBLE() {
                guard let self, self.admit(connection, into: continuation) else {
                    await connection.close(code: .goingAway, reason: "the mesh stopped")
                    continue
                }
            }
            continuation.finish()
        }
        state.withLock { s in
            s.starting = false
            s.running = Running(context: context, listener: listener, acceptor: acceptor, incoming: continuation)
            s.incoming = stream
            s.links = MeshLinkRegistry()
        }
        return MeshListeningAddress(port: UInt16(listener.endpoint.port ?? 0))
    }

    public func incomingLinks() -> AsyncStream<any MessageConnection> {
        state.withLock { $0.incoming } ?? AsyncStream { $0.finish() }
    }

    /// Dials `peer` (see the type's contract). Throws `PeerSyncError/Code/closed` when not
    /// started, `PeerSyncError/Code/certificateRejected` when either side refused the other's
    /// certificate, else the error of the last address tried.
    public func dial(_ peer: DiscoveredPeer) async throws -> any MessageConnection {
        guard let context = state.withLock({ $0.running?.context }) else {
            throw PeerSyncError(.closed, "the Bluetooth link transport is not started")
        }
        var connectOptions = BLEConnectOptions()
        connectOptions.tls = context.clientTLS
        connectOptions.handshakeTimeout = context.handshakeTimeout
        connectOptions.connectTimeout = options.connectTimeout
        connectOptions.connection = connectionConfiguration
        connectOptions.subprotocol = options.subprotocol
        return try await MeshDialing.eachAddress(of: peer) { address in
            let endpoint = try Endpoint(scheme: "l2cap", host: address, port: Int(peer.port))
            let connection = try await BLETransport(connector: connector).connectBLE(to: endpoint, options: connectOptions)
            let registered = state.withLock { s -> Bool in
                guard s.running != nil else { return false }
                s.links.add(connection)
                return true
            }
            guard registered else {
                await connection.close(code: .goingAway, reason: "the mesh stopped")
                throw PeerSyncError(.closed, "the Bluetooth link transport stopped while dialling")
            }
            return connection
        }
    }

    /// Stops accepting, ends ``incomingLinks()`` and closes every link still open. Idempotent.
    public func stop() async {
        let (running, links) = state.withLock { s -> (Running?, [any MessageConnection]) in
            guard let running = s.running else { return (nil, []) }
            s.running = nil
            s.incoming = nil
            defer { s.links = MeshLinkRegistry() }
            return (running, s.links.open())
        }
        guard let running else { return }
        await running.listener.close()
        running.acceptor.cancel()
        running.incoming.finish()
        await MeshLinkRegistry.close(links)
    }

    private var connectionConfiguration: WebSocketConfiguration {
        var configuration = WebSocketConfiguration()
        configuration.heartbeatInterval = options.heartbeatInterval
        return configuration
    }

    /// Hands an authenticated incoming link to the mesh; false if the transport stopped.
    private func admit(_ connection: WebSocketConnection, into continuation: AsyncStream<any MessageConnection>.Continuation) -> Bool {
        let admitted = state.withLock { s -> Bool in
            guard s.running != nil || s.starting else { return false }
            s.links.add(connection)
            return true
        }
        guard admitted, case .enqueued = continuation.yield(connection) else { return false }
        return true
    }
}
