import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncReplicator
import PeerSyncStorage
import Testing

@Suite struct ConfigurationTests {
    private func collection() async throws -> (Database, Collection) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshcfg-\(UUID().uuidString)").path
        let database = try await Database(name: "cfg", config: DatabaseConfiguration(directory: directory, backend: MemoryStorageBackend(),
                                                                                     durable: false))
        return (database, try database.defaultCollection())
    }

    /// Closes a database of ``collection()`` and removes its directory.
    private func closeAndRemove(_ database: Database) async throws {
        try await database.close()
        try? FileManager.default.removeItem(atPath: database.config.directory)
    }

    private let trustAll = MultipeerCertificateAuthenticator { _, _ in true }

    @Test func defaultsAreCouchbaseLitesAndDocumented() async throws {
        let (database, c) = try await collection()
        let config = try MultipeerReplicatorConfiguration(peerGroupID: "com-example", identity: try TestCA.identity("d"),
                                                          authenticator: trustAll, collections: [MultipeerCollectionConfiguration(collection: c)])
        #expect(config.transports == [.wifi])
        #expect(config.targetDegree == 4)
        #expect(config.maximumDegree == 8)
        #expect(config.retryDelay == .milliseconds(500))
        #expect(config.maximumRetryDelay == .seconds(30))
        #expect(config.handshakeTimeout == .seconds(10))
        #expect(config.peerGroupID.rawValue == "com-example")
        try await closeAndRemove(database)
    }

    @Test(arguments: ["", "a.b", "a,b", "a\\b", "tab\there", String(repeating: "g", count: 64)])
    func invalidGroupIDsAreRefused(_ group: String) async throws {
        let (database, c) = try await collection()
        #expect {
            _ = try MultipeerReplicatorConfiguration(peerGroupID: group, identity: try TestCA.identity("g"),
                                                     authenticator: trustAll, collections: [MultipeerCollectionConfiguration(collection: c)])
        } throws: { ($0 as? PeerSyncError)?.code == .invalidArgument }
        try await closeAndRemove(database)
    }

    @Test func identityNeedsBothKeyUsagesAndTheErrorNamesTheMissingOne() async throws {
        let (database, c) = try await collection()
        for (usages, missing) in [(KeyUsages.serverAuth, "clientAuth"), (KeyUsages.clientAuth, "serverAuth")] {
            let identity = try TestCA.identity("u", usages: usages)
            do {
                _ = try MultipeerReplicatorConfiguration(peerGroupID: "g", identity: identity, authenticator: trustAll,
                                                         collections: [MultipeerCollectionConfiguration(collection: c)])
                Issue.record("an identity without \(missing) was accepted")
            } catch {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains(missing), "\(error.message)")
            }
        }
        try await closeAndRemove(database)
    }

    @Test func collectionsMustBeGivenOnceFromOneDatabase() async throws {
        let (database, c) = try await collection()
        let (other, d) = try await collection()
        let identity = try TestCA.identity("c")
        for collections in [[], [c, c], [c, d]] {
            #expect {
                _ = try MultipeerReplicatorConfiguration(peerGroupID: "g", identity: identity, authenticator: trustAll,
                                                         collections: MultipeerCollectionConfiguration.fromCollections(collections))
            } throws: { ($0 as? PeerSyncError)?.code == .invalidArgument }
        }
        try await closeAndRemove(database)
        try await closeAndRemove(other)
    }

    @Test func tunablesAndNetworksAreValidatedByTheReplicator() async throws {
        let (database, c) = try await collection()
        let network = try InProcessMeshNetwork()
        let base = try MultipeerReplicatorConfiguration(peerGroupID: "g", identity: try TestCA.identity("t"), authenticator: trustAll,
                                                        collections: [MultipeerCollectionConfiguration(collection: c)])
        let mesh = MeshNetwork(discovery: InProcessDiscovery(registry: network.registry, hostName: "t"),
                               links: InProcessMeshLinks(network: network.links, host: "t"))
        var bad: [MultipeerReplicatorConfiguration] = []
        var config = base; config.targetDegree = 1; bad.append(config)
        config = base; config.maximumDegree = 3; bad.append(config)
        config = base; config.maximumDegree = MeshNeighborMetadata.maximumNeighbors + 1; bad.append(config)
        config = base; config.retryDelay = .zero; bad.append(config)
        config = base; config.maximumRetryDelay = .milliseconds(100); bad.append(config)
        config = base; config.handshakeTimeout = .zero; bad.append(config)
        config = base; config.transports = [.bluetooth]; bad.append(config)  // the network is Wi-Fi
        for config in bad {
            #expect(throws: PeerSyncError.self) { _ = try MultipeerReplicator(config: config, networks: [mesh]) }
        }
        #expect(throws: PeerSyncError.self) { _ = try MultipeerReplicator(config: base, networks: []) }
        #expect(throws: PeerSyncError.self) { _ = try MultipeerReplicator(config: base, networks: [mesh, mesh]) }
        let replicator = try MultipeerReplicator(config: base, networks: [mesh])
        #expect(replicator.peerID.rawValue == base.identity.peerID)
        try await closeAndRemove(database)
    }

    @Test func rootCertificateAuthenticatorChecksTheChain() throws {
        let trusted = try TestCA.identity("trusted")
        let stranger = try TestCA.identity("stranger", issuer: TestCA.other)
        let selfSigned = try TLSIdentity.createIdentity(for: [.clientAuth, .serverAuth], attributes: [certAttrCommonName: "self"])
        let authenticator = MultipeerCertificateAuthenticator(rootCerts: [TestCA.fleet.certificate])
        #expect(authenticator.authenticate(trusted.certs))
        #expect(!authenticator.authenticate(stranger.certs))
        #expect(!authenticator.authenticate(selfSigned.certs))
        #expect(!authenticator.authenticate([]))
    }

    @Test func callbackAuthenticatorIsGivenThePeerIDAndChain() throws {
        let identity = try TestCA.identity("cb")
        let seen = Recorder<PeerID>()
        let authenticator = MultipeerCertificateAuthenticator { peerID, chain in
            seen.append(peerID)
            return chain.first == identity.certificate
        }
        #expect(authenticator.authenticate(identity.certs))
        #expect(seen.all.map(\.rawValue) == [identity.peerID])
        #expect(!authenticator.authenticate(try TestCA.identity("other").certs))
    }
}
