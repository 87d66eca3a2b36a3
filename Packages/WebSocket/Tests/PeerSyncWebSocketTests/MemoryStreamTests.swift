import Foundation
import PeerSyncCore
import PeerSyncTestSupport
import PeerSyncTransport
import PeerSyncWebSocket
import Testing

/// WebSocket framing over an in-memory byte-stream pair (no socket, no handshake): the
/// connection's contract on any ``ByteStream``.
@Suite(.timeLimit(.minutes(1))) struct MemoryStreamTests {
    /// A client and a server connection on the two ends of one in-memory pair.
    static func connectedPair(client: WebSocketConfiguration = WebSocketConfiguration(),
                              server: WebSocketConfiguration = WebSocketConfiguration())
        -> (client: WebSocketConnection, server: WebSocketConnection) {
        let pair = ByteStreamPair()
        return (WebSocketConnection(stream: pair.a, role: .client, configuration: client),
                WebSocketConnection(stream: pair.b, role: .server, configuration: server))
    }

    @Test func messagesBothWaysAndFragmentedMessagesArriveWhole() async throws {
        var fragmenting = WebSocketConfiguration()
        fragmenting.fragmentSize = 1000
        let (client, server) = Self.connectedPair(client: fragmenting, server: fragmenting)
        let big = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try await client.send(.text("hello"))
        try await client.send(.binary(big))
        #expect(try await server.receive() == .text("hello"))
        #expect(try await server.receive() == .binary(big))
        try await server.send(.text("über"))
        #expect(try await client.receive() == .text("über"))
        await client.close(code: .normal, reason: "done")
        #expect(try await server.receive() == nil)
    }

    /// The close code and reason of one side reach the other.
    @Test func closeCodeAndReasonReachThePeer() async throws {
        let (client, server) = Self.connectedPair()
        await server.close(code: CloseCode(rawValue: 4001), reason: "bye")
        #expect(try await client.receive() == nil)
        #expect(client.closeInfo?.code == CloseCode(rawValue: 4001))
        #expect(client.closeInfo?.reason == "bye")
    }

    /// A message over the receiver's limit closes the connection with 1009 (message too big).
    @Test func anOversizeMessageClosesWith1009() async throws {
        var small = WebSocketConfiguration()
        small.maxMessageSize = 1024
        let (client, server) = Self.connectedPair(server: small)
        try await client.send(.binary([UInt8](repeating: 7, count: 2000)))
        await #expect(throws: (any Error).self) { _ = try await server.receive() }
        #expect(try await client.receive() == nil)
        #expect(client.closeInfo?.code == .messageTooBig)
    }

    /// An unmasked frame from a client breaks RFC 6455 (§5.1): the server closes with 1002.
    @Test func anUnmaskedClientFrameIsAProtocolError() async throws {
        let pair = ByteStreamPair()
        let server = WebSocketConnection(stream: pair.b, role: .server)
        try await pair.a.write([0x81, 0x02, UInt8(ascii: "h"), UInt8(ascii: "i")])   // FIN text "hi", no mask
        _ = try? await server.receive()
        #expect(server.closeInfo?.code == .protocolError)
        // The server's close frame: opcode 8 (FIN set), unmasked, status 1002 first.
        var received: [UInt8] = []
        while received.count < 4, let chunk = try await pair.a.read(maxBytes: 256) { received += chunk }
        #expect(Array(received.prefix(4)) == [0x88, received.count > 1 ? received[1] : 0, 0x03, 0xEA])
        #expect(received.count > 1 && received[1] & 0x80 == 0, "a server must not mask its frames")
        await pair.a.close()
    }
}
