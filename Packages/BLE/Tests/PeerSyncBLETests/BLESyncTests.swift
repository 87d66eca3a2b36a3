import Foundation
import PeerSyncBLE
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncStorage
import PeerSyncTransport
import PeerSyncTransportTesting
import Testing

/// Replication over BLETransport on the BLE-shaped simulated link (247-byte MTU, 1.2 Mbit/s,
/// 30 ms each way): TLS, WebSocket framing and BLIP exactly as on Wi-Fi.
@Suite(.serialized, .timeLimit(.minutes(5 * TestTiming.slowFactor))) struct BLESyncTests {
    /// A database in a temporary folder (in-memory storage).
    final class Peer: Sendable {
        let directory: String
        let database: Database

        init(_ name: String) async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-ble-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            database = try await Database(name: name, config: DatabaseConfiguration(
                directory: directory, backend: MemoryStorageBackend(), durable: false, changePollInterval: .milliseconds(20)))
        }

        var collection: PeerSyncDatabase.Collection { get throws { try database.defaultCollection() } }

        /// Saves `count` documents `<prefix>-<i>` of about `size` bytes each, of random letters
        /// (so BLIP's compression cannot shrink them much).
        func save(_ count: Int, prefix: String, size: Int) async throws {
            let collection = try self.collection
            var random = SplitMix64(seed: UInt64(prefix.utf8.reduce(0) { $0 &* 31 &+ Int($1) }))
            let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            for i in 0..<count {
                let text = String((0..<size).map { _ in letters[Int(random.next() % UInt64(letters.count))] })
                var document = MutableDocument(id: "\(prefix)-\(i)")
                document.setData(["i": .int(Int64(i)), "text": .string(text)])
                try await collection.save(document: &document)
            }
        }

        /// Every document's ID, revision and body.
        func snapshot() async throws -> [String: String] {
            let collection = try self.collection
            var result: [String: String] = [:]
            for id in try await collection.documentIDs() {
                guard let document = try await collection.document(id: id) else { continue }
                result[id] = "\(document.revisionID ?? "-") \(JSONValue.object(document.properties).canonicalString)"
            }
            return result
        }

        func close() async {
            try? await database.close()
            MemoryStorageBackend().removeStore(in: directory)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    /// Serves passive replication sessions for `peer` on a BLE listener of `network`'s device
    /// `address`; returns the listener (close it to stop) and the serving task.
    static func serve(_ peer: Peer, on network: SimulatedL2CAPNetwork, address: String) async throws -> (BLEListener, Task<Void, Never>) {
        let (listenOptions, _) = try TestIdentity.options()
        let listener = try await BLETransport(connector: network.connector(address: address))
            .listenBLE(on: Endpoint(scheme: "l2cap", host: address, port: 0), options: listenOptions)
        let collection = try peer.collection
        let database = peer.database
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                while let connection = try? await listener.accept() {
                    guard let blip = try? BLIPConnection(connection: connection) else { continue }
                    let session = PassiveReplicationSession(connection: blip, database: database, collections: [collection])
                    group.addTask { await session.run() }
                }
            }
        }
        return (listener, task)
    }

    /// A one-shot push-and-pull from `active` to the listener at `endpoint`; returns its final status.
    static func replicate(_ active: Peer, to endpoint: Endpoint, network: SimulatedL2CAPNetwork,
                          maxAttempts: Int) async throws -> ReplicatorStatus {
        let (_, connectOptions) = try TestIdentity.options()
        let transport = BLETransport(connector: network.connector(address: "AA:00:00:00:00:01"))
        var configuration = ReplicatorConfiguration(target: endpoint)
        configuration.replicatorType = .pushAndPull
        configuration.maxAttempts = maxAttempts
        configuration.maxAttemptWaitTime = .milliseconds(200)
        configuration.replyTimeout = TestTiming.slow(.seconds(30))
        configuration.addCollections([try active.collection])
        let replicator = try Replicator(config: configuration, connector: { _ in
            try await transport.connect(to: endpoint, options: connectOptions)
        })
        replicator.start()
        await replicator.waitUntilStopped()
        return replicator.status
    }

    /// Expects both databases to hold the same `count` documents (IDs, revisions, bodies), then
    /// stops serving and closes them.
    static func expectIdenticalThenClose(_ active: Peer, _ passive: Peer, count: Int,
                                         listener: BLEListener, serving: Task<Void, Never>) async throws {
        let (a, p) = (try await active.snapshot(), try await passive.snapshot())
        #expect(a.count == count)
        #expect(a == p)
        await listener.close()
        await serving.value
        await active.close()
        await passive.close()
    }

    @Test func aFullSyncConverges() async throws {
        let network = SimulatedL2CAPNetwork(conditions: .bluetoothLE)
        let active = try await Peer("active"), passive = try await Peer("passive")
        try await active.save(300, prefix: "a", size: 400)
        try await passive.save(60, prefix: "p", size: 400)
        let (listener, serving) = try await Self.serve(passive, on: network, address: "AA:00:00:00:00:02")
        let status = try await Self.replicate(active, to: listener.endpoint, network: network, maxAttempts: 1)
        #expect(status.error == nil)
        #expect(status.activity == .stopped)
        // It all went over the one shaped link, in 245-byte packets.
        let links = network.links
        #expect(links.count == 1)
        #expect(links.allSatisfy { $0.statistics.oversizedPackets == 0 && $0.statistics.payloadBytes > 144_000 })
        try await Self.expectIdenticalThenClose(active, passive, count: 360, listener: listener, serving: serving)
    }

    /// The link is lost mid-push: the replicator (no retry) stops with the error; a new
    /// replicator over a new link resumes, and both databases end identical.
    @Test func aLinkLostMidSyncIsReportedAndANewLinkResumes() async throws {
        // The push direction carries over 100 kB (300 random 400-byte bodies, compressed); the
        // link goes after 40 kB of it.
        let network = SimulatedL2CAPNetwork(conditions: BLELinkConditions(lossAfterBytes: 40_000))
        let active = try await Peer("active"), passive = try await Peer("passive")
        try await active.save(300, prefix: "a", size: 400)
        let (listener, serving) = try await Self.serve(passive, on: network, address: "AA:00:00:00:00:03")

        let broken = try await Self.replicate(active, to: listener.endpoint, network: network, maxAttempts: 1)
        let error = try #require(broken.error)
        #expect([PeerSyncError.Code.connectionReset, .tlsError, .connectionClosed, .io].contains(error.code),
                "the replicator reported \(error)")
        let halfway = try await passive.collection.count
        #expect(halfway < 300)
        #expect(network.links.first?.statistics.lossReason != nil)

        network.conditions = .bluetoothLE
        let resumed = try await Self.replicate(active, to: listener.endpoint, network: network, maxAttempts: 1)
        #expect(resumed.error == nil)
        try await Self.expectIdenticalThenClose(active, passive, count: 300, listener: listener, serving: serving)
    }

    /// Every link is lost after 40 kB: the replicator's own retries open new links, each one
    /// gets further, and the push completes with nothing lost.
    @Test func retriesCarryASyncAcrossRepeatedLosses() async throws {
        let network = SimulatedL2CAPNetwork(conditions: BLELinkConditions(lossAfterBytes: 40_000))
        let active = try await Peer("active"), passive = try await Peer("passive")
        try await active.save(300, prefix: "a", size: 400)
        let (listener, serving) = try await Self.serve(passive, on: network, address: "AA:00:00:00:00:04")
        let status = try await Self.replicate(active, to: listener.endpoint, network: network, maxAttempts: 0)
        #expect(status.error == nil)
        let links = network.links
        #expect(links.count > 1)
        #expect(links.dropLast().allSatisfy { $0.statistics.lossReason != nil })
        try await Self.expectIdenticalThenClose(active, passive, count: 300, listener: listener, serving: serving)
    }
}
