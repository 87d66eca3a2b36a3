import PeerSyncCore
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket
import PeerSyncWebSocketReplication
import Synchronization
import Testing

/// Couchbase Lite's `SessionAuthenticator` (a Sync Gateway session): the session ID travels as
/// a cookie on the WebSocket upgrade request.
@Suite struct SessionAuthenticatorTests {
    @Test func defaultsToSyncGatewaysCookieName() {
        #expect(SessionAuthenticator(sessionID: "abc").cookieName == "SyncGatewaySession")
        #expect(SessionAuthenticator(sessionID: "abc", cookieName: nil).cookieHeaderValue == "SyncGatewaySession=abc")
        #expect(SessionAuthenticator(sessionID: "abc", cookieName: "MySession").cookieHeaderValue == "MySession=abc")
    }

    /// A server route records the upgrade request's `Cookie` header: the session cookie is
    /// there, after a `Cookie` header given in `headers`; the connection is upgraded.
    @Test func theCookieIsSentOnTheUpgradeRequest() async throws {
        let seen = Mutex<[String?]>([])
        let route = WebSocketRoute(path: "/db/_blipsync", subprotocols: WebSocketReplicatorConnector.subprotocols,
                                   authenticate: { request, _ in
                                       seen.withLock { $0.append(request.headers["Cookie"]) }
                                       return .accept(user: nil)
                                   },
                                   onConnection: { connection in await connection.close(code: .normal, reason: "done") })
        var serverConfig = WebSocketServerConfiguration()
        serverConfig.host = "127.0.0.1"
        let server = try await WebSocketServer.start(configuration: serverConfig, routes: [route])

        var config = ReplicatorConfiguration(target: try Endpoint(url: "ws://127.0.0.1:\(server.port)/db"))
        config.authenticator = SessionAuthenticator(sessionID: "5f1c2a9e0b")
        let first = try await WebSocketReplicatorConnector().connect(config)
        await first.close(code: .normal, reason: "test done")

        config.headers = ["Cookie": "theme=dark"]
        let second = try await WebSocketReplicatorConnector().connect(config)
        await second.close(code: .normal, reason: "test done")
        await server.stop()

        #expect(seen.withLock { $0 } == ["SyncGatewaySession=5f1c2a9e0b", "theme=dark; SyncGatewaySession=5f1c2a9e0b"])
    }

    /// A cookie name or session ID that would split or break the header is refused before any
    /// connection is made.
    @Test(arguments: [("SyncGatewaySession", "a b"), ("SyncGatewaySession", "a;b"), ("SyncGatewaySession", "a\r\nX-Evil: 1"),
                      ("SyncGatewaySession", ""), ("bad name", "abc"), ("", "abc"), ("a=b", "abc")])
    func invalidCookiesAreRefused(_ name: String, _ sessionID: String) throws {
        var config = ReplicatorConfiguration(target: try Endpoint(url: "ws://127.0.0.1:1/db"))
        config.authenticator = SessionAuthenticator(sessionID: sessionID, cookieName: name)
        let error = #expect(throws: PeerSyncError.self) { try WebSocketReplicatorConnector().options(for: config) }
        #expect(error?.code == .invalidArgument)
    }
}
