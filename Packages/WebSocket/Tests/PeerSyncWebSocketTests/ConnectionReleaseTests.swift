import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
@testable import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

/// Issue 9 §4: after a burst of connections the listener stayed hundreds of MB above its idle
/// size. What must hold once they close — without measuring RSS, which depends on the machine
/// (Tools/soak-memory measures it): nothing of a connection stays alive, and the server asks
/// for the allocator's free memory to be handed back to the OS.
@Suite("Memory released after connections close", .timeLimit(.minutes(2)))
struct ConnectionReleaseTests {
    @Test("40 connections that echoed and closed leave no live connection, no buffered bytes, and a release request")
    func connectionsAreReleased() async throws {
        let server = try await startEchoServer(configure: { $0.releaseFreedMemoryDelay = .milliseconds(10) })
        defer { Task { await server.stop() } }
        let url = try endpoint(server)
        var clients: [WebSocketConnection] = []
        for _ in 0..<40 {
            clients.append(try await WebSocketTransport().connectWebSocket(to: url, options: clientOptions()))
        }
        try await waitUntil("40 live server connections (now \(server.liveConnectionCount))") { server.liveConnectionCount == 40 }
        for client in clients {
            try await client.send(.binary([UInt8](repeating: 3, count: 100_000)))
            #expect(try await client.receive() == .binary([UInt8](repeating: 3, count: 100_000)))
        }
        #expect(server.freedMemoryReleaseRequests == 0)
        let trimsBefore = FreedMemory.trimCount
        for client in clients { await client.close() }
        clients = []
        try await waitUntil("the server released its connections (live: \(server.liveConnectionCount))") {
            server.liveConnectionCount == 0
        }
        #expect(server.partialMessageBudget?.bufferedBytes == 0)
        #expect(server.freedMemoryReleaseRequests == 40)
        try await waitUntil("a trim ran after the connections ended") { FreedMemory.trimCount > trimsBefore }
    }

    @Test("releaseFreedMemoryDelay nil: the server never asks for a trim")
    func releaseCanBeTurnedOff() async throws {
        let server = try await startEchoServer(configure: { $0.releaseFreedMemoryDelay = nil })
        defer { Task { await server.stop() } }
        let client = try await WebSocketTransport().connectWebSocket(to: try endpoint(server), options: clientOptions())
        try await client.send(.text("hi"))
        #expect(try await client.receive() == .text("hi"))
        await client.close()
        try await waitUntil("the server released its connection") { server.liveConnectionCount == 0 }
        #expect(server.freedMemoryReleaseRequests == 0)
    }
}
