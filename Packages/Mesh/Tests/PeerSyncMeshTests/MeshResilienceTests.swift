import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncLoopback
import PeerSyncMesh
import PeerSyncReplicator
import PeerSyncTransport
import Testing

/// Partitions, churn, duplicate dials and restarts.
@Suite struct MeshResilienceTests {
    /// 12 peers in three groups of 4 (6 in groups of 2 under a sanitizer).
    @Test func partitionIntoThreeGroupsThenHeal() async throws {
        let size = meshSize(12, sanitized: 6)
        let third = size / 3
        try await withMesh(size) { mesh in
            try await mesh.startAll()
            for peer in mesh.peers { try await peer.save("before-\(peer.name)", ["by": .string(peer.name)]) }
            try await mesh.expectConvergence(expecting: size, within: .seconds(60), "not converged before the partition")
            let groups = [Array(mesh.peers[0..<third]), Array(mesh.peers[third..<2 * third]), Array(mesh.peers[2 * third..<size])]
            mesh.network.partition(groups.map { $0.map(\.name) })
            for peer in mesh.peers {
                try await peer.save("during-\(peer.name)", ["by": .string(peer.name)])
                // Each side also edits a document of its own that every peer had.
                try await peer.save("before-\(peer.name)", ["edited by": .string(peer.name)])
            }
            // Each side converges on its own: its new documents and its edits.
            for group in groups {
                try await mesh.expectConvergence(group, expecting: size + third, within: .seconds(60), "a side did not converge")
            }
            // Nothing crossed the partition.
            let otherSide = mesh.peers[third].name
            #expect(try await mesh.peers[0].snapshot()["during-\(otherSide)"] == nil)
            mesh.network.heal()
            try await mesh.expectConvergence(expecting: size + size, within: .seconds(90), "not converged after the heal")
            let edited = try await mesh.peers[0].snapshot()
            #expect(edited.values.allSatisfy { !$0.hasSuffix("deleted") })
            #expect(edited["before-\(otherSide)"]?.hasPrefix("2-") == true, "the edit made during the partition did not win everywhere")
        }
    }

    /// A document edited differently on every side of a partition (six concurrent branches,
    /// resolved pairwise by several active sides at once) must settle on one live winner
    /// everywhere. (It used to end deleted in every run: a resolution re-created a revision an
    /// earlier resolution had closed, and the closing tombstone under it became current — fixed
    /// in the revision tree's `reopen`; the Replicator's `ConcurrentEditsTests` pin it down.)
    @Test func concurrentEditsOnEverySideSettleOnALiveWinner() async throws {
        try await withMesh(6, prefix: "k") { mesh in
            try await mesh.startAll()
            try await mesh.peers[0].save("contested", ["by": "k0"])
            try await mesh.expectConvergence(expecting: 1, within: .seconds(30), "not converged before the partition")
            mesh.network.partition([["k0", "k1"], ["k2", "k3"], ["k4", "k5"]])
            for peer in mesh.peers { try await peer.save("contested", ["by": .string(peer.name)]) }
            try await Task.sleep(for: .seconds(1))
            mesh.network.heal()
            try await mesh.expectConvergence(expecting: 1, within: .seconds(60), "not converged after the heal")
            let contested = try await mesh.peers[0].snapshot()["contested"] ?? "absent"
            #expect(!contested.hasSuffix("deleted"), "concurrent edits ended as a deletion: \(contested)")
        }
    }

    /// 10 peers, half of them churning (6 under a sanitizer).
    @Test func churnWhileWritingConverges() async throws {
        let size = meshSize(10, sanitized: 6)
        try await withMesh(size) { mesh in
            try await mesh.startAll()
            let churning = Array(mesh.peers[size / 2..<size])
            var written = 0
            for round in 0..<3 {
                for peer in churning { await peer.replicator.stop() }
                // Writes continue everywhere: on running peers and in the stopped peers' databases.
                for peer in mesh.peers {
                    try await peer.save("r\(round)-\(peer.name)", ["round": .int(Int64(round))])
                    written += 1
                }
                try await Task.sleep(for: .milliseconds(300))
                for peer in churning { try await peer.replicator.start() }
                for peer in mesh.peers.prefix(size / 2) {
                    try await peer.save("r\(round)-after-\(peer.name)", ["round": .int(Int64(round))])
                    written += 1
                }
                try await Task.sleep(for: .milliseconds(300))
            }
            try await mesh.expectConvergence(expecting: written, within: .seconds(90), "not converged after churn")
        }
    }

    @Test func bothSidesDiallingAtOnceLeavesExactlyOneLink() async throws {
        let network = try InProcessMeshNetwork()
        var tuning = MeshTuning()
        // The designated side's dial takes longer than the other side waits before it dials
        // too: both links complete, one must go.
        tuning.handshakeTimeout = .seconds(1)
        let dials = LockedValue(0)
        let delay = slow(.seconds(3))
        let wrap: @Sendable (any MeshLinkTransport) -> any MeshLinkTransport = { DelayedLinks(wrapping: $0, dialDelay: delay, dials: dials) }
        let a = try await MeshPeer("ra", network: network, tuning: tuning, wrapLinks: wrap)
        let b = try await MeshPeer("rb", network: network, tuning: tuning, wrapLinks: wrap)
        try await a.replicator.start()
        try await b.replicator.start()
        #expect(try await eventually(.seconds(20)) { dials.withLock { $0 } >= 2 })
        #expect(try await eventually(.seconds(20)) {
            a.replicator.peerInfo(for: b.replicator.peerID)?.replicatorTransport != nil
                && b.replicator.peerInfo(for: a.replicator.peerID)?.replicatorTransport != nil
                && network.links.liveLinkCount == 1
        })
        // And it does not stay two, and it carries documents. (On a heavily loaded machine the
        // 1 s handshake timeout this test sets can drop the link and both sides dial again at
        // once — two links for a moment, seen beside six busy loops — or the 3 s dial delay
        // leave none for a moment; the documents check below then needs the re-dialled link.)
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await eventually(.seconds(10)) { network.links.liveLinkCount <= 1 })
        try await a.save("x", ["v": 1])
        #expect(try await eventually(.seconds(30)) { try await b.snapshot()["x"] != nil })
        await a.close()
        await b.close()
    }

    @Test func aPeerRestartedAtANewAddressResumes() async throws {
        try await withMesh(3) { mesh in
            try await mesh.startAll()
            for i in 0..<20 { try await mesh.peers[0].save("d\(i)", ["i": .int(Int64(i))]) }
            #expect(try await mesh.awaitConvergence(expecting: 20, stallLimit: .seconds(30)))
            let moved = mesh.peers[2]
            await moved.replicator.stop()
            let received = Recorder<PeerDocumentReplication>()
            moved.replicator.addPeerDocumentReplicationListener { received.append($0) }
            try await mesh.peers[1].save("new", ["v": 1])
            // Its links listen on a new port now; peers find it there and resume.
            try await moved.replicator.start()
            #expect(try await mesh.awaitConvergence(expecting: 21, stallLimit: .seconds(30)))
            try await Task.sleep(for: .milliseconds(300))
            let pulledAgain = received.all.filter { !$0.isPush }.flatMap(\.documents).filter { $0.id.hasPrefix("d") }
            #expect(pulledAgain.isEmpty, "documents it had were pulled again: \(pulledAgain.map(\.id))")
        }
    }

    /// Handshakes slower than the configured timeout — a loaded device. Every message takes
    /// 0.3 s on the way and the timeout is 0.4 s: a dial needs 0.6 s, an accept 0.9 s, so with a
    /// fixed timeout no link ever forms (this test failed so before the stretch). Each timeout
    /// doubles the run's handshake timeout (`MeshLinkContext.handshakeTimeout`, up to ×8): the
    /// peers link and sync.
    @Test func handshakesSlowerThanTheTimeoutStillFormALink() async throws {
        let network = try InProcessMeshNetwork(links: LinkConditions(latency: .milliseconds(300)))
        var tuning = MeshTuning()
        tuning.handshakeTimeout = .milliseconds(400)
        let a = try await MeshPeer("sa", network: network, tuning: tuning)
        let b = try await MeshPeer("sb", network: network, tuning: tuning)
        let mesh = TestMesh(wrapping: [a, b], network: network)
        do {
            try await mesh.startAll()
            try await a.save("from-a", ["by": "a"])
            try await b.save("from-b", ["by": "b"])
            try await mesh.expectConvergence(expecting: 2, within: .seconds(60), "slow handshakes never formed a link")
        } catch {
            await mesh.close()
            throw error
        }
        await mesh.close()
    }

    @Test func closingTheDatabaseStopsTheReplicator() async throws {
        let network = try InProcessMeshNetwork()
        let peer = try await MeshPeer("dbc", network: network)
        try await peer.replicator.start()
        #expect(peer.replicator.status.active)
        try await peer.database.close()
        #expect(!peer.replicator.status.active)
        await peer.close()
    }
}
