import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncTestSupport
import Testing

/// The README example, with a temporary keystore and an in-memory transport.
@Suite(.timeLimit(.minutes(1))) struct ReadmeExampleTests {
    @Test func readmeExampleRuns() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }

        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Fleet CA"])
        let peer = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth],
                                                  attributes: [certAttrCommonName: "peer-1",
                                                               certAttrHostname: "peer1.local"],
                                                  issuer: ca)
        #expect(peer.peerID.count == 64)

        let store = TLSKeyStore(directory: dir.file("identities"))
        try store.save(peer, label: "peer-1", overwrite: true)

        let listenerAuth = ListenerCertificateAuthenticator(rootCerts: [ca.certificate])
        let serverConfig = listenerAuth.tlsConfiguration(identity: peer)
        let clientConfig = ClientCertificateAuthenticator(identity: peer)
            .tlsConfiguration(serverName: "peer1.local", serverTrust: .roots([ca.certificate]))

        let pair = ByteStreamPair()
        async let server = TLSStream.handshake(over: pair.b, configuration: serverConfig)
        let tls = try await TLSStream.handshake(over: pair.a, configuration: clientConfig)
        #expect(tls.peerCertificate?.peerID == peer.peerID)
        try await tls.write(Array("hello".utf8))
        let serverSide = try await server
        #expect(try await readExactly(serverSide, 5) == Array("hello".utf8))
        #expect(serverSide.peerCertificate?.peerID == peer.peerID)
        await tls.close()
        await serverSide.close()
    }
}
