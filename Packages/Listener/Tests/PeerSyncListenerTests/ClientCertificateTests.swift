import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocketReplication
import Testing

/// TLS client-certificate authentication end to end: a listener with a
/// `ListenerCertificateAuthenticator` (roots or callback) and a replicator with a
/// `ClientCertificateAuthenticator`.
@Suite(.serialized) struct ClientCertificateTests {
    enum Mode: String, CaseIterable, Sendable { case roots, callback }

    struct Identities {
        let root: TLSIdentity
        let client: TLSIdentity
        let stranger: TLSIdentity
        init() throws {
            root = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Sync Root CA"])
            let otherRoot = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Other CA"])
            client = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "good client"], issuer: root)
            stranger = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "stranger"], issuer: otherRoot)
        }
    }

    func startListener(_ dir: String, _ mode: Mode, _ ids: Identities) async throws -> (Database, URLEndpointListener) {
        let db = try await openDatabase(dir, "server")
        var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
        config.networkInterface = "127.0.0.1"
        let rootCert = ids.root.certificate, clientCert = ids.client.certificate
        switch mode {
        case .roots: config.authenticator = ListenerCertificateAuthenticator(rootCerts: [rootCert])
        case .callback: config.authenticator = ListenerCertificateAuthenticator { certs in certs.first == clientCert }
        }
        let listener = try URLEndpointListener(config: config)
        try await listener.start()
        return (db, listener)
    }

    func replicatorConfig(_ db: Database, _ listener: URLEndpointListener, identity: TLSIdentity) throws -> ReplicatorConfiguration {
        var config = ReplicatorConfiguration(target: try Endpoint(url: "wss://127.0.0.1:\(try #require(listener.port))/server"))
        config.addCollection(try db.defaultCollection())
        config.authenticator = ClientCertificateAuthenticator(identity: identity)
        config.pinnedServerCertificate = listener.tlsIdentity?.certificate
        config.maxAttemptWaitTime = .milliseconds(200)
        return config
    }

    @Test(arguments: Mode.allCases)
    func trustedClientCertificateSyncs(_ mode: Mode) async throws {
        let ids = try Identities()
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await startListener(dir, mode, ids)
            let clientDB = try await openDatabase(dir, "client")
            try await addDocuments(serverDB.defaultCollection(), prefix: "s", count: 5)
            try await addDocuments(clientDB.defaultCollection(), prefix: "c", count: 5)
            let status = try await runToCompletion(try Replicator(config: try replicatorConfig(clientDB, listener, identity: ids.client)))
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(try await snapshot(serverDB.defaultCollection()).count == 10)
            #expect(try await snapshot(serverDB.defaultCollection()) == snapshot(clientDB.defaultCollection()))
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test(arguments: Mode.allCases)
    func untrustedClientCertificateStopsWithoutRetrying(_ mode: Mode) async throws {
        let ids = try Identities()
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await startListener(dir, mode, ids)
            let clientDB = try await openDatabase(dir, "client")
            try await addDocuments(clientDB.defaultCollection(), prefix: "c", count: 2)
            let counting = CountingConnector()
            let replicator = try Replicator(config: try replicatorConfig(clientDB, listener, identity: ids.stranger),
                                            connector: counting.connector)
            let status = try await runToCompletion(replicator)
            let error = try #require(status.error)
            let code = error.code.rawValue.lowercased()
            #expect(code.contains("tls") || code.contains("certificate") || error.code == .unauthorized, "\(error)")
            #expect(counting.count == 1)
            #expect(try await serverDB.defaultCollection().documentIDs().isEmpty)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }
}
