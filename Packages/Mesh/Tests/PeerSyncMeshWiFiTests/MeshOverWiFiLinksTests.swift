import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncMeshWiFi
import PeerSyncStorage
import Testing
#if SQLite
import PeerSyncSQLite
#endif

/// The mesh engine over real Wi-Fi links (TLS sockets on 127.0.0.1), with the in-process
/// discovery registry standing in for DNS-SD (Avahi runs in `Tools/checks/mesh`).
@Suite(.timeLimit(.minutes(3))) struct MeshOverWiFiLinksTests {
    final class Peer: Sendable {
        let database: Database
        let replicator: MultipeerReplicator
        init(database: Database, replicator: MultipeerReplicator) {
            self.database = database
            self.replicator = replicator
        }
        var documentIDs: Set<String> {
            get async throws { Set(try await database.defaultCollection().allDocuments().map(\.id)) }
        }
    }

    static func backend() -> any StorageBackend {
        #if SQLite
        SQLiteStorageBackend()
        #else
        MemoryStorageBackend()
        #endif
    }

    /// A peer trusting `trusted` (leaf certificates), on 127.0.0.1, discovered through `registry`.
    static func peer(_ identity: TLSIdentity, trusting trusted: [TLSIdentity], registry: InProcessDiscoveryRegistry,
                     directory: String, name: String) async throws -> Peer {
        let database = try await Database(name: name, config: DatabaseConfiguration(directory: directory + "/" + name,
                                                                                     backend: backend()))
        let leaves = Set(trusted.map(\.certificate))
        let config = try MultipeerReplicatorConfiguration(
            peerGroupID: "wifi-links", identity: identity,
            authenticator: MultipeerCertificateAuthenticator { _, chain in chain.first.map { leaves.contains($0) } ?? false },
            collections: MultipeerCollectionConfiguration.fromCollections([try database.defaultCollection()]))
        let network = MeshNetwork(discovery: InProcessDiscovery(registry: registry, hostName: name, addresses: ["127.0.0.1"]),
                                  links: try loopbackTransport())
        return Peer(database: database, replicator: try MultipeerReplicator(config: config, networks: [network]))
    }

    static func write(_ peer: Peer, _ ids: [String]) async throws {
        let collection = try peer.database.defaultCollection()
        for id in ids {
            var document = MutableDocument(id: id, data: ["by": .string(id)])
            try await collection.save(document: &document)
        }
    }

    @Test func peersConvergeAndAnUntrustedOneStaysOut() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshwifi-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let registry = try InProcessDiscoveryRegistry()
        let team = [TestPeers.alice, TestPeers.bob, TestPeers.carol]
        var peers: [Peer] = []
        for (index, identity) in team.enumerated() {
            peers.append(try await Self.peer(identity, trusting: team, registry: registry, directory: directory, name: "p\(index)"))
        }
        // Mallory trusts everyone; nobody trusts her.
        let mallory = try await Self.peer(TestPeers.mallory, trusting: team + [TestPeers.mallory], registry: registry,
                                          directory: directory, name: "mallory")
        for (index, peer) in peers.enumerated() { try await Self.write(peer, ["p\(index)-a", "p\(index)-b"]) }
        try await Self.write(mallory, ["mallory-a"])
        for peer in peers + [mallory] { try await peer.replicator.start() }
        for (index, peer) in peers.enumerated() { try await Self.write(peer, ["p\(index)-c"]) }   // while running

        let expected = Set((0..<3).flatMap { index in ["a", "b", "c"].map { "p\(index)-\($0)" } })
        let deadline = ContinuousClock.now + slow(.seconds(60))
        var converged = false
        while !converged && ContinuousClock.now < deadline {
            converged = true
            for peer in peers where try await peer.documentIDs != expected { converged = false }
            if !converged { try await Task.sleep(for: .milliseconds(100)) }
        }
        for peer in peers { #expect(try await peer.documentIDs == expected) }
        #expect(try await mallory.documentIDs == ["mallory-a"])
        for peer in peers {
            let info = peer.replicator.peerInfo(for: mallory.replicator.peerID)
            #expect(info?.replicatorTransport == nil, "nobody links to the untrusted peer")
        }

        for peer in peers + [mallory] {
            await peer.replicator.stop()
            try await peer.database.close()
        }
    }

    @Test func theConvenienceInitializerBuildsTheWiFiNetwork() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshwifi-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let database = try await Database(name: "db", config: DatabaseConfiguration(directory: directory, backend: Self.backend()))
        var config = try MultipeerReplicatorConfiguration(
            peerGroupID: "convenience", identity: TestPeers.alice,
            authenticator: MultipeerCertificateAuthenticator(rootCerts: [TestPeers.alice.certificate]),
            collections: MultipeerCollectionConfiguration.fromCollections([try database.defaultCollection()]))
        let replicator = try MultipeerReplicator(config: config, wifi: MultipeerWiFiOptions(port: 0, interface: "lo"))
        #expect(replicator.networks.count == 1)
        #expect(replicator.networks.first?.discovery.kind == .dnssd)
        #expect(replicator.wifiLinks?.options.interface == "lo")
        #expect(replicator.status(for: .wifi) != nil)
        #expect(replicator.status(for: .bluetooth) == nil)

        config.transports = [.wifi, .bluetooth]
        #expect {
            try MultipeerReplicator(config: config)
        } throws: { error in
            (error as? PeerSyncError)?.code == .invalidArgument
                && (error as? PeerSyncError)?.message.contains("MultipeerReplicator(config:wifi:bluetooth:)") == true
        }
        try await database.close()
    }
}
