import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncMesh
import PeerSyncStorage
import Testing

/// The README's example, as written there (plus the wait it describes and the checks).
@Suite struct ReadmeExampleTests {
    @Test func readmeExample() async throws {
        let seen = LockedValue(0)
        let network = try InProcessMeshNetwork()                       // discovery + links, in-process
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Fleet CA"])
        var peers: [(Database, MultipeerReplicator)] = []
        for name in ["alice", "bob", "carol"] {
            let db = try await Database(name: name, config: DatabaseConfiguration(directory: NSTemporaryDirectory(),
                                                                                  backend: MemoryStorageBackend()))
            let identity = try TLSIdentity.createIdentity(for: [.clientAuth, .serverAuth],
                                                          attributes: [certAttrCommonName: name], issuer: ca)
            let config = try MultipeerReplicatorConfiguration(
                peerGroupID: "com-example-team", identity: identity,
                authenticator: MultipeerCertificateAuthenticator(rootCerts: [ca.certificate]),
                collections: MultipeerCollectionConfiguration.fromCollections([try db.defaultCollection()]))
            let replicator = try MultipeerReplicator(config: config, networks: [network.network(host: name)])
            replicator.addPeerDiscoveryStatusListener { print(name, "sees", $0); seen.withLock { $0 += 1 } }
            try await replicator.start()
            peers.append((db, replicator))
        }
        var doc = MutableDocument(id: "hello")
        doc.setData(["from": "alice"])
        try await peers[0].0.defaultCollection().save(document: &doc)
        // Moments later carol has it, through bob or directly:
        let arrived = try await eventually(.seconds(20)) { try await peers[2].0.defaultCollection().document(id: "hello") != nil }
        #expect(arrived)
        #expect(seen.withLock { $0 } >= 6)
        for (db, replicator) in peers { await replicator.stop(); try await db.close() }
        for name in ["alice", "bob", "carol"] {
            try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "/\(name).peersync")
            MemoryStorageBackend().removeStore(in: NSTemporaryDirectory())
        }
    }
}
