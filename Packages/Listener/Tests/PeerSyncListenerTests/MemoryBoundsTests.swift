import PeerSyncCore
import PeerSyncDatabase
@testable import PeerSyncListener
import PeerSyncReplicator
import PeerSyncWebSocketReplication
import Testing

/// Issue 9 §4 at the listener level: its partial-message budget is the configured one, and
/// after replications end nothing of their connections stays alive (RSS itself is measured
/// by Tools/soak-memory, not here).
@Suite("Listener memory bounds", .timeLimit(.minutes(3)))
struct MemoryBoundsTests {
    @Test func partialMessageBudgetComesFromTheConfiguration() async throws {
        try await withTempDirectory { dir in
            let db = try await openDatabase(dir, "server")
            var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
            config.disableTLS = true
            config.networkInterface = "127.0.0.1"
            #expect(config.maxPartialMessageBytes == 64 << 20)
            config.maxPartialMessageBytes = 8 << 20
            let listener = try URLEndpointListener(config: config)
            try await listener.start()
            #expect(listener.webSocketServer?.partialMessageBudget?.limit == 8 << 20)
            await listener.stop()
            config.maxPartialMessageBytes = nil
            let unlimited = try URLEndpointListener(config: config)
            try await unlimited.start()
            #expect(unlimited.webSocketServer != nil && unlimited.webSocketServer?.partialMessageBudget == nil)
            await unlimited.stop()
            try await db.close()
        }
    }

    @Test func connectionsOfFinishedPullsAreReleased() async throws {
        try await withTempDirectory { dir in
            let (server, listener) = try await makeListener(dir, disableTLS: true)
            try await addDocuments(try server.defaultCollection(), prefix: "doc", count: 50)
            let ws = try #require(listener.webSocketServer)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<5 {
                    group.addTask {
                        let client = try await openDatabase(dir, "client\(i)")
                        let replicator = try Replicator(config: try replicatorConfig(client, listener, type: .pull))
                        let status = try await runToCompletion(replicator)
                        #expect(status.error == nil)
                        #expect(try await client.defaultCollection().count == 50)
                        try await client.close()
                    }
                }
                try await group.waitForAll()
            }
            let released = await eventually(timeout: .seconds(60)) {
                ws.liveConnectionCount == 0 && listener.status.connectionCount == 0
            }
            #expect(released, "live connections: \(ws.liveConnectionCount), sessions: \(listener.status.connectionCount)")
            #expect(ws.freedMemoryReleaseRequests >= 5)
            #expect(ws.partialMessageBudget?.bufferedBytes == 0)
            await listener.stop()
            try await server.close()
        }
    }
}
