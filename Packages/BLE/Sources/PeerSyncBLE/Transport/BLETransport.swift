import PeerSyncAuth
import PeerSyncCore
import PeerSyncTransport
import PeerSyncWebSocket

/// Options of ``BLETransport/connect(to:options:)``.
public struct BLEConnectOptions: TransportOptions {
    /// The TLS client settings (Couchbase Lite peers always run TLS on the channel; the mesh
    /// uses mutual TLS with its own trust callback). nil: WebSocket framing in the clear — for
    /// tests and links trusted otherwise.
    public var tls: TLSConfiguration?
    /// Settings of the WebSocket connection (heartbeat, max message size, ...).
    public var connection = WebSocketConfiguration()
    /// The subprotocol the connection reports (there is no HTTP upgrade on the channel, so
    /// nothing is negotiated: both sides must mean the same). Default `BLIP_3+CBMobile_3`.
    public var subprotocol: String? = BLETransport.defaultSubprotocol
    /// Time allowed to open the L2CAP channel. Default 30 s.
    public var connectTimeout: Duration = .seconds(30)
    /// Time allowed for the TLS handshake; replaces the TLS configuration's own. Default 30 s.
    public var handshakeTimeout: Duration = .seconds(30)
    /// Packet size of writes; nil (default): the channel's send MTU less the SDU overhead
    /// (``L2CAPByteStream/defaultFragmentSize(forMTU:)``).
    public var fragmentSize: Int?

    public init() {}
}

/// Options of ``BLETransport/listen(on:options:)``.
public struct BLEListenOptions: TransportOptions {
    /// The TLS server settings (an identity; optionally required client certificates). nil:
    /// WebSocket framing in the clear (see ``BLEConnectOptions/tls``).
    public var tls: TLSConfiguration?
    /// Settings of accepted connections.
    public var connection = WebSocketConfiguration()
    /// The subprotocol accepted connections report. Default `BLIP_3+CBMobile_3`.
    public var subprotocol: String? = BLETransport.defaultSubprotocol
    /// Time an accepted channel has to finish the TLS handshake before it is dropped. Default 10 s.
    public var handshakeTimeout: Duration = .seconds(10)
    /// Connections waiting for `TransportListener.accept()`; beyond, new channels are
    /// closed. Default 128.
    public var backlog = 128
    /// Packet size of writes; nil (default): as ``BLEConnectOptions/fragmentSize``.
    public var fragmentSize: Int?

    public init() {}
}

/// The Bluetooth LE transport: TLS, WebSocket framing and (above, unchanged) BLIP over an L2CAP
/// connection-oriented channel — the stack Couchbase Lite's multipeer replicator runs on
/// Bluetooth (`shared/reference/multipeer-protocol.md` §2): raw L2CAP bytes
/// (``L2CAPByteStream``) → `TLSStream` → `WebSocketConnection` (client framing on the side that
/// connected, server framing on the side that accepted) → BLIP.
///
/// Endpoints: `l2cap://<address>:<psm>`, the host a Bluetooth address (written in brackets,
/// `l2cap://[AA:BB:CC:DD:EE:FF]:133`, since it contains colons), a peripheral identifier or a
/// simulated device's name; the port the LE PSM (1–255). Listening on port 0 binds a free
/// dynamic PSM; the listener's endpoint has the connector's own address and the PSM bound.
///
/// No HTTP upgrade is exchanged on the channel: the WebSocket starts right after TLS, as
/// Couchbase Lite's prototype did (whether its release sends one is unconfirmed; our choice,
/// written down in the protocol notes' terms, is "no").
///
/// Channels come from an ``L2CAPConnector``: ``SimulatedL2CAPNetwork`` (shaped `AF_UNIX`
/// links) or the BlueZ one. Threading: every method from any task, concurrently.
/// Errors: the connector's (`.connectionRefused`, `.timeout`, `.addressInUse`),
/// `.invalidArgument` for an endpoint that is not `l2cap://host:psm`, and TLS errors from
/// PeerSyncAuth (`.untrustedCertificate`, `.tlsHandshakeFailed`, `.timeout`, ...).
public struct BLETransport: Transport {
    /// TLS, subprotocol, fragment size and timeouts of an outgoing connection.
    public typealias ConnectOptions = BLEConnectOptions
    /// TLS, subprotocol, handshake timeout and backlog of a listener.
    public typealias ListenOptions = BLEListenOptions

    /// The subprotocol of Couchbase Lite 3.x peers (rev-tree replication).
    public static let defaultSubprotocol = "BLIP_3+CBMobile_3"

    /// Where channels come from.
    public let connector: any L2CAPConnector

    /// A transport whose channels come from `connector` (the BlueZ one, or a simulated
    /// network's).
    public init(connector: any L2CAPConnector) {
        self.connector = connector
    }

    public var kind: TransportKind { .bluetooth }
    public var schemes: Set<String> { ["l2cap"] }

    public func connect(to endpoint: Endpoint, options: BLEConnectOptions) async throws -> any MessageConnection {
        try await connectBLE(to: endpoint, options: options)
    }

    /// ``connect(to:options:)`` with the concrete connection type.
    public func connectBLE(to endpoint: Endpoint, options: BLEConnectOptions = BLEConnectOptions()) async throws -> WebSocketConnection {
        try checkScheme(of: endpoint)
        let psm = try Self.psm(of: endpoint, allowZero: false)
        let channel = try await connector.connect(to: endpoint.host, psm: psm, timeout: options.connectTimeout)
        let stream: L2CAPByteStream
        do {
            stream = try L2CAPByteStream(channel: channel, fragmentSize: options.fragmentSize)
        } catch {
            channel.socket.close()
            throw error
        }
        var tls = options.tls
        tls?.role = .client
        tls?.handshakeTimeout = options.handshakeTimeout
        return try await Self.openWebSocket(over: stream, role: .client, tls: tls, connection: options.connection,
                                            subprotocol: options.subprotocol)
    }

    public func listen(on endpoint: Endpoint, options: BLEListenOptions) async throws -> any TransportListener {
        try await listenBLE(on: endpoint, options: options)
    }

    /// ``listen(on:options:)`` with the concrete listener type.
    public func listenBLE(on endpoint: Endpoint, options: BLEListenOptions = BLEListenOptions()) async throws -> BLEListener {
        try checkScheme(of: endpoint)
        let psm = try Self.psm(of: endpoint, allowZero: true)
        if let tls = options.tls, tls.identity == nil {
            throw PeerSyncError(.invalidArgument, "a BLE listener's TLS configuration needs an identity")
        }
        let channels = try await connector.listen(psm: psm == 0 ? nil : psm)
        let bound = try Endpoint(scheme: "l2cap", host: connector.localAddress, port: Int(channels.psm))
        return BLEListener(endpoint: bound, channels: channels, options: options)
    }

    /// The PSM of `endpoint`: its port, 1–255 (0 too when listening: any free one).
    static func psm(of endpoint: Endpoint, allowZero: Bool) throws(PeerSyncError) -> UInt16 {
        guard let port = endpoint.port, (allowZero ? 0 : 1)...255 ~= port, endpoint.path.isEmpty || endpoint.path == "/" else {
            throw PeerSyncError(.invalidArgument, "a BLE endpoint is l2cap://<address>:<psm> with an LE PSM of 1–255",
                                context: ["endpoint": endpoint.description])
        }
        return UInt16(port)
    }

    /// Runs TLS (when configured) over `stream` and starts WebSocket framing in `role`. On
    /// failure the stream is closed.
    static func openWebSocket(over stream: L2CAPByteStream, role: WebSocketRole, tls: TLSConfiguration?,
                              connection: WebSocketConfiguration, subprotocol: String?) async throws -> WebSocketConnection {
        var secured: any ByteStream = stream
        var certificates: [[UInt8]] = []
        if let tls {
            // The handshake closes the stream itself when it fails.
            let tlsStream = try await TLSStream.handshake(over: stream, configuration: tls)
            certificates = tlsStream.peerCertificateChain.map(\.derBytes)
            secured = tlsStream
        }
        return WebSocketConnection(stream: secured, role: role, configuration: connection, subprotocol: subprotocol,
                                   peerCertificateChain: certificates, kind: .bluetooth)
    }
}

/// Accepts ``BLETransport`` connections: each incoming L2CAP channel runs its TLS handshake
/// (within ``BLEListenOptions/handshakeTimeout``) in its own task, then waits in the backlog
/// for ``accept()``. A channel whose handshake fails is closed and never seen by `accept`.
public final class BLEListener: TransportListener {
    public let endpoint: Endpoint
    private let channels: any L2CAPChannelListener
    private let backlog: AsyncMessageQueue<WebSocketConnection>
    private let options: BLEListenOptions
    /// The accept loop and the handshakes in progress (ended by ``close()``).
    private let tasks = LockedValue(Tasks())

    private struct Tasks {
        var closed = false
        var acceptLoop: Task<Void, Never>?
        var handshakes: [Int: Task<Void, Never>] = [:]
        /// Handshakes that finished before they were recorded in `handshakes`.
        var finishedEarly: Set<Int> = []
        var lastID = 0
    }

    init(endpoint: Endpoint, channels: any L2CAPChannelListener, options: BLEListenOptions) {
        self.endpoint = endpoint
        self.channels = channels
        self.options = options
        backlog = AsyncMessageQueue(maxCount: max(1, options.backlog))
        let loop = Task { [weak self] in
            while let channel = try? await channels.accept() {
                guard let self else {
                    channel.socket.close()
                    return
                }
                self.startHandshake(channel)
            }
        }
        tasks.withLock { $0.acceptLoop = loop }
    }

    public func accept() async throws -> (any MessageConnection)? {
        try await backlog.receive()
    }

    /// ``accept()`` with the concrete connection type.
    public func acceptBLE() async throws -> WebSocketConnection? {
        try await backlog.receive()
    }

    /// Stops listening: frees the PSM, ends handshakes in progress, closes connections still in
    /// the backlog, and makes `accept` return nil. Accepted connections stay open. Idempotent.
    public func close() async {
        let (loop, handshakes) = tasks.withLock { t -> (Task<Void, Never>?, [Task<Void, Never>]) in
            t.closed = true
            defer { t.acceptLoop = nil; t.handshakes = [:] }
            return (t.acceptLoop, Array(t.handshakes.values))
        }
        await channels.close()
        loop?.cancel()
        for handshake in handshakes { handshake.cancel() }
        for handshake in handshakes { await handshake.value }
        for waiting in backlog.finish(discardingBuffered: true) {
            await waiting.close(code: .goingAway, reason: "the listener closed")
        }
    }

    private func startHandshake(_ channel: L2CAPChannel) {
        let options = self.options
        let backlog = self.backlog
        let id = tasks.withLock { t -> Int? in
            guard !t.closed else { return nil }
            t.lastID += 1
            return t.lastID
        }
        guard let id else {
            channel.socket.close()
            return
        }
        let task = Task { [weak self] in
            defer {
                self?.tasks.withLock { t in
                    if t.handshakes.removeValue(forKey: id) == nil { t.finishedEarly.insert(id) }
                }
            }
            do {
                let stream = try L2CAPByteStream(channel: channel, fragmentSize: options.fragmentSize)
                var tls = options.tls
                tls?.role = .server
                tls?.handshakeTimeout = options.handshakeTimeout
                let connection = try await BLETransport.openWebSocket(over: stream, role: .server, tls: tls,
                                                                      connection: options.connection,
                                                                      subprotocol: options.subprotocol)
                let admitted = (try? backlog.trySend(connection)) ?? false
                if !admitted { await connection.close(code: CloseCode(rawValue: 1013), reason: "the listener is busy") }
            } catch {
                channel.socket.close()
                Logger(.network).info("BLE channel from \(channel.remoteAddress) dropped before it was accepted: \(error)")
            }
        }
        let recorded = tasks.withLock { t -> Bool in
            if t.finishedEarly.remove(id) != nil { return true }
            if t.closed { return false }
            t.handshakes[id] = task
            return true
        }
        if !recorded { task.cancel() }  // the listener closed meanwhile
    }
}
