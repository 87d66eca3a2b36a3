import PeerSyncAuth
import PeerSyncCore
import PeerSyncMesh
import PeerSyncMeshWiFi
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncTransportTesting
import PeerSyncWebSocket
import Testing

/// ``WiFiMeshLinkTransport`` on 127.0.0.1 with real identities: links both ways, trust decided
/// by the authenticator on each end, stallers and garbage dropped.
@Suite(.timeLimit(.minutes(3))) struct WiFiMeshLinkTransportTests {
    @Test func dialledLinkIsMutuallyAuthenticatedBothWays() async throws {
        let aliceSeen = SeenCertificates(), bobSeen = SeenCertificates()
        let alice = try loopbackTransport(), bob = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob], seen: aliceSeen))
        let bobAddress = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice], seen: bobSeen))
        #expect(bobAddress.addresses == ["127.0.0.1"])
        #expect(bobAddress.port != 0 && bobAddress.port == bob.port)
        let incoming = IncomingLinks(bob)

        let outgoing = try await alice.dial(try discovered(TestPeers.bob, port: bobAddress.port))
        let accepted = try #require(await incoming.link(0))
        #expect(outgoing.peerCertificateChain.first == TestPeers.bob.certificate.derBytes)
        #expect(accepted.peerCertificateChain.first == TestPeers.alice.certificate.derBytes)
        #expect((outgoing as? WebSocketConnection)?.subprotocol == "BLIP_3+CBMobile_3")
        #expect((accepted as? WebSocketConnection)?.subprotocol == "BLIP_3+CBMobile_3")
        #expect(aliceSeen.leaves == [TestPeers.bob.certificate])
        #expect(bobSeen.leaves == [TestPeers.alice.certificate])

        try await outgoing.send(text: "hello bob")
        #expect(try await accepted.receive() == .text("hello bob"))
        try await accepted.send(text: "hello alice")
        #expect(try await outgoing.receive() == .text("hello alice"))

        await alice.stop()
        await bob.stop()
        #expect(await incoming.waitForEnd())
        #expect(outgoing.isClosed && accepted.isClosed, "stop closes the links it made and accepted")
    }

    @Test func dialTriesEveryAddressInTurn() async throws {
        let alice = try loopbackTransport(), bob = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
        let bobAddress = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice]))
        let incoming = IncomingLinks(bob)
        // Bob listens on 127.0.0.1 only: 127.0.0.2 refuses, then 127.0.0.1 answers.
        let link = try await alice.dial(try discovered(TestPeers.bob, port: bobAddress.port,
                                                       addresses: ["127.0.0.2", "127.0.0.1"]))
        #expect(link.remoteAddress?.hasPrefix("127.0.0.1:") == true)
        #expect(await incoming.link(0) != nil)
        let refused = await peerSyncError {
            try await alice.dial(try discovered(TestPeers.bob, port: bobAddress.port, addresses: ["127.0.0.2"]))
        }
        #expect(refused?.code == .connectionRefused, "\(String(describing: refused))")
        await alice.stop()
        await bob.stop()
    }

    /// Bob does not trust Mallory: her dial fails with certificateRejected and Bob never yields
    /// her link — the first link he yields is Alice's, who dialled afterwards.
    @Test func acceptingSideRejectsAnUntrustedCertificate() async throws {
        let bobSeen = SeenCertificates()
        let alice = try loopbackTransport(), bob = try loopbackTransport(), mallory = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
        _ = try await mallory.start(context(TestPeers.mallory, trusting: [TestPeers.bob]))
        let bobAddress = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice], seen: bobSeen))
        let incoming = IncomingLinks(bob)
        let bobPeer = try discovered(TestPeers.bob, port: bobAddress.port)

        let rejected = await peerSyncError { try await mallory.dial(bobPeer) }
        #expect(rejected?.code == .certificateRejected, "\(String(describing: rejected))")
        #expect(rejected?.context["peerID"] == TestPeers.bob.peerID)
        let link = try await alice.dial(bobPeer)
        let first = try #require(await incoming.link(0))
        #expect(first.peerCertificateChain.first == TestPeers.alice.certificate.derBytes)
        #expect(bobSeen.leaves == [TestPeers.mallory.certificate, TestPeers.alice.certificate])
        await link.close()
        for transport in [alice, bob, mallory] { await transport.stop() }
        #expect(incoming.links.count == 1)
    }

    /// Alice does not trust Mallory's server certificate: the dial fails with
    /// certificateRejected (our own verdict, reason kept) and Mallory yields no link.
    @Test func diallingSideRejectsAnUntrustedCertificate() async throws {
        let alice = try loopbackTransport(), bob = try loopbackTransport(), mallory = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
        _ = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.mallory]))
        let malloryAddress = try await mallory.start(context(TestPeers.mallory, trusting: [TestPeers.alice, TestPeers.bob]))
        let incoming = IncomingLinks(mallory)

        let rejected = await peerSyncError { try await alice.dial(try discovered(TestPeers.mallory, port: malloryAddress.port)) }
        #expect(rejected?.code == .certificateRejected, "\(String(describing: rejected))")
        #expect(rejected?.context["reason"] == CertificateTrustFailure.rejectedByCallback.rawValue)
        let link = try await bob.dial(try discovered(TestPeers.mallory, port: malloryAddress.port))
        let first = try #require(await incoming.link(0))
        #expect(first.peerCertificateChain.first == TestPeers.bob.certificate.derBytes)
        await link.close()
        for transport in [alice, bob, mallory] { await transport.stop() }
        #expect(incoming.links.count == 1)
    }

    /// A peer that connects and sends nothing (not even a TLS hello) is dropped after the
    /// handshake timeout; one that stalls after TCP as a server makes the dial fail with
    /// `.timeout` — neither wedges the transport, which keeps linking others.
    @Test func stallersAreDroppedAfterTheHandshakeTimeout() async throws {
        let timeout = slow(.seconds(1))
        let alice = try loopbackTransport(), bob = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob], handshakeTimeout: timeout))
        let bobAddress = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice], handshakeTimeout: timeout))
        let incoming = IncomingLinks(bob)

        let silent = try await TCPStream.connect(host: "127.0.0.1", port: Int(bobAddress.port), timeout: .seconds(10))
        let ended = await peerSyncError { () async throws -> [UInt8]? in
            guard let bytes = try await silent.read(maxBytes: 1024) else { throw PeerSyncError(.closed, "closed") }
            return bytes
        }
        #expect(ended != nil, "the server closes a silent connection")
        await silent.close()

        let staller = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        let held = Task { try await staller.accept() }   // accepts, then never answers
        let stalled = await peerSyncError {
            try await alice.dial(try discovered(TestPeers.bob, port: UInt16(staller.port)))
        }
        #expect(stalled?.code == .timeout, "\(String(describing: stalled))")
        staller.close()
        (try? await held.value)?.closeNow()

        let link = try await alice.dial(try discovered(TestPeers.bob, port: bobAddress.port))
        #expect(await incoming.link(0) != nil, "the transport still links after the stallers")
        await link.close()
        await alice.stop()
        await bob.stop()
    }

    /// Bytes that are not TLS end the connection; a trusted TLS client asking for another path
    /// than `/<name>/_blipsync` gets 404 and a close; neither becomes a link.
    @Test func garbageAndWrongPathsGetACleanClose() async throws {
        let alice = try loopbackTransport(), bob = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
        let bobAddress = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice]))
        let incoming = IncomingLinks(bob)

        let garbage = try await TCPStream.connect(host: "127.0.0.1", port: Int(bobAddress.port), timeout: .seconds(10))
        try await garbage.write(Array("GET /db/_blipsync HTTP/1.1\r\nHost: x\r\n\r\n".utf8) + [0xFF, 0x00, 0x13])
        var closed = false
        while !closed {
            do {
                closed = try await garbage.read(maxBytes: 4096) == nil
            } catch {
                closed = true
            }
        }
        await garbage.close()

        var options = WebSocketClientOptions()
        var tls = TLSConfiguration.client(serverName: nil, identity: TestPeers.alice)
        tls.serverCertificateCallback = { _ in true }
        options.tls = tls
        options.subprotocols = WiFiMeshLinkTransport.subprotocols
        for path in ["/db/wrong", "/", "/a/b/_blipsync"] {
            let error = await peerSyncError {
                try await WebSocketTransport().connectWebSocket(
                    to: try Endpoint(scheme: "wss", host: "127.0.0.1", port: Int(bobAddress.port), path: path), options: options)
            }
            #expect(error?.code == .webSocketHandshakeFailed, "\(path): \(String(describing: error))")
            #expect(error?.context["status"] == "404", "\(path): \(String(describing: error))")
        }
        // Any database name is accepted.
        let named = try await WebSocketTransport().connectWebSocket(
            to: try Endpoint(scheme: "wss", host: "127.0.0.1", port: Int(bobAddress.port), path: "/anything/_blipsync"),
            options: options)
        let first = try #require(await incoming.link(0))
        #expect(first.peerCertificateChain.first == TestPeers.alice.certificate.derBytes)
        await named.close()
        await alice.stop()
        await bob.stop()
        #expect(incoming.links.count == 1)
    }

    @Test func restartsAfterStopAndRefusesADoubleStart() async throws {
        let alice = try loopbackTransport(), bob = try loopbackTransport()
        _ = try await alice.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
        _ = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice]))
        let again = await peerSyncError { try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice])) }
        #expect(again?.code == .invalidArgument)
        await bob.stop()
        await bob.stop()   // idempotent
        #expect(bob.port == nil)
        let notStarted = await peerSyncError { try await bob.dial(try discovered(TestPeers.alice, port: alice.port ?? 0)) }
        #expect(notStarted?.code == .closed)

        let second = try await bob.start(context(TestPeers.bob, trusting: [TestPeers.alice]))
        let incoming = IncomingLinks(bob)
        let link = try await alice.dial(try discovered(TestPeers.bob, port: second.port))
        #expect(await incoming.link(0) != nil)
        await link.close()
        await alice.stop()
        await bob.stop()
    }

    @Test func invalidOptionsAreRefused() {
        var options = MultipeerWiFiOptions()
        options.databaseName = "a/b"
        #expect(throws: PeerSyncError.self) { try WiFiMeshLinkTransport(options: options) }
        #expect(throws: PeerSyncError.self) { try WiFiMeshLinkTransport(options: MultipeerWiFiOptions(interface: "")) }
        options = MultipeerWiFiOptions()
        options.connectTimeout = .zero
        #expect(throws: PeerSyncError.self) { try WiFiMeshLinkTransport(options: options) }
    }
}

/// The transport conformance suite over the links the transport makes: each pair is a dial
/// and the link the other transport yields for it.
@Suite("Transport conformance over Wi-Fi mesh links", .timeLimit(.minutes(3)))
struct WiFiMeshLinkConformanceTests {
    static let suite: TransportConformanceSuite = {
        var configuration = TransportConformanceSuite.Configuration()
        configuration.timeout = slow(.seconds(30))
        return TransportConformanceSuite(configuration: configuration) {
            let dialler = try loopbackTransport(), acceptor = try loopbackTransport()
            _ = try await dialler.start(context(TestPeers.alice, trusting: [TestPeers.bob]))
            let address = try await acceptor.start(context(TestPeers.bob, trusting: [TestPeers.alice]))
            let incoming = IncomingLinks(acceptor)
            let client = try await dialler.dial(try discovered(TestPeers.bob, port: address.port))
            guard let server = await incoming.link(0) else {
                await client.close()
                throw PeerSyncError(.timeout, "the accepting transport yielded no link")
            }
            return TransportPair(client: client, server: server,
                                 dropServer: { await (server as? WebSocketConnection)?.abort() },
                                 cleanup: {
                                     await client.close(code: .goingAway, reason: "")
                                     await server.close(code: .goingAway, reason: "")
                                     await dialler.stop()
                                     await acceptor.stop()
                                 })
        }
    }()

    @Test(arguments: TransportConformanceSuite.connectionCaseNames)
    func conformance(_ name: String) async throws {
        try await Self.suite.run(name)
    }
}
