import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncStorage
import PeerSyncTransport
import Testing

/// `ReplicatorConfiguration.remoteIdentity` (added for the mesh): checkpoints follow the peer,
/// not its URL.
@Suite struct CheckpointIdentityTests {
    /// A passive peer's database served at two URLs (as a peer reached at a new address).
    final class TwoAddresses: Sendable {
        let network = LoopbackNetwork()
        let server: Database
        let client: Database
        let listeners: [LoopbackListener]
        let tasks: [Task<Void, Never>]
        let directory: String

        init() async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshcp-\(UUID().uuidString)").path
            server = try await Database(name: "server", config: DatabaseConfiguration(directory: directory, backend: MemoryStorageBackend(), durable: false))
            client = try await Database(name: "client", config: DatabaseConfiguration(directory: directory, backend: MemoryStorageBackend(), durable: false))
            var listeners: [LoopbackListener] = []
            var tasks: [Task<Void, Never>] = []
            for host in ["first", "second"] {
                let listener = try LoopbackTransport(network: network, host: host).listenLoopback(on: Endpoint(url: "loopback://\(host)/db"))
                let server = self.server
                let served = try server.defaultCollection()
                tasks.append(Task {
                    while let connection = try? await listener.accept(), let blip = try? BLIPConnection(connection: connection) {
                        let session = PassiveReplicationSession(connection: blip, database: server, collections: [served])
                        Task { await session.run() }
                    }
                })
                listeners.append(listener)
            }
            self.listeners = listeners
            self.tasks = tasks
        }

        func configuration(host: String, identity: String?) throws -> ReplicatorConfiguration {
            var config = ReplicatorConfiguration(target: try Endpoint(url: "loopback://\(host)/db"))
            config.remoteIdentity = identity
            config.addCollection(try client.defaultCollection())
            return config
        }

        func replicate(_ config: ReplicatorConfiguration) async throws -> Replicator {
            let network = self.network
            let replicator = try Replicator(config: config) { cfg in
                try await LoopbackTransport(network: network, host: "client").connect(to: cfg.target)
            }
            replicator.start()
            await replicator.waitUntilStopped()
            return replicator
        }

        func close() async {
            for listener in listeners { await listener.close() }
            for task in tasks { await task.value }
            try? await server.close()
            try? await client.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test func theSameIdentityResumesAtAnotherURL() async throws {
        let setup = try await TwoAddresses()
        let collection = try setup.client.defaultCollection()
        for i in 0..<10 {
            var doc = MutableDocument(id: "d\(i)")
            doc.setData(["i": .int(Int64(i))])
            try await collection.save(document: &doc)
        }
        let first = try await setup.replicate(setup.configuration(host: "first", identity: "peer-1"))
        #expect(first.status.error == nil)
        // Same peer, new address: its checkpoint is found, nothing is pending.
        let moved = try Replicator(config: setup.configuration(host: "second", identity: "peer-1")) { _ in
            throw PeerSyncError(.connectionRefused, "not used")
        }
        #expect(try await moved.pendingDocumentIDs(collection: collection).isEmpty)
        // Keyed by URL (no identity), the new address starts from scratch.
        let byURL = try Replicator(config: setup.configuration(host: "second", identity: nil)) { _ in
            throw PeerSyncError(.connectionRefused, "not used")
        }
        #expect(try await byURL.pendingDocumentIDs(collection: collection).count == 10)
        // Another identity at the same URL is another peer.
        let other = try Replicator(config: setup.configuration(host: "first", identity: "peer-2")) { _ in
            throw PeerSyncError(.connectionRefused, "not used")
        }
        #expect(try await other.pendingDocumentIDs(collection: collection).count == 10)
        await setup.close()
    }
}
