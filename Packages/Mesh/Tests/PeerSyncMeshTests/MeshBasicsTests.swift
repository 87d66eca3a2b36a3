import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncReplicator
import Testing

@Suite struct MeshBasicsTests {
    @Test func twoPeersSyncBothWays() async throws {
        try await withMesh(2) { mesh in
            let (a, b) = (mesh.peers[0], mesh.peers[1])
            try await mesh.startAll()
            try await a.save("from-a", ["by": "a"])
            try await b.save("from-b", ["by": "b"])
            try await mesh.expectConvergence(expecting: 2, within: .seconds(20), "not converged")
            // One link, seen from both ends, dialled by exactly one of them.
            let infoAtA = try #require(a.replicator.peerInfo(for: b.replicator.peerID))
            let infoAtB = try #require(b.replicator.peerInfo(for: a.replicator.peerID))
            #expect(infoAtA.replicatorTransport == .wifi && infoAtB.replicatorTransport == .wifi)
            #expect(infoAtA.certificate == b.identity.certificate)
            #expect(infoAtB.certificate == a.identity.certificate)
            #expect(mesh.network.links.liveLinkCount == 1)
        }
    }

    @Test func peerIDIsTheCertificateDigestBeforeStartAndAfterStop() async throws {
        try await withMesh(1) { mesh in
            let peer = mesh.peers[0]
            #expect(peer.replicator.peerID.rawValue == peer.identity.certificate.peerID)
            #expect(peer.replicator.peerID.rawValue.count == 64)
            try await peer.replicator.start()
            await peer.replicator.stop()
            #expect(peer.replicator.peerID.rawValue == peer.identity.peerID)
            let own = try #require(peer.replicator.peerInfo(for: peer.replicator.peerID))
            #expect(own.certificate == peer.identity.certificate)
            #expect(!own.online)
            #expect(own.replicatorStatus.activity == .stopped)
        }
    }

    /// The convergence wait of these tests waits while replication makes progress; it must still
    /// fail when nothing moves (here: a peer cut off for good), or no test could catch a stall.
    @Test func theConvergenceWaitFailsWhenNothingMoves() async throws {
        try await withMesh(2) { mesh in
            let (a, b) = (mesh.peers[0], mesh.peers[1])
            mesh.network.partition([[a.name], [b.name]])
            try await mesh.startAll()
            try await a.save("one", ["n": 1])
            let clock = ContinuousClock(), start = clock.now
            #expect(try await mesh.awaitConvergence(expecting: 1, stallLimit: .seconds(2)) == false)
            // Gives up after the stall limit (the one document written before the wait never
            // reaches b), not at the overall cap of four stall limits.
            #expect(clock.now - start < slow(.seconds(8)))
            mesh.network.heal()
            #expect(try await mesh.awaitConvergence(expecting: 1, stallLimit: .seconds(20)))
        }
    }

    @Test func restartAfterStopSyncsAgain() async throws {
        try await withMesh(2) { mesh in
            let (a, b) = (mesh.peers[0], mesh.peers[1])
            try await mesh.startAll()
            try await a.save("one", ["n": 1])
            #expect(try await mesh.awaitConvergence(expecting: 1, stallLimit: .seconds(20)))
            await a.replicator.stop()
            #expect(a.replicator.status.active == false)
            #expect(a.replicator.neighborPeers.isEmpty)
            try await a.save("two", ["n": 2])
            try await b.save("three", ["n": 3])
            try await a.replicator.start()
            #expect(a.replicator.status.active)
            try await mesh.expectConvergence(expecting: 3, within: .seconds(20), "not converged after the restart")
            // Stop twice, start twice: both idempotent.
            await a.replicator.stop()
            await a.replicator.stop()
            try await a.replicator.start()
            try await a.replicator.start()
            #expect(a.replicator.status.active)
        }
    }

    @Test func gettersAnswerFromState() async throws {
        try await withMesh(3) { mesh in
            let a = mesh.peers[0]
            #expect(a.replicator.neighborPeers.isEmpty)
            #expect(a.replicator.status(for: .wifi)?.active == false)
            #expect(a.replicator.status(for: .bluetooth) == nil)
            #expect(a.replicator.peerInfo(for: mesh.peers[1].replicator.peerID) == nil)
            try await mesh.startAll()
            let others = Set(mesh.peers.dropFirst().map(\.replicator.peerID))
            #expect(try await eventually(.seconds(10)) { Set(a.replicator.neighborPeers) == others })
            #expect(!a.replicator.neighborPeers.contains(a.replicator.peerID))
            #expect(a.replicator.status.active)
            #expect(a.replicator.status.transport == nil)
            #expect(a.replicator.status(for: .wifi)?.active == true)
            let info = try #require(a.replicator.peerInfo(for: mesh.peers[1].replicator.peerID))
            #expect(info.online)
            #expect(info.transports == [.wifi])
            // Three peers: a triangle; every peer eventually knows every link.
            #expect(try await eventually(.seconds(20)) {
                let graph = a.replicator.graph
                return graph.peers.count == 3 && graph.linkCount == 3
            })
        }
    }

    @Test func eventsReportDiscoveryStatusesAndDocuments() async throws {
        try await withMesh(2) { mesh in
            let (a, b) = (mesh.peers[0], mesh.peers[1])
            let statuses = Recorder<MultipeerReplicatorStatus>()
            let discoveries = Recorder<PeerDiscoveryStatus>()
            let replications = Recorder<PeerReplicatorStatus>()
            let documents = Recorder<PeerDocumentReplication>()
            let removed = Recorder<PeerDiscoveryStatus>()
            for peer in [a, b] {
                peer.replicator.addPeerReplicatorStatusListener { replications.append($0) }
                peer.replicator.addPeerDocumentReplicationListener { documents.append($0) }
            }
            a.replicator.addStatusListener { statuses.append($0) }
            a.replicator.addPeerDiscoveryStatusListener { discoveries.append($0) }
            let token = a.replicator.addPeerDiscoveryStatusListener { removed.append($0) }
            a.replicator.removeChangeListener(withToken: token)
            let stream = a.replicator.peerDocumentReplications()
            let firstStreamed = Task { () -> PeerDocumentReplication? in
                for await event in stream { return event }
                return nil
            }
            try await mesh.startAll()
            try await b.save("doc", ["v": 1])
            #expect(try await mesh.awaitConvergence(expecting: 1, stallLimit: .seconds(20)))
            #expect(try await eventually(.seconds(5)) {
                documents.all.contains { !$0.isPush && $0.peerID == b.replicator.peerID }
                    && documents.all.contains { $0.isPush && $0.peerID == a.replicator.peerID }
            })
            let pulled = try #require(documents.all.first { !$0.isPush })
            #expect(pulled.transport == .wifi)
            #expect(pulled.documents.first?.id == "doc")
            #expect(pulled.documents.first?.scope == "_default")
            #expect(pulled.documents.first?.collection == "_default")
            #expect(pulled.documents.first?.error == nil)
            let streamed = await firstStreamed.value
            #expect(streamed?.documents.first?.id == "doc")
            #expect(discoveries.all.contains(PeerDiscoveryStatus(peerID: b.replicator.peerID, transport: .wifi, online: true)))
            #expect(removed.all.isEmpty)
            #expect(statuses.all.contains { $0.active && $0.transport == .wifi })
            #expect(statuses.all.contains { $0.active && $0.transport == nil })
            // Both ends report the link, one outgoing and one incoming.
            #expect(try await eventually(.seconds(5)) {
                let atA = replications.all.filter { $0.peerID == b.replicator.peerID && $0.status.activity == .idle }
                let atB = replications.all.filter { $0.peerID == a.replicator.peerID && $0.status.activity == .idle }
                return !atA.isEmpty && !atB.isEmpty && atA.last!.outgoing != atB.last!.outgoing
            })
            await b.replicator.stop()
            #expect(try await eventually(.seconds(10)) {
                discoveries.all.contains(PeerDiscoveryStatus(peerID: b.replicator.peerID, transport: .wifi, online: false))
                    && replications.all.contains { $0.peerID == b.replicator.peerID && $0.status.activity == .stopped }
            })
            await a.replicator.stop()
            #expect(try await eventually(.seconds(5)) { statuses.all.last == MultipeerReplicatorStatus(active: false) })
        }
    }

    @Test func statusStreamReplaysTheCurrentStatus() async throws {
        try await withMesh(1) { mesh in
            let peer = mesh.peers[0]
            try await peer.replicator.start()
            var iterator = peer.replicator.statusChanges().makeAsyncIterator()
            let first = await iterator.next()
            #expect(first == MultipeerReplicatorStatus(active: true))
            await peer.replicator.stop()
            var sawInactive = false
            while let next = await iterator.next() {
                if next == MultipeerReplicatorStatus(active: false) { sawInactive = true; break }
            }
            #expect(sawInactive)
        }
    }

    @Test func filtersAndResolverAreGivenThePeerID() async throws {
        let network = try InProcessMeshNetwork()
        let seen = Recorder<String>()
        let setup: @Sendable (Collection) -> MultipeerCollectionConfiguration = { collection in
            var config = MultipeerCollectionConfiguration(collection: collection)
            config.pushFilter = { peerID, document, _ in
                seen.append("push \(peerID.rawValue.prefix(8))")
                return document.id != "private"
            }
            config.pullFilter = { peerID, document, _ in
                seen.append("pull \(peerID.rawValue.prefix(8))")
                return document.id != "refused"
            }
            return config
        }
        let a = try await MeshPeer("fa", network: network, collectionSetup: setup)
        let b = try await MeshPeer("fb", network: network, collectionSetup: setup)
        try await a.save("private", ["x": 1])
        try await a.save("refused", ["x": 2])
        try await a.save("shared", ["x": 3])
        try await b.save("from-b", ["x": 4])
        try await a.replicator.start()
        try await b.replicator.start()
        #expect(try await eventually(.seconds(20)) {
            let atB = try await b.snapshot()
            let atA = try await a.snapshot()
            return atB["shared"] != nil && atA["from-b"] != nil
        })
        try await Task.sleep(for: .milliseconds(300))
        let atB = try await b.snapshot()
        #expect(atB["private"] == nil, "the push filter let a private document through")
        #expect(atB["refused"] == nil, "the pull filter stored a refused document")
        let aID = a.replicator.peerID.rawValue.prefix(8)
        let bID = b.replicator.peerID.rawValue.prefix(8)
        #expect(seen.all.contains("push \(bID)"))
        #expect(seen.all.contains("pull \(aID)"))
        await a.close()
        await b.close()
    }
}
