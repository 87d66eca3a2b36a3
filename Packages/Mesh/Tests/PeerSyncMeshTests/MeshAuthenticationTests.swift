import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncReplicator
import PeerSyncTransport
import Testing

@Suite struct MeshAuthenticationTests {
    @Test func untrustedPeersAndOtherGroupsAreNeverLinkedOnEitherEnd() async throws {
        let network = try InProcessMeshNetwork()
        var tuning = MeshTuning()
        tuning.maximumRetryDelay = .seconds(2)
        let trustEveryone = MultipeerCertificateAuthenticator { _, _ in true }
        let a = try await MeshPeer("ta", network: network, tuning: tuning)
        let b = try await MeshPeer("tb", network: network, tuning: tuning)
        // Trusts everyone, but nobody trusts its certificate (another CA).
        let stranger = try await MeshPeer("tc", network: network, identity: try TestCA.identity("tc", issuer: TestCA.other),
                                          authenticator: trustEveryone, tuning: tuning)
        // Trusted, but of another group.
        let outsider = try await MeshPeer("td", network: network, group: "another-group", tuning: tuning)
        let peers = [a, b, stranger, outsider]
        let statusesAtStranger = Recorder<PeerReplicatorStatus>()
        let statusesAtA = Recorder<PeerReplicatorStatus>()
        stranger.replicator.addPeerReplicatorStatusListener { statusesAtStranger.append($0) }
        a.replicator.addPeerReplicatorStatusListener { statusesAtA.append($0) }
        for peer in peers {
            try await peer.save("from-\(peer.name)", ["by": .string(peer.name)])
            try await peer.replicator.start()
        }
        // A and B find each other and sync...
        #expect(try await eventually(.seconds(20)) {
            let (atA, atB) = (try await a.snapshot(), try await b.snapshot())
            return atA.keys.sorted() == ["from-ta", "from-tb"] && atB.keys.sorted() == ["from-ta", "from-tb"]
        })
        // ...the stranger's certificate is refused on every link it is part of, whichever end
        // dialled (each sees a trust error), for a while...
        #expect(try await eventually(.seconds(10)) {
            statusesAtStranger.all.contains { $0.peerID == a.replicator.peerID && $0.status.error.map(Self.isTrustError) == true }
                || statusesAtA.all.contains { $0.peerID == stranger.replicator.peerID && $0.status.error.map(Self.isTrustError) == true }
        })
        try await Task.sleep(for: slow(.seconds(3)))
        // ...and nothing crossed: not to or from the stranger, not to or from the other group.
        #expect(try await stranger.snapshot().keys.sorted() == ["from-tc"])
        #expect(try await outsider.snapshot().keys.sorted() == ["from-td"])
        #expect(try await a.snapshot().keys.sorted() == ["from-ta", "from-tb"])
        #expect(a.replicator.peerInfo(for: stranger.replicator.peerID)?.replicatorTransport == nil)
        #expect(stranger.replicator.peerInfo(for: a.replicator.peerID)?.replicatorTransport == nil)
        #expect(a.replicator.peerInfo(for: outsider.replicator.peerID) == nil)
        #expect(!a.replicator.neighborPeers.contains(outsider.replicator.peerID))
        // Backed off, not a hot loop: a few attempts per peer in these seconds, not one per tick.
        let attempts = statusesAtStranger.all.filter { $0.peerID == a.replicator.peerID && $0.status.activity == .stopped }.count
        #expect(attempts <= 8, "the stranger dialled \(attempts) times")
        for peer in peers { await peer.close() }
    }

    @Test func anIncomingLinkFromAPeerOutsideTheGroupIsClosed() async throws {
        let network = try InProcessMeshNetwork()
        var tuning = MeshTuning()
        tuning.handshakeTimeout = .milliseconds(500)
        let a = try await MeshPeer("ga", network: network, tuning: tuning)
        try await a.replicator.start()
        // Another group's peer that knows A's address dials it directly, bypassing discovery.
        let intruder = InProcessMeshLinks(network: network.links, host: "gx")
        let identity = try TestCA.identity("gx")
        _ = try await intruder.start(MeshLinkContext(identity: identity, authenticate: { _ in true }))
        let browser = try await InProcessDiscovery(registry: network.registry, hostName: "gy").browse(group: a.replicator.config.peerGroupID)
        var target: DiscoveredPeer?
        for await event in browser { target = event.peer; break }
        let link = try await intruder.dial(try #require(target))
        // A holds the link while it waits for discovery to show the peer, then closes it.
        let ended: Bool
        do { ended = try await link.receive() == nil } catch { ended = true }
        #expect(ended)
        #expect(a.replicator.peerInfo(for: try PeerID(identity.peerID)) == nil)
        await browser.stop()
        await intruder.stop()
        await a.close()
    }

    static func isTrustError(_ error: PeerSyncError) -> Bool {
        error.code == .certificateRejected || error.code == .untrustedCertificate
    }
}
