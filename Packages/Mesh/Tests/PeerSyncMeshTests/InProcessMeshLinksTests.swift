import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncLoopback
import PeerSyncMesh
import PeerSyncTransport
import Testing

@Suite struct InProcessMeshLinksTests {
    /// A started transport for `identity` on `host`, trusting what `trusts` accepts.
    private func started(_ network: LoopbackNetwork, _ host: String, _ identity: TLSIdentity,
                         handshakeTimeout: Duration = .seconds(5),
                         trusts: @escaping @Sendable ([Certificate]) -> Bool) async throws -> (InProcessMeshLinks, DiscoveredPeer) {
        let links = InProcessMeshLinks(network: network, host: host)
        let address = try await links.start(MeshLinkContext(identity: identity, authenticate: trusts, handshakeTimeout: slow(handshakeTimeout)))
        let peer = DiscoveredPeer(name: host, peerID: try PeerID(identity.peerID), group: try PeerGroupID("g"),
                                  addresses: address.addresses, port: address.port, metadata: PeerMetadata(),
                                  protocolVersion: 1, discovery: .inProcess)
        return (links, peer)
    }

    @Test func bothEndsSeeTheOthersChainAndTheLinkCarriesMessages() async throws {
        let network = LoopbackNetwork()
        let (alice, bob) = (try TestCA.identity("alice"), try TestCA.identity("bob"))
        let checked = Recorder<String>()
        let (a, _) = try await started(network, "a", alice) { checked.append("a checks \($0[0].commonName ?? "")"); return true }
        let (b, bobPeer) = try await started(network, "b", bob) { checked.append("b checks \($0[0].commonName ?? "")"); return true }
        let accepted = Task { () -> (any MessageConnection)? in
            for await link in b.incomingLinks() { return link }
            return nil
        }
        let link = try await a.dial(bobPeer)
        #expect(link.peerCertificateChain == bob.certs.map(\.derBytes))
        let incoming = try #require(await accepted.value)
        #expect(incoming.peerCertificateChain == alice.certs.map(\.derBytes))
        #expect(Set(checked.all) == ["b checks alice", "a checks bob"])
        try await link.send(text: "hello")
        #expect(try await incoming.receive() == .text("hello"))
        await a.stop()
        await b.stop()
    }

    @Test func aRejectedDiallerFailsAndNeverReachesTheAcceptor() async throws {
        let network = LoopbackNetwork()
        let (a, _) = try await started(network, "a", try TestCA.identity("alice")) { _ in true }
        let (b, bobPeer) = try await started(network, "b", try TestCA.identity("bob")) { _ in false }
        await #expect { _ = try await a.dial(bobPeer) } throws: { ($0 as? PeerSyncError)?.code == .certificateRejected }
        await b.stop()  // ends the stream: it must end without having yielded a link
        var yielded = 0
        for await _ in b.incomingLinks() { yielded += 1 }
        #expect(yielded == 0)
        await a.stop()
    }

    @Test func aDiallerThatRejectsTheAcceptorFailsAndTheAcceptorGetsNothing() async throws {
        let network = LoopbackNetwork()
        let (a, _) = try await started(network, "a", try TestCA.identity("alice")) { _ in false }
        let (b, bobPeer) = try await started(network, "b", try TestCA.identity("bob")) { _ in true }
        let stream = b.incomingLinks()
        await #expect { _ = try await a.dial(bobPeer) } throws: { ($0 as? PeerSyncError)?.code == .untrustedCertificate }
        try await Task.sleep(for: .milliseconds(100))
        await b.stop()
        var yielded = 0
        for await _ in stream { yielded += 1 }
        #expect(yielded == 0)
        await a.stop()
    }

    @Test func partitionsRefuseDialsAndBreakLinks() async throws {
        let network = LoopbackNetwork()
        let (a, _) = try await started(network, "a", try TestCA.identity("alice")) { _ in true }
        let (b, bobPeer) = try await started(network, "b", try TestCA.identity("bob")) { _ in true }
        let link = try await a.dial(bobPeer)
        network.partition(["a"], ["b"])
        await #expect { _ = try await link.receive() } throws: { ($0 as? PeerSyncError)?.code == .connectionReset }
        await #expect { _ = try await a.dial(bobPeer) } throws: { ($0 as? PeerSyncError)?.code == .connectionRefused }
        network.heal()
        _ = try await a.dial(bobPeer)
        await a.stop()
        await b.stop()
    }

    @Test func aSilentAcceptorTimesOutTheHandshake() async throws {
        let network = LoopbackNetwork()
        let (a, _) = try await started(network, "a", try TestCA.identity("alice"), handshakeTimeout: .milliseconds(300)) { _ in true }
        // A plain loopback listener that accepts and never answers.
        let silent = try LoopbackTransport(network: network, host: "s").listenLoopback(on: Endpoint(url: "loopback://s:0"))
        let holder = Task { () -> LoopbackConnection? in try? await silent.acceptLoopback() }
        let peer = DiscoveredPeer(name: "s", peerID: try PeerID("silent"), group: try PeerGroupID("g"), addresses: ["s"],
                                  port: UInt16(silent.endpoint.port ?? 0), metadata: PeerMetadata(), protocolVersion: 1, discovery: .inProcess)
        await #expect { _ = try await a.dial(peer) } throws: { ($0 as? PeerSyncError)?.code == .timeout }
        _ = await holder.value
        await silent.close()
        await a.stop()
    }

    @Test func stopEndsTheStreamAndAllowsAnotherStart() async throws {
        let network = LoopbackNetwork()
        let identity = try TestCA.identity("alice")
        let links = InProcessMeshLinks(network: network, host: "a")
        let context = MeshLinkContext(identity: identity, authenticate: { _ in true })
        let first = try await links.start(context)
        await #expect(throws: PeerSyncError.self) { _ = try await links.start(context) }
        let stream = links.incomingLinks()
        await links.stop()
        await links.stop()
        for await _ in stream { Issue.record("a link after stop") }
        let second = try await links.start(context)
        #expect(second.addresses == ["a"] && first.addresses == ["a"])
        await links.stop()
    }
}
