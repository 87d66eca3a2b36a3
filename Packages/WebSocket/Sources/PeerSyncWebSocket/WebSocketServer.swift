import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncWebSocketCodec
import Synchronization

/// Facts about the client of a request, for authentication hooks and HTTP handlers.
public struct WebSocketRequestContext: Sendable {
    /// The client's address, e.g. `127.0.0.1:50312`.
    public var remoteAddress: String?
    /// Whether the request came over TLS.
    public var isSecure: Bool
    /// The client's TLS certificate chain, leaf first (empty without client certificates).
    public var peerCertificateChain: [Certificate]
}

/// The decision of an authentication hook, made before the upgrade.
public enum WebSocketAuthResult: Sendable, Equatable {
    /// Upgrade; `user` is kept in ``WebSocketConnection/authenticatedUser``.
    case accept(user: String?)
    /// Answer `401 Unauthorized` with `WWW-Authenticate: Basic realm="<realm>", charset="UTF-8"`
    /// (``basicChallenge(realm:)``): a client with credentials retries once with them.
    case challenge(realm: String)
    /// Answer with this status (e.g. 403) and message, and close.
    case reject(status: Int, message: String)

    /// The `WWW-Authenticate` value of a ``challenge(realm:)``: `Basic realm="<realm>",
    /// charset="UTF-8"` (RFC 7617; quotes and backslashes in the realm escaped). Use it for
    /// plain HTTP 401 answers too, so every path challenges the same way.
    public static func basicChallenge(realm: String) -> String {
        let escaped = String(realm.flatMap { $0 == "\"" || $0 == "\\" ? ["\\", $0] : [$0] })
        return "Basic realm=\"\(escaped)\", charset=\"UTF-8\""
    }
}

/// Upgrade requests whose path matches ``path`` are turned into WebSocket connections.
public struct WebSocketRoute: Sendable {
    /// A path pattern: `/` separated segments where `*` matches any one segment, e.g.
    /// `/*/_blipsync`. nil matches every path.
    public var path: String?
    /// Subprotocols this route speaks; the server picks the first of the client's list that
    /// is here (RFC 6455 §4.2.2).
    public var subprotocols: [String]
    /// With ``subprotocols`` set: refuse (400) a client that offers none of them; otherwise
    /// upgrade without a subprotocol.
    public var requireSubprotocol: Bool
    /// Called before the upgrade (after the request is validated). nil accepts everyone.
    public var authenticate: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult)?
    /// Called with each upgraded connection, in its own task. The handler owns it.
    public var onConnection: @Sendable (WebSocketConnection) async -> Void

    /// A route for `path` (nil: every path) handing upgraded connections to `onConnection`;
    /// defaults: no subprotocols, a subprotocol required when there are some, no authentication.
    public init(path: String?, subprotocols: [String] = [], requireSubprotocol: Bool = true,
                authenticate: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult)? = nil,
                onConnection: @escaping @Sendable (WebSocketConnection) async -> Void) {
        self.path = path
        self.subprotocols = subprotocols
        self.requireSubprotocol = requireSubprotocol
        self.authenticate = authenticate
        self.onConnection = onConnection
    }

    /// Whether `requestPath` (without query) matches ``path``.
    public func matches(_ requestPath: String) -> Bool {
        guard let path else { return true }
        let pattern = path.split(separator: "/", omittingEmptySubsequences: false)
        let actual = requestPath.split(separator: "/", omittingEmptySubsequences: false)
        guard pattern.count == actual.count else { return false }
        for (p, a) in zip(pattern, actual) where p != a {
            if p == "*" && !a.isEmpty { continue }
            return false
        }
        return true
    }

    /// An authentication hook for HTTP Basic: no or wrong `Authorization` → challenge;
    /// `verify` decides (compare passwords in constant time there).
    public static func basicAuthentication(realm: String,
                                           verify: @escaping @Sendable (_ user: String, _ password: String) async -> Bool)
        -> @Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult {
        { request, _ in
            guard let header = request.headers["Authorization"],
                  let (user, password) = BasicAuthorization.parse(header) else {
                return .challenge(realm: realm)
            }
            return await verify(user, password) ? .accept(user: user) : .challenge(realm: realm)
        }
    }
}

/// Settings of a ``WebSocketServer``.
public struct WebSocketServerConfiguration: Sendable {
    /// The address to bind (numeric or a name); nil: every IPv4 and IPv6 address.
    public var host: String?
    /// The port; 0 picks a free one (read ``WebSocketServer/port``).
    public var port: Int = 0
    /// Bind to this network interface's address (e.g. `lo`), overriding ``host``.
    public var interface: String?
    /// A TLS server configuration: every connection starts with a TLS handshake.
    public var tls: TLSConfiguration?
    /// The most bytes of request line plus headers (else 431). Default 16 KiB.
    public var maxHeaderBytes: Int = 16 * 1024
    /// The largest plain-HTTP request body (else 413). Default 1 MiB.
    public var maxBodyBytes: Int = 1 << 20
    /// Time a client has for TLS plus its request head (and between plain HTTP requests on a
    /// kept-alive connection); a slow or silent client is dropped. Default 10 s.
    public var handshakeTimeout: Duration = .seconds(10)
    /// Settings of upgraded connections.
    public var connection = WebSocketConfiguration()
    /// The most bytes of unfinished incoming messages (a large frame still arriving, the
    /// fragments of a message before its last) that all connections of this server hold
    /// together — ``WebSocketServer/partialMessageBudget``. A connection whose partial message
    /// would take the total over it is closed with 1009 (message too big) and its buffer freed;
    /// the others keep theirs. nil: no shared limit (each connection still stops at
    /// ``WebSocketConfiguration/maxMessageSize``). Default 64 MiB: two messages of the default
    /// 32 MiB maximum at once. Keep it at least `connection.maxMessageSize`, or a message that
    /// large can never be received.
    public var maxPartialMessageBytes: Int? = 64 << 20
    /// After a connection ends, hand the memory the C allocator keeps free back to the
    /// operating system (glibc `malloc_trim(0)`) this long after, at most once per this
    /// interval while connections keep ending. Without it, a burst of connections left the
    /// process hundreds of MB above its idle size (issue 9). It affects the whole process.
    /// nil: never. Default 1 s.
    public var releaseFreedMemoryDelay: Duration? = .seconds(1)

    /// The defaults listed with each property.
    public init() {}
}

/// An HTTP/1.1 server that upgrades requests to WebSocket by path and answers plain HTTP
/// requests on the same port (so a listener can serve `/<db>/_blipsync` and REST together).
///
/// Each accepted TCP connection gets a task: optional TLS handshake, then requests are read
/// with `HTTPRequestParser` (limits: ``WebSocketServerConfiguration/maxHeaderBytes``,
/// `maxBodyBytes`, `handshakeTimeout`). An upgrade request (`Upgrade: websocket`) goes to
/// the first matching route: validated (400/405/426), subprotocol chosen, authentication hook
/// (401 challenge / reject), then `101` and the route's handler gets a
/// ``WebSocketConnection``. Other requests go to the HTTP handler (404 without one, or 426 if
/// the path is a WebSocket route); plain HTTP connections are kept alive. Bad requests get
/// their status (400, 413, 431, 505) and are closed; the server keeps serving the others.
/// Unfinished incoming messages of all upgraded connections share one memory budget
/// (``WebSocketServerConfiguration/maxPartialMessageBytes``, default 64 MiB); the connection
/// that would exceed it is closed with 1009. No thread is held per connection.
public final class WebSocketServer: Sendable {
    /// The settings it was started with.
    public let configuration: WebSocketServerConfiguration
    /// The WebSocket routes, tried in order.
    public let routes: [WebSocketRoute]
    /// Answers plain HTTP requests (called concurrently, one task per connection); nil: 404.
    public let httpHandler: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> HTTPResponse)?
    /// The bound address and port.
    public let host: String
    /// The bound port (the system's pick when 0 was requested).
    public let port: Int

    /// The shared budget of unfinished incoming messages
    /// (``WebSocketServerConfiguration/maxPartialMessageBytes``); nil without a limit. Its
    /// ``PartialMessageBudget/bufferedBytes`` is what the connections hold now.
    public let partialMessageBudget: PartialMessageBudget?

    /// Upgraded connections whose machinery (tasks, queues, buffers) is still alive: 0 once
    /// every connection has ended and its handler released it.
    public var liveConnectionCount: Int { lifetimes.value }
    /// How many times the server asked for freed memory to be handed back to the operating
    /// system (``WebSocketServerConfiguration/releaseFreedMemoryDelay``).
    public var freedMemoryReleaseRequests: Int { releaseRequests.load(ordering: .relaxed) }

    private let lifetimes = LiveCount()
    private let releaseRequests = Atomic<Int>(0)
    private let listener: TCPListener
    /// Connections still in their handshake (closed by ``stop()``), by id.
    private let pending = LockedValue<(next: UInt64, streams: [UInt64: TCPStream], stopped: Bool)>((0, [:], false))

    private init(configuration: WebSocketServerConfiguration, routes: [WebSocketRoute],
                 httpHandler: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> HTTPResponse)?,
                 listener: TCPListener) {
        self.configuration = configuration
        self.routes = routes
        self.httpHandler = httpHandler
        self.listener = listener
        self.partialMessageBudget = configuration.maxPartialMessageBytes.map { PartialMessageBudget(limit: $0) }
        self.host = listener.host
        self.port = listener.port
    }

    /// Binds and starts serving. Throws `.addressInUse`, `.hostNotFound`, `.invalidArgument`
    /// (e.g. a TLS configuration that is not a server's).
    public static func start(configuration: WebSocketServerConfiguration, routes: [WebSocketRoute],
                             httpHandler: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> HTTPResponse)? = nil)
        async throws -> WebSocketServer {
        if let tls = configuration.tls, tls.role != .server || tls.identity == nil {
            throw PeerSyncError(.invalidArgument, "the server's TLS configuration needs the server role and an identity")
        }
        let listener = try await TCPListener.bind(host: configuration.host, port: configuration.port,
                                                  interface: configuration.interface)
        let server = WebSocketServer(configuration: configuration, routes: routes, httpHandler: httpHandler,
                                     listener: listener)
        Task { await server.acceptLoop() }
        return server
    }

    /// Stops accepting and drops connections still in their handshake. Upgraded connections
    /// belong to their handlers and stay open. Idempotent.
    public func stop() async {
        listener.close()
        let streams = pending.withLock { state -> [TCPStream] in
            state.stopped = true
            let streams = Array(state.streams.values)
            state.streams = [:]
            return streams
        }
        for stream in streams { stream.closeNow() }
    }

    private func acceptLoop() async {
        while true {
            let tcp: TCPStream
            do {
                tcp = try await listener.accept()
            } catch {
                if let error = error as? PeerSyncError, error.code != .closed {
                    Logger(.network).error("WebSocket server on port \(port) stops accepting: \(error)")
                }
                return
            }
            Task { await self.serve(tcp) }
        }
    }

    private func track(_ tcp: TCPStream) -> UInt64? {
        pending.withLock { state -> UInt64? in
            if state.stopped { return nil }
            state.next += 1
            state.streams[state.next] = tcp
            return state.next
        }
    }

    private func untrack(_ id: UInt64) {
        pending.withLock { _ = $0.streams.removeValue(forKey: id) }
    }

    /// One TCP connection, from accept to upgrade (or to the end of its HTTP requests).
    private func serve(_ tcp: TCPStream) async {
        guard let id = track(tcp) else {
            tcp.closeNow()
            return
        }
        // The deadline of the current request head; re-armed for each kept-alive request.
        let deadline = Deadline(stream: tcp)
        deadline.arm(configuration.handshakeTimeout)
        var upgraded = false
        defer {
            if !upgraded { deadline.cancel() }
            untrack(id)
            if let delay = configuration.releaseFreedMemoryDelay {
                releaseRequests.add(1, ordering: .relaxed)
                FreedMemory.releaseSoon(after: delay)
            }
        }
        var stream: any ByteStream = tcp
        var context = WebSocketRequestContext(remoteAddress: tcp.remoteAddress, isSecure: false, peerCertificateChain: [])
        if let tls = configuration.tls {
            do {
                let secured = try await TLSStream.handshake(over: tcp, configuration: tls)
                stream = secured
                context.isSecure = true
                context.peerCertificateChain = secured.peerCertificateChain
            } catch {
                Logger(.network).info("TLS handshake with \(tcp.remoteAddress ?? "?") failed: \(error)")
                await tcp.close()
                return
            }
        }
        var parser = HTTPRequestParser(maxHeaderBytes: configuration.maxHeaderBytes, maxBodyBytes: configuration.maxBodyBytes)
        while true {
            // Read one request. Parse errors are answered with their status; a stream that
            // ends or is dropped (deadline, reset) gets no answer.
            var next: HTTPRequest?
            do {
                next = try parser.next()
            } catch {
                await respondAndClose(stream, .text(error.httpStatus, error.message + "\n"))
                return
            }
            while next == nil {
                let bytes: [UInt8]?
                do {
                    bytes = try await stream.read(maxBytes: 16 * 1024)
                } catch {
                    await stream.close()
                    return
                }
                guard let bytes else {
                    if parser.hasPartialMessage {
                        Logger(.network).info("client \(context.remoteAddress ?? "?") closed mid-request")
                    }
                    await stream.close()
                    return
                }
                parser.feed(bytes)
                do {
                    next = try parser.next()
                } catch {
                    await respondAndClose(stream, .text(error.httpStatus, error.message + "\n"))
                    return
                }
            }
            guard let request = next else { return }
            deadline.cancel()

            if WebSocketHandshake.isUpgradeRequest(request) {
                guard let (route, connection) = await upgrade(request, stream: stream, parser: &parser, context: context) else {
                    return
                }
                // From now on the connection belongs to the route's handler, not to `stop()`.
                upgraded = true
                untrack(id)
                await route.onConnection(connection)
                return
            }
            // Plain HTTP.
            var response: HTTPResponse
            if let httpHandler {
                response = await httpHandler(request, context)
            } else if routes.contains(where: { $0.matches(request.path) }) {
                response = .text(426, "this path serves WebSocket only\n",
                                 headers: ["Upgrade": "websocket", "Sec-WebSocket-Version": "13"])
            } else {
                response = .text(404, "not found\n")
            }
            let closeAfter = request.headers.containsToken("close", for: "Connection")
                || (request.version == .http1_0 && !request.headers.containsToken("keep-alive", for: "Connection"))
                || response.headers.containsToken("close", for: "Connection")
            if closeAfter && !response.headers.containsToken("close", for: "Connection") {
                response.headers.add("Connection", "close")
            }
            if request.method == "HEAD" { response.body = [] }
            do {
                try await stream.write(response.serialized())
            } catch {
                await stream.close()
                return
            }
            if closeAfter {
                await stream.shutdownOutput()
                await stream.close()
                return
            }
            deadline.arm(configuration.handshakeTimeout)
        }
    }

    /// Answers an upgrade request; returns the route and the new connection if it upgraded.
    private func upgrade(_ request: HTTPRequest, stream: any ByteStream, parser: inout HTTPRequestParser,
                         context: WebSocketRequestContext) async -> (WebSocketRoute, WebSocketConnection)? {
        guard let route = routes.first(where: { $0.matches(request.path) }) else {
            await respondAndClose(stream, .text(404, "no WebSocket endpoint at this path\n", headers: ["Connection": "close"]))
            return nil
        }
        let upgradeRequest: WebSocketHandshake.UpgradeRequest
        switch WebSocketHandshake.validateUpgradeRequest(request) {
        case .failure(let rejection):
            await respondAndClose(stream, rejection.response)
            return nil
        case .success(let valid):
            upgradeRequest = valid
        }
        var subprotocol: String?
        if !route.subprotocols.isEmpty {
            subprotocol = WebSocketHandshake.chooseSubprotocol(offered: upgradeRequest.subprotocols, supported: route.subprotocols)
            if subprotocol == nil && route.requireSubprotocol {
                let rejection = WebSocketHandshake.Rejection(
                    status: 400, message: "none of the offered subprotocols is supported; supported: \(route.subprotocols.joined(separator: ", "))")
                await respondAndClose(stream, rejection.response)
                return nil
            }
        }
        var user: String?
        if let authenticate = route.authenticate {
            switch await authenticate(request, context) {
            case .accept(let name):
                user = name
            case .challenge(let realm):
                await respondAndClose(stream, .text(401, "authentication required\n",
                                                    headers: ["WWW-Authenticate": WebSocketAuthResult.basicChallenge(realm: realm),
                                                              "Connection": "close"]))
                return nil
            case .reject(let status, let message):
                await respondAndClose(stream, .text(status, message + "\n", headers: ["Connection": "close"]))
                return nil
            }
        }
        let response = WebSocketHandshake.switchingProtocolsResponse(key: upgradeRequest.key, subprotocol: subprotocol)
        do {
            try await stream.write(response.serialized())
        } catch {
            await stream.close()
            return nil
        }
        let connection = WebSocketConnection(stream: stream, role: .server, configuration: configuration.connection,
                                             subprotocol: subprotocol, initialBytes: parser.takeRemainder(),
                                             peerCertificateChain: context.peerCertificateChain.map(\.derBytes),
                                             kind: .webSocket, handshakeRequest: request, handshakeResponse: response,
                                             authenticatedUser: user, partialMessageBudget: partialMessageBudget,
                                             lifetimes: lifetimes)
        return (route, connection)
    }

    private func respondAndClose(_ stream: any ByteStream, _ response: HTTPResponse) async {
        var response = response
        if !response.headers.containsToken("close", for: "Connection") { response.headers.add("Connection", "close") }
        try? await stream.write(response.serialized())
        await stream.shutdownOutput()
        await stream.close()
    }
}

/// A re-armable timer that closes a stream when it fires (drops slow or silent clients).
final class Deadline: Sendable {
    private let stream: TCPStream
    private let timer = LockedValue<Task<Void, Never>?>(nil)

    init(stream: TCPStream) {
        self.stream = stream
    }

    func arm(_ timeout: Duration) {
        let stream = self.stream
        let task = Task {
            do { try await Task.sleep(for: timeout) } catch { return }
            stream.closeNow()
        }
        let old = timer.withLock { t -> Task<Void, Never>? in
            let old = t
            t = task
            return old
        }
        old?.cancel()
    }

    func cancel() {
        timer.withLock { t in
            t?.cancel()
            t = nil
        }
    }
}
