import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncTestSupport
import PeerSyncTransport
import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

/// Interop with an independent implementation: Python `websockets` (see ``PythonPeer`` for
/// the set-up). These tests fail, never skip, when Python or `websockets` is missing.
@Suite("Interop with Python websockets", .timeLimit(.minutes(3)))
struct InteropTests {
    static let blip = ["BLIP_3+CBMobile_2", "BLIP_3+CBMobile_3"]

    func tlsFiles() throws -> [String: String] {
        let identity = try TestIdentities.server()
        return ["cert": identity.certificatesPEM(), "key": try identity.privateKeyPEM(password: nil),
                "cafile": identity.certificatesPEM()]
    }

    // MARK: Python client → our server

    @Test("Python client against our server: subprotocol, echo, fragmentation both ways, ping, close code", arguments: [false, true])
    func pythonClient(tls: Bool) async throws {
        var connection = WebSocketConfiguration()
        connection.fragmentSize = 4096
        let server = try await startEchoServer(tls: tls, subprotocols: Self.blip, connection: connection)
        defer { Task { await server.stop() } }
        var arguments: [String: any Sendable] = [
            "url": "\(tls ? "wss" : "ws")://127.0.0.1:\(server.port)/db/_blipsync",
            "subprotocols": ["chat", "BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"],
            "expectSubprotocol": "BLIP_3+CBMobile_3",
            "serverCloseCode": 4002,
        ]
        var files: [String: String] = [:]
        if tls { files["cafile"] = try tlsFiles()["cafile"] }
        arguments["tls"] = tls
        let python = try await PythonProcess.start(mode: "client", arguments: arguments, files: files)
        defer { python.stop() }
        let ok = try await python.waitForLine(prefix: "OK")
        // "OK <n>": the 10000-byte echo arrived in n > 1 frames.
        let frames = Int(ok.split(separator: " ").last ?? "") ?? 0
        #expect(frames == 3)
        #expect(try await python.waitForExit() == 0)
    }

    @Test("Python client offering no supported subprotocol gets 400")
    func pythonClientWrongSubprotocol() async throws {
        let server = try await startEchoServer(subprotocols: Self.blip)
        defer { Task { await server.stop() } }
        let python = try await PythonProcess.start(mode: "client", arguments: [
            "url": "ws://127.0.0.1:\(server.port)/", "subprotocols": ["chat"], "serverCloseCode": 1000,
        ])
        defer { python.stop() }
        #expect(try await python.waitForLine(prefix: "STATUS") == "STATUS 400")
    }

    @Test("Python client's close code and reason reach our server", arguments: [false, true])
    func pythonClientCloses(tls: Bool) async throws {
        let seen = ConnectionBox()
        let done = AsyncLatch()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        if tls { configuration.tls = try TestIdentities.serverTLS() }
        let route = WebSocketRoute(path: nil) { connection in
            seen.set(connection)
            await echo(connection)
            done.open()
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }
        var files: [String: String] = [:]
        if tls { files["cafile"] = try tlsFiles()["cafile"] }
        let python = try await PythonProcess.start(mode: "client-close", arguments: [
            "url": "\(tls ? "wss" : "ws")://127.0.0.1:\(server.port)/", "code": 4005,
        ], files: files)
        defer { python.stop() }
        #expect(try await python.waitForLine(prefix: "CLIENT-CLOSED") == "CLIENT-CLOSED 4005")
        try await withTimeout(30) { await done.wait() }
        #expect(seen.get()?.closeInfo == CloseInfo(code: 4005, reason: "python says bye"))
    }

    // MARK: Our client → Python server

    func startPythonServer(tls: Bool, subprotocols: [String] = [], acceptNoSubprotocol: Bool = false) async throws -> (PythonProcess, Int) {
        var arguments: [String: any Sendable] = ["subprotocols": subprotocols, "acceptNoSubprotocol": acceptNoSubprotocol]
        var files: [String: String] = [:]
        if tls {
            let all = try tlsFiles()
            files["cert"] = all["cert"]
            files["key"] = all["key"]
        }
        arguments["tls"] = tls
        let python = try await PythonProcess.start(mode: "server", arguments: arguments, files: files)
        let line = try await python.waitForLine(prefix: "PORT")
        guard let port = Int(line.dropFirst(5)) else {
            python.stop()
            throw PeerSyncError(.internalError, "bad port line \(line)")
        }
        return (python, port)
    }

    @Test("our client against a Python server: subprotocol, echo, fragmentation, ping/pong, close codes", arguments: [false, true])
    func ourClient(tls: Bool) async throws {
        let (python, port) = try await startPythonServer(tls: tls, subprotocols: ["p2", "p1"])
        defer { python.stop() }
        var options = try clientOptions(tls: tls)
        options.subprotocols = ["p1", "p2"]
        options.headers = ["X-Custom": "from-swift"]
        options.connection.fragmentSize = 1500
        options.connection.heartbeatInterval = .milliseconds(200)
        // Not shorter: on a loaded machine the Python peer can take seconds to answer a ping.
        options.connection.deadPeerTimeout = .seconds(5)
        let url = "\(tls ? "wss" : "ws")://127.0.0.1:\(port)/"
        let c = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: url), options: options)
        // Python's server picks by its own preference order; we accept any protocol we offered.
        #expect(c.subprotocol == "p2")
        #expect(c.peerCertificateChain.isEmpty == !tls)
        try await c.send(text: "subprotocol?")
        #expect(try await c.receive() == .text("p2"))
        try await c.send(text: "header?")
        #expect(try await c.receive() == .text("from-swift"))
        // Our fragmented sends (1500-byte frames) are reassembled by Python.
        let big = (0..<50_000).map { UInt8(truncatingIfNeeded: $0 * 11) }
        try await c.send(.binary(big))
        #expect(try await c.receive() == .binary(big))
        let text = String(repeating: "ünïcødé ", count: 1000)
        try await c.send(text: text)
        #expect(try await c.receive() == .text(text))
        // Python's fragmented sends are reassembled by us.
        try await c.send(text: "frag:5")
        #expect(try await c.receive() == .text("part0;part1;part2;part3;part4;"))
        try await c.send(text: "fragbin:3")
        #expect(try await c.receive() == .binary([UInt8](repeating: 0, count: 1000) + [UInt8](repeating: 1, count: 1000) + [UInt8](repeating: 2, count: 1000)))
        // Python pings us; our pong arrives.
        try await c.send(text: "ping")
        #expect(try await c.receive() == .text("pong-received"))
        // Our heartbeat pings (every 200 ms) are answered: silence longer than the dead-peer
        // timeout does not kill the link.
        try await Task.sleep(for: .milliseconds(5500))
        #expect(c.closeInfo == nil)
        try await c.send(text: "alive")
        #expect(try await c.receive() == .text("alive"))
        // Our close code reaches Python.
        await c.close(code: 4010, reason: "swift bye")
        #expect(c.closeInfo == CloseInfo(code: 4010, reason: "swift bye"))
        #expect(try await python.waitForLine(prefix: "CLOSED") == "CLOSED 4010 swift bye")

        // Python's close code reaches us.
        let c2 = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: url), options: options)
        try await c2.send(text: "close:4011")
        #expect(try await c2.receive() == nil)
        #expect(c2.closeInfo == CloseInfo(code: 4011, reason: "python closing"))
    }

    @Test("our client fails cleanly when the Python server accepts none of its subprotocols")
    func ourClientSubprotocolRejected() async throws {
        // Accepts without choosing a subprotocol.
        let (lenient, lenientPort) = try await startPythonServer(tls: false, subprotocols: ["other"], acceptNoSubprotocol: true)
        defer { lenient.stop() }
        var options = try clientOptions()
        options.subprotocols = ["BLIP_3+CBMobile_3"]
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://127.0.0.1:\(lenientPort)/"), options: options)
            Issue.record("connected without an accepted subprotocol")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketSubprotocolRejected)
        }
        // Refuses with 400.
        let (strict, strictPort) = try await startPythonServer(tls: false, subprotocols: ["other"])
        defer { strict.stop() }
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://127.0.0.1:\(strictPort)/"), options: options)
            Issue.record("connected to a server that refused the subprotocols")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketHandshakeFailed)
            #expect(error.context["status"] == "400")
        }
    }
}
