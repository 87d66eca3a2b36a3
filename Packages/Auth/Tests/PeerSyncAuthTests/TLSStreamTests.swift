import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing

@Suite(.timeLimit(.minutes(1))) struct TLSStreamTests {
    static let server = Result { try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth],
                                                                  attributes: [certAttrCommonName: "server", certAttrHostname: "localhost"]) }

    @Test func handshakeAndEcho() async throws {
        let identity = try Self.server.get()
        let result = await handshakePair(client: .client(serverName: "localhost", serverTrust: .selfSignedOnly),
                                         server: .server(identity: identity))
        let client = try result.client.get()
        let server = try result.server.get()
        #expect(client.protocolVersion == .v1_3)
        #expect(!client.cipherSuite.isEmpty)
        #expect(client.peerCertificateChain == [identity.certificate])
        #expect(server.peerCertificateChain.isEmpty)
        #expect(server.serverName == "localhost")

        try await client.write(Array("hello".utf8))
        #expect(try await readExactly(server, 5) == Array("hello".utf8))
        try await server.write(Array("world!".utf8))
        #expect(try await readExactly(client, 6) == Array("world!".utf8))
        await client.close()
        #expect(try await server.read(maxBytes: 100) == nil)
        await server.close()
    }
}
