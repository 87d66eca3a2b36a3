import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncWebSocketCodec
import Synchronization

/// Options of ``WebSocketTransport/connect(to:options:)``.
public struct WebSocketClientOptions: TransportOptions {
    /// Subprotocols offered, in order of preference. When not empty, the server must accept
    /// one of them, else `connect` throws `.webSocketSubprotocolRejected`.
    public var subprotocols: [String] = []
    /// Extra request headers (e.g. `User-Agent`, cookies). The handshake's own headers
    /// cannot be overridden. Names and values are validated (no CR/LF).
    public var headers: HTTPHeaders = HTTPHeaders()
    /// Credentials sent only when the server answers `401` with `WWW-Authenticate: Basic`:
    /// the client then retries once on a new connection (what a Couchbase Lite client does).
    public var credentials: BasicAuthenticator?
    /// TLS settings for `wss://`. nil: verify the server against the system CA roots, with
    /// the endpoint's host as SNI and expected name.
    public var tls: TLSConfiguration?
    /// Settings of the open connection (heartbeat, dead-peer timeout, max message size, ...).
    public var connection = WebSocketConfiguration()
    /// Time allowed for the TCP connection. Default 30 s.
    public var connectTimeout: Duration = .seconds(30)
    /// Connect from this network interface (e.g. `lo`, `eth0`) or local IP address: the
    /// socket is bound to it before connecting. An unknown interface throws
    /// `.invalidArgument`. nil (default): the system picks.
    public var interface: String?
    /// Time allowed for TLS plus the HTTP upgrade after the TCP connection. Default 30 s.
    public var handshakeTimeout: Duration = .seconds(30)
    /// The largest HTTP response head accepted. Default 16 KiB.
    public var maxResponseHeaderBytes: Int = 16 * 1024

    public init() {}
}

/// Options of ``WebSocketTransport/listen(on:options:)``.
public struct WebSocketListenOptions: TransportOptions {
    /// TLS settings for `wss://` (a server configuration with an identity). Required for `wss`.
    public var tls: TLSConfiguration?
    /// Subprotocols the listener supports: it picks the first of the client's list it supports.
    public var subprotocols: [String] = []
    /// With subprotocols set: refuse (400) a client that offers none of them. Default true.
    public var requireSubprotocol = true
    /// Called before the upgrade; may accept, ask for Basic credentials (401) or reject.
    public var authenticate: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult)?
    /// Binds to this interface's address instead of the endpoint's host.
    public var interface: String?
    /// Settings of accepted connections.
    public var connection = WebSocketConfiguration()
    /// Limits of the opening handshake (slow or silent clients are dropped).
    public var handshakeTimeout: Duration = .seconds(10)
    /// The largest upgrade request header accepted (431 beyond). Default 16 KiB.
    public var maxRequestHeaderBytes: Int = 16 * 1024
    /// Upgraded connections waiting for `TransportListener.accept()`; beyond it, clients are
    /// refused with 503. Default 128.
    public var backlog: Int = 128

    public init() {}
}

/// WebSocket client and listener as a `Transport` (`ws://`, `wss://`).
///
/// ``connect(to:options:)`` opens TCP (IPv4 or IPv6), runs TLS for `wss`, sends the HTTP/1.1
/// upgrade (subprotocols, extra headers), answers one `401` Basic challenge with the
/// configured credentials, validates the 101 answer and returns a ``WebSocketConnection``.
/// The default port is 80 for `ws`, 443 for `wss`; the default path `/`.
/// Errors: `.connectionRefused`, `.hostNotFound`, `.timeout`, `.webSocketHandshakeFailed`
/// (with `context["status"]`), `.webSocketUnauthorized`, `.webSocketSubprotocolRejected`,
/// TLS errors from PeerSyncAuth (`.untrustedCertificate`, `.tlsHandshakeFailed`, ...).
///
/// ``listen(on:options:)`` binds `host:port` (port 0 picks a free port) and accepts upgrades
/// on the endpoint's path (any path when it is empty or `/`). For several paths and plain
/// HTTP on one port, use ``WebSocketServer``.
public struct WebSocketTransport: Transport {
    /// Subprotocols, headers, credentials, TLS and timeouts of an outgoing connection.
    public typealias ConnectOptions = WebSocketClientOptions
    /// TLS, subprotocols, authentication, limits and backlog of a listener.
    public typealias ListenOptions = WebSocketListenOptions

    /// The transport; it holds no state (each connection and listener is its own).
    public init() {}

    public var kind: TransportKind { .webSocket }
    public var schemes: Set<String> { ["ws", "wss"] }

    public func connect(to endpoint: Endpoint, options: WebSocketClientOptions) async throws -> any MessageConnection {
        try await connectWebSocket(to: endpoint, options: options)
    }

    /// ``connect(to:options:)`` with the concrete connection type.
    public func connectWebSocket(to endpoint: Endpoint, options: WebSocketClientOptions = WebSocketClientOptions()) async throws -> WebSocketConnection {
        try checkScheme(of: endpoint)
        try options.headers.validate()
        for name in options.subprotocols where name.isEmpty || !name.utf8.allSatisfy(isTokenChar) {
            throw PeerSyncError(.invalidArgument, "invalid subprotocol name", context: ["subprotocol": name])
        }
        let secure = endpoint.scheme == "wss"
        let port = endpoint.port ?? (secure ? 443 : 80)
        guard (1...65535).contains(port) else {
            throw PeerSyncError(.invalidArgument, "cannot connect to port \(port)", context: ["endpoint": endpoint.description])
        }
        var target = endpoint.path.isEmpty ? "/" : endpoint.path
        if let query = endpoint.query { target += "?" + query }
        let defaultPort = secure ? 443 : 80
        let hostPart = endpoint.host.contains(":") ? "[\(endpoint.host)]" : endpoint.host
        let hostHeader = port == defaultPort ? hostPart : "\(hostPart):\(port)"

        var authorization: String?
        var attempt = 0
        while true {
            attempt += 1
            let tcp = try await TCPStream.connect(host: endpoint.host, port: port, timeout: options.connectTimeout,
                                                  interface: options.interface)
            let outcome: HandshakeOutcome
            do {
                outcome = try await withStreamDeadline(tcp, options.handshakeTimeout, what: "WebSocket handshake") {
                    try await Self.handshake(tcp: tcp, secure: secure, endpoint: endpoint, target: target,
                                             hostHeader: hostHeader, authorization: authorization, options: options)
                }
            } catch {
                await tcp.close()
                throw error
            }
            switch outcome {
            case .upgraded(let connection):
                return connection
            case .unauthorized(let response, let stream):
                await stream.close()
                let basic = response.headers.values(for: "WWW-Authenticate").contains {
                    asciiLowercased(trimOWS($0)).hasPrefix("basic")
                }
                if attempt == 1, basic, let credentials = options.credentials {
                    authorization = credentials.authorizationHeaderValue
                    continue
                }
                throw PeerSyncError(.webSocketUnauthorized,
                                    options.credentials == nil || !basic
                                        ? "the server requires authentication" : "the server rejected the credentials",
                                    context: ["status": "401", "endpoint": endpoint.description])
            }
        }
    }

    private enum HandshakeOutcome: Sendable {
        case upgraded(WebSocketConnection)
        case unauthorized(HTTPResponse, any ByteStream)
    }

    private static func handshake(tcp: TCPStream, secure: Bool, endpoint: Endpoint, target: String, hostHeader: String,
                                  authorization: String?, options: WebSocketClientOptions) async throws -> HandshakeOutcome {
        var stream: any ByteStream = tcp
        var certificates: [[UInt8]] = []
        if secure {
            var tls = options.tls ?? TLSConfiguration.client(serverName: endpoint.host)
            tls.role = .client
            let secured = try await TLSStream.handshake(over: tcp, configuration: tls)
            certificates = secured.peerCertificateChain.map(\.derBytes)
            stream = secured
        }
        var generator = SystemRandomNumberGenerator()
        let key = WebSocketHandshake.makeKey(using: &generator)
        let request = WebSocketHandshake.clientRequest(target: target, hostHeader: hostHeader, key: key,
                                                       subprotocols: options.subprotocols,
                                                       extraHeaders: options.headers, authorization: authorization)
        try await stream.write(request.serialized())
        var parser = HTTPResponseParser(maxHeaderBytes: options.maxResponseHeaderBytes, maxBodyBytes: 64 * 1024)
        var response: HTTPResponse?
        while response == nil {
            if let bytes = try await stream.read(maxBytes: 16 * 1024) {
                parser.feed(bytes)
                response = try parser.next()
            } else {
                response = try parser.finish()
                if response == nil {
                    // A TLS listener closes a plain client's connection this way: say so.
                    let hint = secure ? "" : " (a wss:// server does that to a ws:// client: if it serves TLS, use wss://)"
                    throw PeerSyncError(.webSocketHandshakeFailed, "the server closed the connection during the handshake" + hint)
                }
            }
        }
        guard let response else { throw PeerSyncError(.internalError, "no response") }
        if response.status == 401 { return .unauthorized(response, stream) }
        let subprotocol = try WebSocketHandshake.validateServerResponse(response, key: key,
                                                                         offeredSubprotocols: options.subprotocols)
        let connection = WebSocketConnection(stream: stream, role: .client, configuration: options.connection,
                                             subprotocol: subprotocol, initialBytes: parser.takeRemainder(),
                                             peerCertificateChain: certificates, handshakeRequest: request,
                                             handshakeResponse: response)
        return .upgraded(connection)
    }

    public func listen(on endpoint: Endpoint, options: WebSocketListenOptions) async throws -> any TransportListener {
        try await listenWebSocket(on: endpoint, options: options)
    }

    /// ``listen(on:options:)`` with the concrete listener type.
    public func listenWebSocket(on endpoint: Endpoint, options: WebSocketListenOptions = WebSocketListenOptions()) async throws -> WebSocketListener {
        try checkScheme(of: endpoint)
        let secure = endpoint.scheme == "wss"
        if secure && options.tls == nil {
            throw PeerSyncError(.invalidArgument, "a wss:// listener needs a TLS server configuration (options.tls)")
        }
        return try await WebSocketListener.start(endpoint: endpoint, options: options, secure: secure)
    }
}

/// A `TransportListener` over a ``WebSocketServer`` with one route.
public final class WebSocketListener: TransportListener {
    public let endpoint: Endpoint
    /// The underlying server (for its port, or to stop it).
    public let server: WebSocketServer
    private let backlog: AsyncMessageQueue<WebSocketConnection>
    private let backlogLimit: Int

    private init(endpoint: Endpoint, server: WebSocketServer, backlog: AsyncMessageQueue<WebSocketConnection>, limit: Int) {
        self.endpoint = endpoint
        self.server = server
        self.backlog = backlog
        self.backlogLimit = limit
    }

    static func start(endpoint: Endpoint, options: WebSocketListenOptions, secure: Bool) async throws -> WebSocketListener {
        let limit = max(1, options.backlog)
        let backlog = AsyncMessageQueue<WebSocketConnection>(maxCount: limit)
        let userAuthenticate = options.authenticate
        let path = endpoint.path.isEmpty || endpoint.path == "/" ? nil : endpoint.path
        let route = WebSocketRoute(
            path: path,
            subprotocols: options.subprotocols,
            requireSubprotocol: options.requireSubprotocol,
            authenticate: { request, context in
                if backlog.count >= limit || backlog.isFinished {
                    return .reject(status: 503, message: "the listener is busy")
                }
                return await userAuthenticate?(request, context) ?? .accept(user: nil)
            },
            onConnection: { connection in
                let admitted = (try? backlog.trySend(connection)) ?? false
                if !admitted { await connection.close(code: CloseCode(rawValue: 1013), reason: "the listener is busy") }
            })
        var configuration = WebSocketServerConfiguration()
        let host = endpoint.host
        configuration.host = host == "*" ? nil : host
        configuration.port = endpoint.port ?? (secure ? 443 : 80)
        configuration.interface = options.interface
        configuration.tls = secure ? options.tls : nil
        configuration.connection = options.connection
        configuration.handshakeTimeout = options.handshakeTimeout
        configuration.maxHeaderBytes = options.maxRequestHeaderBytes
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        let bound = endpoint.with(port: server.port)
        return WebSocketListener(endpoint: bound, server: server, backlog: backlog, limit: limit)
    }

    public func accept() async throws -> (any MessageConnection)? {
        try await backlog.receive()
    }

    /// ``accept()`` with the concrete connection type.
    public func acceptWebSocket() async throws -> WebSocketConnection? {
        try await backlog.receive()
    }

    public func close() async {
        await server.stop()
        let waiting = backlog.finish(discardingBuffered: true)
        for connection in waiting {
            await connection.close(code: .goingAway, reason: "the listener closed")
        }
    }
}

/// Runs `body`; if it has not finished after `timeout`, closes `stream` (which ends any
/// pending read or write) and throws `.timeout`.
func withStreamDeadline<T: Sendable>(_ stream: any ByteStream, _ timeout: Duration, what: String,
                                     _ body: () async throws -> T) async throws -> T {
    let expired = OnceFlag()
    let timer = Task {
        try await Task.sleep(for: timeout)
        if expired.set() { await stream.close() }
    }
    defer { timer.cancel() }
    let result: T
    do {
        result = try await body()
    } catch {
        if !expired.set() {
            throw PeerSyncError(.timeout, "\(what) did not finish within \(timeout)")
        }
        throw error
    }
    if !expired.set() {
        // The timer fired as the body finished: the stream is closed, so the result is useless.
        throw PeerSyncError(.timeout, "\(what) did not finish within \(timeout)")
    }
    return result
}

/// A flag set once, from any thread.
final class OnceFlag: Sendable {
    private let value = Atomic<Bool>(false)
    /// Sets the flag; returns true if this call set it.
    func set() -> Bool {
        value.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
    }
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
}
