import PeerSyncAuth
import PeerSyncCore
import PeerSyncTransport
import PeerSyncTransportTesting
import PeerSyncWebSocket

// What the WebSocket unit tests (PeerSyncWebSocketTests) and the interop tests with Python
// `websockets` (Tests/PeerSyncInteropTests) share: a test server identity, an echo server and
// client options with generous timeouts. Test code only, in no product.

/// A self-signed server identity for 127.0.0.1, created once per test process.
public enum TestIdentities {
    private static let cache = LockedValue<TLSIdentity?>(nil)

    /// The identity (created on first use): CN "PeerSync Test", IP SAN 127.0.0.1, DNS SAN
    /// localhost, for server and client authentication.
    public static func server() throws -> TLSIdentity {
        try cache.withLock { cached in
            if let cached { return cached }
            let identity = try TLSIdentity.createIdentity(
                for: [.serverAuth, .clientAuth],
                attributes: [certAttrCommonName: "PeerSync Test", certAttrIPAddress: "127.0.0.1", certAttrHostname: "localhost"])
            cached = identity
            return identity
        }
    }

    /// A server TLS configuration presenting ``server()``.
    public static func serverTLS() throws -> TLSConfiguration {
        .server(identity: try server())
    }

    /// A client configuration that pins the test server's certificate.
    public static func clientTLS() throws -> TLSConfiguration {
        .client(serverName: "127.0.0.1", serverTrust: .pinned(try server().certificate))
    }
}

/// Starts a server on 127.0.0.1 (a free port) with one echo route (any path) and returns it;
/// its handshake timeout is stretched by `TestTiming.slowFactor`. `configure` may change the
/// configuration last.
public func startEchoServer(tls: Bool = false, subprotocols: [String] = [], requireSubprotocol: Bool = true,
                            connection: WebSocketConfiguration = WebSocketConfiguration(),
                            authenticate: (@Sendable (HTTPRequest, WebSocketRequestContext) async -> WebSocketAuthResult)? = nil,
                            configure: (inout WebSocketServerConfiguration) -> Void = { _ in }) async throws -> WebSocketServer {
    var configuration = WebSocketServerConfiguration()
    configuration.host = "127.0.0.1"
    configuration.port = 0
    configuration.connection = connection
    configuration.handshakeTimeout = TestTiming.slow(configuration.handshakeTimeout)
    if tls { configuration.tls = try TestIdentities.serverTLS() }
    configure(&configuration)
    let route = WebSocketRoute(path: nil, subprotocols: subprotocols, requireSubprotocol: requireSubprotocol,
                               authenticate: authenticate) { connection in
        await echo(connection)
    }
    return try await WebSocketServer.start(configuration: configuration, routes: [route])
}

/// Echoes every message until the connection ends; echoes "close:<code>" as a close with
/// that code and the reason "asked to".
public func echo(_ connection: WebSocketConnection) async {
    do {
        while let message = try await connection.receive() {
            if case .text(let text) = message, text.hasPrefix("close:"), let code = UInt16(text.dropFirst(6)) {
                await connection.close(code: CloseCode(rawValue: code), reason: "asked to")
                return
            }
            try await connection.send(message)
        }
    } catch {}
}

/// Client options for the test servers: pinning ``TestIdentities`` when `tls`, connect and
/// handshake timeouts of 20 s stretched by `TestTiming.slowFactor`.
public func clientOptions(tls: Bool = false) throws -> WebSocketClientOptions {
    var options = WebSocketClientOptions()
    if tls { options.tls = try TestIdentities.clientTLS() }
    // Generous: these only bound a failure, and CI machines can be heavily loaded (and
    // sanitized builds are many times slower).
    options.connectTimeout = TestTiming.slow(.seconds(20))
    options.handshakeTimeout = TestTiming.slow(.seconds(20))
    return options
}

/// Holds the connection a server route was handed, for the test to inspect. Thread-safe.
public final class ConnectionBox: Sendable {
    private let value = LockedValue<WebSocketConnection?>(nil)
    /// An empty box.
    public init() {}
    /// Keeps `connection` (replacing any earlier one).
    public func set(_ connection: WebSocketConnection) { value.withLock { $0 = connection } }
    /// The connection kept, if any.
    public func get() -> WebSocketConnection? { value.withLock { $0 } }
}
