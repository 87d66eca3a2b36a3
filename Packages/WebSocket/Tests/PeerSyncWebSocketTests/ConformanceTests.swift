import PeerSyncCore
import PeerSyncTransport
import PeerSyncTransportTesting
@testable import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

/// The transport conformance suite (PeerSyncTransportTesting) over real sockets on 127.0.0.1.
@Suite("Transport conformance over WebSocket", .timeLimit(.minutes(3)))
struct ConformanceTests {
    static func suite(tls: Bool) throws -> TransportConformanceSuite {
        var listenOptions = WebSocketListenOptions()
        var connectOptions = WebSocketClientOptions()
        if tls {
            listenOptions.tls = try TestIdentities.serverTLS()
            connectOptions.tls = try TestIdentities.clientTLS()
        }
        var configuration = TransportConformanceSuite.Configuration()
        configuration.timeout = .seconds(30)
        return TransportConformanceSuite(
            transport: WebSocketTransport(),
            listenOn: try Endpoint(url: tls ? "wss://127.0.0.1:0/conformance" : "ws://127.0.0.1:0/conformance"),
            connectOptions: connectOptions, listenOptions: listenOptions, configuration: configuration,
            drop: { connection in await (connection as? WebSocketConnection)?.abort() })
    }

    @Test("ws://", arguments: TransportConformanceSuite.caseNames)
    func ws(_ name: String) async throws {
        try await Self.suite(tls: false).run(name)
    }

    @Test("wss://", arguments: TransportConformanceSuite.caseNames)
    func wss(_ name: String) async throws {
        try await Self.suite(tls: true).run(name)
    }
}
