import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncPosix
import PeerSyncReplicator
import PeerSyncWebSocket
import PeerSyncWebSocketReplication
import Testing

/// Closing a database stops the listener serving it, as Couchbase Lite does.
@Suite struct DatabaseCloseTests {
    /// With a replicator connected, `Database.close()` stops the listener first: when close
    /// returns its port is closed and no connection is left; it cannot start again.
    @Test func closingTheDatabaseStopsItsListener() async throws {
        try await withTempDirectory { dir in
            let (server, listener) = try await makeListener(dir, password: false, disableTLS: true)
            let port = try #require(listener.port)
            let client = try await openDatabase(dir, "client")
            var doc = MutableDocument(id: "doc", data: ["v": 1])
            try await client.defaultCollection().save(document: &doc)
            var config = try replicatorConfig(client, listener, continuous: true, password: nil)
            config.maxAttemptWaitTime = .milliseconds(200)
            let replicator = try Replicator(config: config, connector: WebSocketReplicatorConnector().connect)
            replicator.start()
            #expect(await eventually { replicator.status.activity == .idle && listener.status.activeConnectionCount == 1 })

            try await server.close()
            // Checked at once: close() returned only after the listener stopped.
            #expect(listener.port == nil)
            #expect(listener.status.connectionCount == 0)
            await #expect(throws: (any Error).self) {
                let tcp = try await TCPStream.connect(host: "127.0.0.1", port: port, timeout: .seconds(10))
                await tcp.close()
            }
            await #expect(throws: PeerSyncError.self) { try await listener.start() }
            #expect(listener.port == nil)

            replicator.stop()
            await replicator.waitUntilStopped()
            await listener.stop()  // a no-op when close() did its job
            try await client.close()
        }
    }
}
