import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncReplicator
import Testing

/// Meshes of many peers, each writing documents: every database ends identical, the topology
/// keeps its bounds as the peers themselves see it, and documents that reach a peer over
/// several paths are not sent again.
@Suite struct MeshScaleTests {
    /// Writes `perPeer` documents on every peer (some before the start, some after), waits for
    /// every database to hold all of them, and checks the graph each peer sees.
    func converge(_ mesh: TestMesh, perPeer: Int, timeout: Duration) async throws {
        for peer in mesh.peers {
            for i in 0..<perPeer / 2 { try await peer.save("\(peer.name)-\(i)", ["by": .string(peer.name), "i": .int(Int64(i))]) }
        }
        try await mesh.startAll()
        for peer in mesh.peers {
            for i in perPeer / 2..<perPeer { try await peer.save("\(peer.name)-\(i)", ["by": .string(peer.name), "i": .int(Int64(i))]) }
        }
        let expected = mesh.peers.count * perPeer
        try await mesh.expectConvergence(expecting: expected, within: timeout, "\(mesh.peers.count) peers did not converge")
    }

    /// The graph as each peer sees it: connected, within the degree bound, shallow.
    func checkTopology(_ mesh: TestMesh, maximumDegree: Int, diameterBound: Int) async throws {
        let everyone = Set(mesh.peers.map(\.replicator.peerID))
        let settled = try await eventually(.seconds(30)) {
            mesh.peers.allSatisfy { peer in
                let graph = peer.replicator.graph
                return graph.peers == everyone && graph.isConnected
            }
        }
        #expect(settled, "some peer does not see one connected mesh of everyone")
        for peer in mesh.peers {
            let graph = peer.replicator.graph
            #expect(graph.maximumDegree <= maximumDegree, "\(peer.name) sees a peer with \(graph.maximumDegree) links")
            if let diameter = graph.diameter { #expect(diameter <= diameterBound, "\(peer.name) sees diameter \(diameter)") }
            let own = peer.replicator.peerInfo(for: peer.replicator.peerID)?.neighborPeers.count ?? 0
            #expect(own >= 1 && own <= maximumDegree)
        }
    }

    /// 16 peers (8 under a sanitizer).
    @Test func sixteenPeersConvergeWithoutResendingWhatArrivedElsewhere() async throws {
        let size = meshSize(16, sanitized: 8)
        try await withMesh(size) { mesh in
            let pulled = LockedValue(0)
            let pushed = LockedValue(0)
            for peer in mesh.peers {
                peer.replicator.addPeerDocumentReplicationListener { event in
                    let stored = event.documents.filter { $0.error == nil }.count
                    if event.isPush { pushed.withLock { $0 += stored } } else { pulled.withLock { $0 += stored } }
                }
            }
            try await converge(mesh, perPeer: 10, timeout: .seconds(60))
            try await checkTopology(mesh, maximumDegree: 8, diameterBound: 6)
            // Every peer needs each of the documents it did not write once: 16 × 150
            // revisions. A document offered by several neighbours at once may cross twice,
            // never once per path (each peer has about 4 paths to it).
            try await Task.sleep(for: slow(.milliseconds(500)))
            let needed = size * (size - 1) * 10
            let received = pulled.withLock { $0 }
            let sent = pushed.withLock { $0 }
            print("mesh \(size) peers: \(received) revisions stored for \(needed) needed (\(String(format: "%.2f", Double(received) / Double(needed)))×), \(sent) sent")
            #expect(received >= needed)
            #expect(Double(received) <= Double(needed) * 2, "\(received) revisions for \(needed) documents")
        }
    }

    /// 64 peers (12 under a sanitizer: still more than the degree bound allows one peer).
    @Test func sixtyFourPeersConverge() async throws {
        try await withMesh(meshSize(64, sanitized: 12)) { mesh in
            try await converge(mesh, perPeer: 4, timeout: .seconds(120))
            try await checkTopology(mesh, maximumDegree: 8, diameterBound: 10)
        }
    }

    #if SQLite
    @Test func sqlitePeersConverge() async throws {
        try await withMesh(5, prefix: "sql", backend: .sqlite) { mesh in
            try await converge(mesh, perPeer: 20, timeout: .seconds(60))
        }
    }
    #endif
}
