import PeerSyncAuth
import PeerSyncCore
import PeerSyncTransport
import PeerSyncWebSocket
import Testing

/// The examples of Packages/WebSocket/README.md, verbatim, so they keep compiling and working.
@Suite("README examples", .timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test("echo server with Basic auth and a subprotocol")
    func echoExample() async throws {
        // Server: upgrade /<db>/_blipsync, answer GET / as plain HTTP.
        var serverConfiguration = WebSocketServerConfiguration()
        serverConfiguration.host = "127.0.0.1"
        serverConfiguration.port = 0                       // pick a free port
        let route = WebSocketRoute(
            path: "/*/_blipsync",
            subprotocols: ["BLIP_3+CBMobile_3"],
            authenticate: WebSocketRoute.basicAuthentication(realm: "PeerSync") { user, password in
                user == "alice" && password == "secret"    // compare in constant time in real code
            },
            onConnection: { connection in                  // each upgraded connection, in its own task
                while let message = try? await connection.receive() {
                    try? await connection.send(message)    // echo
                }
            })
        let server = try await WebSocketServer.start(configuration: serverConfiguration, routes: [route]) { request, _ in
            .text(200, "{\"couchdb\":\"Welcome\"}")
        }

        // Client: offers the subprotocol, answers the 401 with credentials.
        var options = WebSocketClientOptions()
        options.subprotocols = ["BLIP_3+CBMobile_3"]
        options.credentials = BasicAuthenticator(username: "alice", password: "secret")
        options.connection.heartbeatInterval = .seconds(30)
        let connection = try await WebSocketTransport().connectWebSocket(
            to: try Endpoint(url: "ws://127.0.0.1:\(server.port)/db/_blipsync"), options: options)
        try await connection.send(text: "hello")
        let reply = try await connection.receive()        // .text("hello")
        await connection.close(code: .normal, reason: "done")
        await server.stop()

        #expect(reply == .text("hello"))
        #expect(connection.subprotocol == "BLIP_3+CBMobile_3")
    }

    @Test("generic Transport use")
    func transportExample() async throws {
        let transport = WebSocketTransport()
        let listener = try await transport.listen(on: try Endpoint(url: "ws://127.0.0.1:0/db/_blipsync"))
        async let incoming = listener.accept()
        let client = try await transport.connect(to: listener.endpoint)   // real port filled in
        let server = try await incoming

        let accepted = try #require(server)
        try await client.send(text: "ping")
        #expect(try await accepted.receive() == .text("ping"))
        await client.close()
        await listener.close()
    }
}
