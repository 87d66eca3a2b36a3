import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTestSupport
import PeerSyncTransport
@testable import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

@Suite("WebSocket client and server", .timeLimit(.minutes(2)))
struct WebSocketTests {
    @Test("echo over ws:// and wss://: text, binary, empty, large", arguments: [false, true])
    func echoRoundTrip(tls: Bool) async throws {
        let server = try await startEchoServer(tls: tls)
        defer { Task { await server.stop() } }
        let connection = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: tls), options: try clientOptions(tls: tls))
        #expect(connection.kind == .webSocket)
        #expect(connection.remoteAddress == "127.0.0.1:\(server.port)")
        #expect(connection.peerCertificateChain.isEmpty == !tls)
        let messages: [TransportMessage] = [
            .text("héllo"), .binary([1, 2, 3]), .binary([]), .text(""),
            .binary((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }),
            .text(String(repeating: "€", count: 50_000)),
        ]
        for message in messages {
            try await connection.send(message)
            #expect(try await connection.receive() == message)
        }
        await connection.close()
        #expect(connection.closeInfo?.code == .normal)
        #expect(try await connection.receive() == nil)
    }

    @Test("a ws:// client of a wss:// server fails its handshake with a hint to use wss://")
    func plainClientOfATLSServer() async throws {
        let server = try await startEchoServer(tls: true)
        defer { Task { await server.stop() } }
        let error = await #expect(throws: PeerSyncError.self) {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: false))
        }
        #expect(error?.code == .webSocketHandshakeFailed)
        #expect(error?.message.contains("use wss://") == true, "\(error?.message ?? "-")")
    }

    @Test("IPv6 loopback and a dual-stack listener")
    func ipv6() async throws {
        let server = try await startEchoServer(configure: { $0.host = "::1" })
        defer { Task { await server.stop() } }
        #expect(server.host == "::1")
        let connection = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://[::1]:\(server.port)/x"))
        try await connection.send(text: "v6")
        #expect(try await connection.receive() == .text("v6"))
        #expect(connection.remoteAddress == "[::1]:\(server.port)")
        await connection.close()

        // host nil: every address, IPv4 and IPv6.
        let any = try await startEchoServer(configure: { $0.host = nil })
        defer { Task { await any.stop() } }
        for url in ["ws://127.0.0.1:\(any.port)/", "ws://[::1]:\(any.port)/", "ws://localhost:\(any.port)/"] {
            let c = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: url))
            try await c.send(text: url)
            #expect(try await c.receive() == .text(url))
            await c.close()
        }
    }

    @Test("bind to an interface")
    func interfaceBinding() async throws {
        let server = try await startEchoServer(configure: { $0.host = nil; $0.interface = "lo" })
        defer { Task { await server.stop() } }
        #expect(server.host == "127.0.0.1")
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server))
        try await c.send(text: "lo")
        #expect(try await c.receive() == .text("lo"))
        await c.close()
        await #expect(throws: PeerSyncError.self) {
            _ = try await startEchoServer(configure: { $0.interface = "no-such-interface0" })
        }
    }

    @Test("port 0 picks distinct free ports; a taken port fails with addressInUse")
    func ports() async throws {
        let a = try await startEchoServer()
        let b = try await startEchoServer()
        defer { Task { await a.stop(); await b.stop() } }
        #expect(a.port != 0 && b.port != 0 && a.port != b.port)
        do {
            _ = try await startEchoServer(configure: { $0.port = a.port })
            Issue.record("bound a taken port")
        } catch let error as PeerSyncError {
            #expect(error.code == .addressInUse)
        }
    }

    @Test("connection refused and unknown host are typed errors")
    func connectErrors() async throws {
        let server = try await startEchoServer()
        let port = server.port
        await server.stop()
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://127.0.0.1:\(port)/"))
            Issue.record("connected to a closed port")
        } catch let error as PeerSyncError {
            #expect(error.code == .connectionRefused)
        }
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://no-such-host.invalid:80/"))
            Issue.record("resolved an invalid host")
        } catch let error as PeerSyncError {
            #expect(error.code == .hostNotFound)
        }
        do {
            _ = try await WebSocketTransport().connect(to: try Endpoint(url: "loopback://x"))
            Issue.record("accepted a foreign scheme")
        } catch let error as PeerSyncError {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test("subprotocol negotiation: server picks the client's first supported one")
    func subprotocolChoice() async throws {
        let server = try await startEchoServer(subprotocols: ["BLIP_3+CBMobile_2", "BLIP_3+CBMobile_3"])
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.subprotocols = ["BLIP_3+CBMobile_4", "BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"]
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        #expect(c.subprotocol == "BLIP_3+CBMobile_3")
        await c.close()

        // None supported: the server refuses with 400, the client fails cleanly.
        options.subprotocols = ["chat"]
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
            Issue.record("connected without a common subprotocol")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketHandshakeFailed)
            #expect(error.context["status"] == "400")
        }
    }

    @Test("the client fails cleanly when a server accepts none of its subprotocols")
    func subprotocolNotAccepted() async throws {
        // This server ignores subprotocols (upgrades without one).
        let server = try await startEchoServer()
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.subprotocols = ["BLIP_3+CBMobile_3"]
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
            Issue.record("connected without the required subprotocol")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketSubprotocolRejected)
        }
    }

    @Test("extra request headers reach the server; handshake headers cannot be overridden")
    func extraHeaders() async throws {
        let seen = RecordedRequests()
        let server = try await startEchoServer(authenticate: { request, _ in
            seen.add(request)
            return .accept(user: nil)
        })
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.headers = ["User-Agent": "PeerSyncTests/1", "X-Custom": "42", "Sec-WebSocket-Version": "8"]
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, path: "/db/_blipsync?a=b"), options: options)
        await c.close()
        let request = try #require(seen.all.first)
        #expect(request.headers["User-Agent"] == "PeerSyncTests/1")
        #expect(request.headers["X-Custom"] == "42")
        #expect(request.headers.values(for: "Sec-WebSocket-Version") == ["13"])
        #expect(request.target == "/db/_blipsync?a=b")
        #expect(request.headers["Host"] == "127.0.0.1:\(server.port)")

        options.headers = ["X-Bad": "a\r\nInjected: yes"]
        await #expect(throws: PeerSyncError.self) {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        }
    }

    @Test("Basic auth: 401 challenge answered by one retry with credentials")
    func basicAuth() async throws {
        let seen = RecordedRequests()
        let verify = WebSocketRoute.basicAuthentication(realm: "PeerSync") { user, password in
            user == "alice" && password == "s3cret"
        }
        let server = try await startEchoServer(authenticate: { request, context in
            seen.add(request)
            return await verify(request, context)
        })
        defer { Task { await server.stop() } }

        // No credentials: unauthorized after one request.
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: try clientOptions())
            Issue.record("connected without credentials")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketUnauthorized)
        }
        #expect(seen.all.count == 1)
        #expect(seen.all.first?.headers["Authorization"] == nil)

        // Right credentials: first request without, retry with Authorization.
        var options = try clientOptions()
        options.credentials = BasicAuthenticator(username: "alice", password: "s3cret")
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        #expect(seen.all.count == 3)
        #expect(seen.all[1].headers["Authorization"] == nil)
        #expect(seen.all[2].headers["Authorization"] == "Basic YWxpY2U6czNjcmV0")
        try await c.send(text: "authed")
        #expect(try await c.receive() == .text("authed"))
        await c.close()

        // Wrong credentials: exactly one retry, then a typed error.
        options.credentials = BasicAuthenticator(username: "alice", password: "wrong")
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
            Issue.record("connected with wrong credentials")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketUnauthorized)
        }
        #expect(seen.all.count == 5)
    }

    @Test("server-side user from the auth hook is exposed on the connection")
    func authenticatedUser() async throws {
        let accepted = ConnectionBox()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        let route = WebSocketRoute(path: "/*/_blipsync", authenticate: WebSocketRoute.basicAuthentication(realm: "r") { u, p in
            u == "bob" && p == "pw"
        }) { connection in
            accepted.set(connection)
            await echo(connection)
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.credentials = BasicAuthenticator(username: "bob", password: "pw")
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, path: "/mydb/_blipsync"), options: options)
        try await c.send(text: "x")
        _ = try await c.receive()
        #expect(accepted.get()?.authenticatedUser == "bob")
        #expect(accepted.get()?.handshakeRequest?.path == "/mydb/_blipsync")
        await c.close()
    }

    @Test("fragmented messages in both directions")
    func fragmentation() async throws {
        var serverConnection = WebSocketConfiguration()
        serverConnection.fragmentSize = 1000
        let server = try await startEchoServer(connection: serverConnection)
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.connection.fragmentSize = 777
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        let big = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 13) }
        try await c.send(.binary(big))
        #expect(try await c.receive() == .binary(big))
        let text = String(repeating: "añb€😀", count: 3000)
        try await c.send(text: text)
        #expect(try await c.receive() == .text(text))
        await c.close()
    }

    @Test("ping/pong and dead-peer detection")
    func heartbeat() async throws {
        // A server that upgrades and then never reads: pings go unanswered.
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        let holder = ConnectionBox()
        let route = WebSocketRoute(path: nil) { connection in holder.set(connection) }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }

        // Live peer: heartbeats flow, the connection stays up past several intervals.
        var options = try clientOptions()
        options.connection.heartbeatInterval = .milliseconds(100)
        options.connection.deadPeerTimeout = .seconds(5)
        let live = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        try await Task.sleep(for: .milliseconds(800))
        #expect(live.closeInfo == nil)
        await live.close()
        options.connection.deadPeerTimeout = .milliseconds(500)

        // Dead peer: a raw TCP server that accepts the upgrade and then goes silent.
        let silent = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        defer { silent.close() }
        let acceptTask = Task { () -> TCPStream? in
            guard let tcp = try? await silent.accept() else { return nil }
            var parser = HTTPRequestParser()
            while true {
                guard let bytes = try? await tcp.read(maxBytes: 4096) else { return tcp }
                parser.feed(bytes)
                if let request = try? parser.next(),
                   case .success(let upgrade) = WebSocketHandshake.validateUpgradeRequest(request) {
                    try? await tcp.write(WebSocketHandshake.switchingProtocolsResponse(key: upgrade.key, subprotocol: nil).serialized())
                    return tcp  // and never read again
                }
            }
        }
        let dead = try await WebSocketTransport().connectWebSocket(
            to: try Endpoint(url: "ws://127.0.0.1:\(silent.port)/"), options: options)
        do {
            let message = try await withTimeout(20, "dead-peer detection") { try await dead.receive() }
            Issue.record("receive returned \(String(describing: message)) instead of failing")
        } catch let error as PeerSyncError {
            #expect(error.code == .timeout)
        }
        #expect(dead.closeInfo?.code == .abnormalClosure)
        await acceptTask.value?.close()
    }

    @Test("explicit ping is answered by the peer's pong")
    func explicitPing() async throws {
        let server = try await startEchoServer()
        defer { Task { await server.stop() } }
        let raw = try await RawClient.connect(port: server.port)
        let (response, rest) = try await raw.upgrade()
        #expect(response.status == 101)
        try await raw.send(clientFrame(0x9, [1, 2, 3]))
        try await raw.send(clientFrame(0x8, [0x03, 0xE8]))
        let (events, _) = try await raw.readUntilClose(initial: rest)
        #expect(events.first == .pong([1, 2, 3]))
        #expect(events.last == .close(code: 1000, reason: ""))
        await raw.close()
    }

    @Test("close codes and reasons travel both ways; unsendable codes become 1000")
    func closeCodes() async throws {
        let server = try await startEchoServer()
        defer { Task { await server.stop() } }
        // Server-initiated close with 4001.
        let c1 = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: try clientOptions())
        try await c1.send(text: "close:4001")
        #expect(try await c1.receive() == nil)
        #expect(c1.closeInfo == CloseInfo(code: 4001, reason: "asked to"))

        // Client-initiated with a reason; the server sees it.
        let seen = ConnectionBox()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        let finished = AsyncLatch()
        let route = WebSocketRoute(path: nil) { connection in
            seen.set(connection)
            _ = try? await connection.receive()
            finished.open()
        }
        let s2 = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await s2.stop() } }
        let c2 = try await WebSocketTransport().connectWebSocket(to: try endpoint(s2))
        await c2.close(code: .policyViolation, reason: "because")
        #expect(c2.closeInfo == CloseInfo(code: .policyViolation, reason: "because"))
        try await withTimeout(20) { await finished.wait() }
        #expect(seen.get()?.closeInfo == CloseInfo(code: .policyViolation, reason: "because"))

        let c3 = try await WebSocketTransport().connectWebSocket(to: try endpoint(server))
        await c3.close(code: .abnormalClosure, reason: "")
        #expect(c3.closeInfo?.code == .normal)
        await #expect(throws: PeerSyncError.self) { try await c3.send(text: "after close") }
    }

    @Test("maximum message size: too-large send throws and the connection stays usable; too-large receive closes with 1009")
    func maxMessageSize() async throws {
        var serverConfig = WebSocketConfiguration()
        serverConfig.maxMessageSize = 1000
        let server = try await startEchoServer(connection: serverConfig)
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.connection.maxMessageSize = 2000
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        do {
            try await c.send(.binary([UInt8](repeating: 0, count: 2001)))
            Issue.record("sent a message over the limit")
        } catch let error as PeerSyncError {
            #expect(error.code == .tooLarge)
        }
        try await c.send(.binary([UInt8](repeating: 1, count: 1000)))
        #expect(try await c.receive()?.byteCount == 1000)
        // 1500 bytes: allowed by the client, too big for the server.
        try await c.send(.binary([UInt8](repeating: 2, count: 1500)))
        #expect(try await c.receive() == nil)
        #expect(c.closeInfo?.code == .messageTooBig)
    }

    @Test("backpressure: a sender suspends while the peer does not read, memory stays bounded")
    func backpressure() async throws {
        let release = AsyncLatch()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.connection.receiveBufferMessages = 4
        let received = Counter()
        let route = WebSocketRoute(path: nil) { connection in
            await release.wait()
            while let _ = try? await connection.receive() { received.add(1) }
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.connection.sendBufferBytes = 64 * 1024
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        let sent = Counter()
        let sender = Task {
            for _ in 0..<2000 {
                try await c.send(.binary([UInt8](repeating: 7, count: 64 * 1024)))
                sent.add(1)
            }
        }
        // Wait until the sender makes no progress for 500 ms (it is suspended).
        var stalled = -1
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let before = sent.value
            try await Task.sleep(for: .milliseconds(500))
            if sent.value == before {
                stalled = before
                break
            }
        }
        // 2000 × 64 KiB = 125 MiB: what was accepted must stay within our buffers plus the
        // kernel's socket buffers (a few MiB each way), far below that.
        #expect(stalled >= 0, "the sender never stalled")
        #expect(stalled * 64 * 1024 < 32 << 20, "\(stalled) messages accepted while the peer reads nothing")
        release.open()
        try await withTimeout(60, "draining") { try await sender.value }
        #expect(sent.value == 2000)
        await c.close()
    }

    @Test("a send cancelled while waiting for room throws cancelled; the connection stays intact")
    func cancelledSend() async throws {
        let release = AsyncLatch()
        let received = RecordedMessages()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.connection.receiveBufferMessages = 4
        let route = WebSocketRoute(path: nil) { connection in
            await release.wait()
            while let message = try? await connection.receive() {
                received.add(message)
                if message == .text("last") { return }
            }
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }
        var options = try clientOptions()
        options.connection.sendBufferBytes = 16 * 1024
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: options)
        // Fill every buffer with 1 KiB messages (these go through the writer's queue).
        let sent = Counter()
        let filler = Task {
            var i = 0
            while true {
                try await c.send(.binary([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 1024)))
                i += 1
                sent.add(1)
            }
        }
        var last = -1
        while last != sent.value {
            last = sent.value
            try await Task.sleep(for: .milliseconds(500))
        }
        filler.cancel()
        do {
            try await filler.value
            Issue.record("the blocked send did not throw")
        } catch let error as PeerSyncError {
            #expect(error.code == .cancelled)
        }
        // The connection is still usable: the server reads again, one more message goes through.
        release.open()
        try await c.send(text: "last")
        try await withTimeout(30, "draining") {
            while !received.all.contains(.text("last")) { try await Task.sleep(for: .milliseconds(20)) }
        }
        // Every message arrived whole and in order; the cancelled one was not sent.
        let binaries = received.all.dropLast()
        #expect(binaries.count == sent.value)
        for (i, message) in binaries.enumerated() {
            #expect(message == .binary([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 1024)))
        }
        await c.close()
    }

    @Test("WebSocketTransport listen/accept with a path; non-matching paths get 404")
    func listenerPath() async throws {
        let transport = WebSocketTransport()
        let listener = try await transport.listenWebSocket(on: try Endpoint(url: "ws://127.0.0.1:0/db/_blipsync"))
        #expect(listener.endpoint.port != 0)
        let acceptTask = Task { try await listener.accept() }
        let client = try await transport.connect(to: listener.endpoint)
        let server = try #require(try await acceptTask.value)
        try await client.send(text: "hi")
        #expect(try await server.receive() == .text("hi"))
        await client.close()
        do {
            _ = try await transport.connect(to: try listener.endpoint.with(path: "/other"))
            Issue.record("connected to an unrouted path")
        } catch let error as PeerSyncError {
            #expect(error.code == .webSocketHandshakeFailed)
            #expect(error.context["status"] == "404")
        }
        await listener.close()
        #expect(try await listener.accept() == nil)
    }

    @Test("plain HTTP and WebSocket on the same port")
    func plainHTTPOnSamePort() async throws {
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        let route = WebSocketRoute(path: "/*/_blipsync") { connection in await echo(connection) }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route]) { request, _ in
            if request.path == "/" { return .text(200, "{\"couchdb\":\"Welcome\"}") }
            if request.method == "PUT" { return .text(201, "got \(request.body.count) bytes") }
            return .text(404, "missing")
        }
        defer { Task { await server.stop() } }
        // Two requests on one kept-alive connection, then a body.
        let raw = try await RawClient.connect(port: server.port)
        try await raw.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        let r1 = try await raw.readResponse()
        #expect(r1.status == 200 && String(decoding: r1.body, as: UTF8.self).contains("Welcome"))
        try await raw.send("PUT /db/doc HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n{\"a\"")
        let r2 = try await raw.readResponse()
        #expect(r2.status == 201 && String(decoding: r2.body, as: UTF8.self) == "got 4 bytes")
        try await raw.send("GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(try await raw.readResponse().status == 404)
        #expect(await raw.isClosedByServer())
        await raw.close()
        // And a WebSocket on the route.
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, path: "/db/_blipsync"))
        try await c.send(text: "ws")
        #expect(try await c.receive() == .text("ws"))
        await c.close()
        // A plain GET on the WebSocket path without the handler deciding: handled by handler (404 here).
        let raw2 = try await RawClient.connect(port: server.port)
        try await raw2.send("GET /db/_blipsync HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try await raw2.readResponse().status == 404)
        await raw2.close()
    }

    @Test("stop() drops connections still in their handshake but leaves upgraded ones open")
    func stopServer() async throws {
        let server = try await startEchoServer()
        let upgraded = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: try clientOptions())
        let halfway = try await RawClient.connect(port: server.port)
        try await halfway.send("GET / HTTP/1.1\r\nHost: x\r\n")
        try await Task.sleep(for: .milliseconds(100))
        await server.stop()
        #expect(await halfway.isClosedByServer())
        await halfway.close()
        try await upgraded.send(text: "after stop")
        #expect(try await upgraded.receive() == .text("after stop"))
        await upgraded.close()
        // The port is free again.
        do {
            _ = try await TCPStream.connect(host: "127.0.0.1", port: server.port, timeout: .seconds(5))
            Issue.record("connected to a stopped server")
        } catch let error as PeerSyncError {
            #expect(error.code == .connectionRefused)
        }
    }

    @Test("wss:// with an untrusted certificate fails with a typed TLS error")
    func untrustedServer() async throws {
        let server = try await startEchoServer(tls: true)
        defer { Task { await server.stop() } }
        var options = WebSocketClientOptions()
        options.tls = .client(serverName: "127.0.0.1", serverTrust: .systemRoots)
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: true), options: options)
            Issue.record("trusted a self-signed certificate against the system roots")
        } catch let error as PeerSyncError {
            #expect(error.code == .untrustedCertificate)
        }
        // The server keeps serving.
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: true), options: try clientOptions(tls: true))
        try await c.send(text: "still up")
        #expect(try await c.receive() == .text("still up"))
        await c.close()
    }

    @Test("wss:// with client certificates: the server's hook and connection see the client's chain")
    func clientCertificates() async throws {
        let clientIdentity = try TLSIdentity.createIdentity(for: [.clientAuth], attributes: [certAttrCommonName: "client-7"])
        let seenCommonName = RecordedRequests()
        let accepted = ConnectionBox()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.tls = .server(identity: try TestIdentities.server(), clientCertificateValidation: .callback { chain in
            chain.first?.commonName == "client-7"
        })
        let route = WebSocketRoute(path: nil, authenticate: { request, context in
            if context.isSecure, let name = context.peerCertificateChain.first?.commonName {
                var tagged = request
                tagged.headers.add("X-Client-CN", name)
                seenCommonName.add(tagged)
                return .accept(user: name)
            }
            return .reject(status: 403, message: "client certificate required")
        }) { connection in
            accepted.set(connection)
            await echo(connection)
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        defer { Task { await server.stop() } }
        var options = try clientOptions(tls: true)
        options.tls?.identity = clientIdentity
        let c = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: true), options: options)
        try await c.send(text: "mtls")
        #expect(try await c.receive() == .text("mtls"))
        #expect(seenCommonName.all.first?.headers["X-Client-CN"] == "client-7")
        #expect(accepted.get()?.authenticatedUser == "client-7")
        #expect(accepted.get()?.peerCertificateChain.first == clientIdentity.certificate.derBytes)
        #expect(c.peerCertificateChain.first == (try TestIdentities.server()).certificate.derBytes)
        await c.close()

        // Without a client certificate the TLS handshake fails; the server keeps serving.
        do {
            let refused = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: true), options: try clientOptions(tls: true))
            // With TLS 1.3 the client may learn of the rejection only when it reads.
            _ = try await refused.receive()
            Issue.record("connected without a client certificate")
        } catch {
            #expect(error is PeerSyncError)
        }
        let again = try await WebSocketTransport().connectWebSocket(to: try endpoint(server, tls: true), options: options)
        try await again.send(text: "still")
        #expect(try await again.receive() == .text("still"))
        await again.close()
    }

    @Test("handshake timeout on the client against a server that never answers")
    func clientHandshakeTimeout() async throws {
        let silent = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        defer { silent.close() }
        let holder = Task { try? await silent.accept() }
        var options = WebSocketClientOptions()
        options.handshakeTimeout = .milliseconds(300)
        do {
            _ = try await WebSocketTransport().connectWebSocket(to: try Endpoint(url: "ws://127.0.0.1:\(silent.port)/"), options: options)
            Issue.record("handshake with a silent server succeeded")
        } catch let error as PeerSyncError {
            #expect(error.code == .timeout)
        }
        await holder.value?.close()
    }
}

// MARK: - Small test helpers

final class RecordedRequests: Sendable {
    private let requests = LockedValue<[HTTPRequest]>([])
    func add(_ request: HTTPRequest) { requests.withLock { $0.append(request) } }
    var all: [HTTPRequest] { requests.withLock { $0 } }
}

final class RecordedMessages: Sendable {
    private let messages = LockedValue<[TransportMessage]>([])
    func add(_ message: TransportMessage) { messages.withLock { $0.append(message) } }
    var all: [TransportMessage] { messages.withLock { $0 } }
}

final class Counter: Sendable {
    private let count = LockedValue(0)
    func add(_ n: Int) { count.withLock { $0 += n } }
    var value: Int { count.withLock { $0 } }
}
