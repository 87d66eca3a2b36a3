import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncTransportTesting
@testable import PeerSyncWebSocket
import Testing

/// A self-signed server identity for 127.0.0.1, created once per test process.
enum TestIdentities {
    private static let cache = LockedValue<TLSIdentity?>(nil)

    static func server() throws -> TLSIdentity {
        try cache.withLock { cached in
            if let cached { return cached }
            let identity = try TLSIdentity.createIdentity(
                for: [.serverAuth, .clientAuth],
                attributes: [certAttrCommonName: "PeerSync Test", certAttrIPAddress: "127.0.0.1", certAttrHostname: "localhost"])
            cached = identity
            return identity
        }
    }

    static func serverTLS() throws -> TLSConfiguration {
        .server(identity: try server())
    }

    /// A client configuration that pins the test server's certificate.
    static func clientTLS() throws -> TLSConfiguration {
        .client(serverName: "127.0.0.1", serverTrust: .pinned(try server().certificate))
    }
}

/// Starts a server with one echo route (any path) and returns it.
func startEchoServer(tls: Bool = false, subprotocols: [String] = [], requireSubprotocol: Bool = true,
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

/// Echoes every message until the connection ends; echoes "close:<code>" as a close.
func echo(_ connection: WebSocketConnection) async {
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

func clientOptions(tls: Bool = false) throws -> WebSocketClientOptions {
    var options = WebSocketClientOptions()
    if tls { options.tls = try TestIdentities.clientTLS() }
    // Generous: these only bound a failure, and CI machines can be heavily loaded (and
    // sanitized builds are many times slower).
    options.connectTimeout = TestTiming.slow(.seconds(20))
    options.handshakeTimeout = TestTiming.slow(.seconds(20))
    return options
}

func endpoint(_ server: WebSocketServer, tls: Bool = false, path: String = "/echo") throws -> Endpoint {
    try Endpoint(url: "\(tls ? "wss" : "ws")://127.0.0.1:\(server.port)\(path)")
}

/// The number of threads of this process.
func threadCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
}

/// The names of this process's threads (at most 15 characters each, as the kernel keeps them).
func threadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
        .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// Resident memory of this process in MiB.
func residentMegabytes() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return -1 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? -1
        return kb / 1024
    }
    return -1
}

/// Runs `body` with a time limit; records an issue and throws if it is exceeded.
func withTimeout<T: Sendable>(_ seconds: Double, _ what: String = "operation",
                              _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        guard let first = try await group.next() else { throw PeerSyncError(.internalError, "no result") }
        group.cancelAll()
        guard let value = first else {
            throw PeerSyncError(.timeout, "\(what) did not finish within \(seconds) s")
        }
        return value
    }
}

/// A raw TCP client for sending hand-made bytes to a server.
struct RawClient {
    let stream: TCPStream

    static func connect(port: Int) async throws -> RawClient {
        RawClient(stream: try await TCPStream.connect(host: "127.0.0.1", port: port, timeout: .seconds(20)))
    }

    func send(_ text: String) async throws { try await stream.write(Array(text.utf8)) }
    func send(_ bytes: [UInt8]) async throws { try await stream.write(bytes) }

    /// Reads one HTTP response (head and body).
    func readResponse(timeout: Double = 20) async throws -> HTTPResponse {
        let stream = self.stream
        return try await withTimeout(timeout, "reading a response") {
            var parser = HTTPResponseParser()
            while true {
                guard let bytes = try await stream.read(maxBytes: 65536) else {
                    if let response = try parser.finish() { return response }
                    throw PeerSyncError(.connectionClosed, "closed before a response")
                }
                parser.feed(bytes)
                if let response = try parser.next() { return response }
            }
        }
    }

    /// Upgrades with a valid handshake; returns bytes received after the 101.
    func upgrade(path: String = "/", extraHeaders: String = "") async throws -> (HTTPResponse, [UInt8]) {
        try await send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\(extraHeaders)\r\n")
        var parser = HTTPResponseParser()
        while true {
            guard let bytes = try await stream.read(maxBytes: 65536) else {
                throw PeerSyncError(.connectionClosed, "closed during upgrade")
            }
            parser.feed(bytes)
            if let response = try parser.next() { return (response, parser.takeRemainder()) }
        }
    }

    /// Reads frames (as a client: unmasked expected) until a close frame or end of stream.
    func readUntilClose(initial: [UInt8] = [], timeout: Double = 20) async throws -> (events: [WebSocketFrameDecoder.Event], ended: Bool) {
        let stream = self.stream
        return try await withTimeout(timeout, "reading until close") {
            var decoder = WebSocketFrameDecoder(role: .client, maxMessageSize: 1 << 24)
            decoder.feed(initial)
            var events: [WebSocketFrameDecoder.Event] = []
            while true {
                while let event = try decoder.next() {
                    events.append(event)
                    if case .close = event { return (events, false) }
                }
                guard let bytes = try await stream.read(maxBytes: 65536) else { return (events, true) }
                decoder.feed(bytes)
            }
        }
    }

    /// Whether the server closed the connection (EOF or reset) within `timeout`.
    func isClosedByServer(timeout: Double = 20) async -> Bool {
        let stream = self.stream
        return (try? await withTimeout(timeout, "waiting for the server to close") {
            while true {
                do {
                    guard try await stream.read(maxBytes: 65536) != nil else { return true }
                } catch {
                    return true
                }
            }
        }) ?? false
    }

    func close() async { await stream.close() }
}

/// A masked client frame (what a client must send) with any first byte — FIN, the RSV bits
/// and the opcode, undefined ones too: the encoder's frame (tested against the RFC in
/// PeerSyncWebSocketCodecTests) with its first byte replaced.
func clientFrame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, rsv: UInt8 = 0) -> [UInt8] {
    var frame = WebSocketFrameEncoder.encode(opcode: .binary, payload: payload, mask: 0x1234_5678)
    frame[0] = (fin ? 0x80 : 0) | (rsv << 4) | opcode
    return frame
}
