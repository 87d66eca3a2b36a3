import Foundation
import PeerSyncCore
import PeerSyncTransport
@testable import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

/// Hostile or broken clients against one server: each gets the right HTTP status or close
/// code, and the server keeps serving a well-behaved client afterwards.
@Suite("Bad input on the server", .timeLimit(.minutes(2)))
struct BadInputTests {
    static let key = "dGhlIHNhbXBsZSBub25jZQ=="

    func makeServer() async throws -> WebSocketServer {
        var connection = WebSocketConfiguration()
        connection.maxMessageSize = 64 * 1024
        return try await startEchoServer(connection: connection, configure: {
            $0.maxHeaderBytes = 4096
            $0.handshakeTimeout = .seconds(2)
        })
    }

    /// A good client still gets served.
    func expectServing(_ server: WebSocketServer) async throws {
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server))
        try await c.send(text: "still serving")
        #expect(try await c.receive() == .text("still serving"))
        await c.close()
    }

    func upgradeText(path: String = "/", headers: [(String, String)]) -> String {
        "GET \(path) HTTP/1.1\r\n" + headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
    }

    static let goodHeaders: [(String, String)] = [
        ("Host", "127.0.0.1"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13"),
    ]

    func status(for text: String, server: WebSocketServer) async throws -> HTTPResponse {
        let raw = try await RawClient.connect(port: server.port)
        defer { Task { await raw.close() } }
        try await raw.send(text)
        let response = try await raw.readResponse()
        #expect(await raw.isClosedByServer())
        return response
    }

    @Test("missing or wrong upgrade headers, wrong method and version get 400/405/426")
    func badUpgradeHeaders() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        let good = Self.goodHeaders
        let cases: [([(String, String)], Int)] = [
            (good.filter { $0.0 != "Connection" }, 400),
            (good.map { $0.0 == "Connection" ? ($0.0, "keep-alive") : $0 }, 400),
            (good.filter { $0.0 != "Sec-WebSocket-Key" }, 400),
            (good.map { $0.0 == "Sec-WebSocket-Key" ? ($0.0, "not base64!") : $0 }, 400),
            (good.map { $0.0 == "Sec-WebSocket-Key" ? ($0.0, "c2hvcnQ=") : $0 }, 400),
            (good.filter { $0.0 != "Host" }, 400),
            (good.map { $0.0 == "Sec-WebSocket-Version" ? ($0.0, "8") : $0 }, 426),
            (good.filter { $0.0 != "Sec-WebSocket-Version" }, 426),
        ]
        for (headers, expected) in cases {
            let response = try await status(for: upgradeText(headers: headers), server: server)
            #expect(response.status == expected, "headers \(headers)")
            if expected == 426 { #expect(response.headers["Sec-WebSocket-Version"] == "13") }
        }
        // Without `Upgrade: websocket` it is plain HTTP: a WebSocket-only path answers 426.
        let plain = try await status(for: upgradeText(headers: good.filter { $0.0 != "Upgrade" }), server: server)
        #expect(plain.status == 426)
        let post = try await status(for: upgradeText(headers: good).replacingPrefix("GET", with: "POST"), server: server)
        #expect(post.status == 405)
        let http10 = try await status(for: upgradeText(headers: good).replacingFirst("HTTP/1.1", with: "HTTP/1.0"), server: server)
        #expect(http10.status == 400)
        let http2 = try await status(for: upgradeText(headers: good).replacingFirst("HTTP/1.1", with: "HTTP/2.0"), server: server)
        #expect(http2.status == 505)
        let garbage = try await status(for: "\u{16}\u{03}\u{01} not http at all\r\n\r\n", server: server)
        #expect(garbage.status == 400)
        try await expectServing(server)
    }

    @Test("oversized headers get 431")
    func oversizedHeaders() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        let big = Self.goodHeaders + [("X-Padding", String(repeating: "p", count: 5000))]
        #expect(try await status(for: upgradeText(headers: big), server: server).status == 431)
        // Never-ending header lines are cut off too.
        let raw = try await RawClient.connect(port: server.port)
        try await raw.send("GET / HTTP/1.1\r\nX: " + String(repeating: "y", count: 10_000))
        #expect(try await raw.readResponse().status == 431)
        await raw.close()
        try await expectServing(server)
    }

    /// Upgrades a raw client, sends `bytes`, and returns the server's close frame.
    func closeCode(after bytes: [UInt8], server: WebSocketServer) async throws -> UInt16? {
        let raw = try await RawClient.connect(port: server.port)
        defer { Task { await raw.close() } }
        let (response, rest) = try await raw.upgrade()
        #expect(response.status == 101)
        try? await raw.send(bytes)
        let (events, _) = try await raw.readUntilClose(initial: rest)
        #expect(await raw.isClosedByServer())
        guard case .close(let code, _)? = events.last else { return nil }
        return code
    }

    @Test("unmasked client frames are closed with 1002")
    func unmaskedFrames() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        #expect(try await closeCode(after: WebSocketFrameEncoder.encode(opcode: .text, payload: Array("hi".utf8), mask: nil), server: server) == 1002)
        try await expectServing(server)
    }

    @Test("oversized frames are closed with 1009 before their payload is read")
    func oversizedFrames() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        // Announce 1 GiB, send only the header.
        let header: [UInt8] = [0x82, 0xFF, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 2, 3, 4]
        #expect(try await closeCode(after: header, server: server) == 1009)
        // Fragments adding up to more than the limit.
        let fragments = clientFrame(2, [UInt8](repeating: 1, count: 40_000), fin: false)
            + clientFrame(0, [UInt8](repeating: 1, count: 40_000))
        #expect(try await closeCode(after: fragments, server: server) == 1009)
        try await expectServing(server)
    }

    @Test("invalid UTF-8 in text frames is closed with 1007")
    func invalidUTF8() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        #expect(try await closeCode(after: clientFrame(1, [0x48, 0xC3, 0x28]), server: server) == 1007)
        #expect(try await closeCode(after: clientFrame(8, [0x03, 0xE8, 0xFF, 0xFE]), server: server) == 1007)
        try await expectServing(server)
    }

    @Test("other frame violations are closed with 1002", arguments: [
        clientFrame(0x3, []),                                // reserved opcode
        clientFrame(0x2, [1], rsv: 2),                       // RSV bit
        clientFrame(0x9, [], fin: false),                    // fragmented ping
        clientFrame(0x0, [1]),                               // orphan continuation
        clientFrame(0x8, [0x03, 0xED]),                      // close code 1005 on the wire
    ])
    func frameViolations(bytes: [UInt8]) async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        #expect(try await closeCode(after: bytes, server: server) == 1002)
        try await expectServing(server)
    }

    @Test("a client that sends nothing, or stalls mid-request, is dropped; the server stays up")
    func silentClients() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        let silent = try await RawClient.connect(port: server.port)
        let stalled = try await RawClient.connect(port: server.port)
        try await stalled.send("GET / HTTP/1.1\r\nHost: x\r\n")
        // Meanwhile others are served.
        try await expectServing(server)
        #expect(await silent.isClosedByServer())
        #expect(await stalled.isClosedByServer())
        await silent.close()
        await stalled.close()
        try await expectServing(server)
    }

    @Test("a client that vanishes mid-frame does not disturb the server")
    func vanishingClient() async throws {
        let server = try await makeServer()
        defer { Task { await server.stop() } }
        let raw = try await RawClient.connect(port: server.port)
        _ = try await raw.upgrade()
        try await raw.send(Array(clientFrame(2, [UInt8](repeating: 5, count: 1000)).prefix(300)))
        await raw.close()
        try await expectServing(server)
    }
}

extension String {
    fileprivate func replacingPrefix(_ prefix: String, with other: String) -> String {
        hasPrefix(prefix) ? other + dropFirst(prefix.count) : self
    }
    fileprivate func replacingFirst(_ target: String, with other: String) -> String {
        guard let range = range(of: target) else { return self }
        return replacingCharacters(in: range, with: other)
    }
}
