import Foundation
@testable import PeerSyncMesh
import PeerSyncCore
import PeerSyncDiscovery
import Testing

@Suite struct TopologyTests {
    /// `count` peer IDs that look like the mesh's (64 hex digits), drawn from `seed`.
    static func peerIDs(_ count: Int, seed: UInt64) throws -> [PeerID] {
        var random = SplitMix64(seed: seed)
        return try (0..<count).map { _ in
            try PeerID(digest: (0..<32).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        }
    }

    @Test(arguments: [2, 3, 4, 5, 8, 16, 33, 64, 128])
    func desiredGraphIsSymmetricConnectedBoundedAndShallow(_ count: Int) throws {
        for seed in UInt64(0)..<5 {
            let peers = try Self.peerIDs(count, seed: seed)
            let desired = MeshTopology.desiredGraph(of: peers, targetDegree: 4, maximumDegree: 8)
            for (peer, neighbors) in desired {
                #expect(!neighbors.contains(peer))
                for neighbor in neighbors { #expect(desired[neighbor]?.contains(peer) == true, "not symmetric") }
            }
            let graph = MeshGraph(neighborLists: desired)
            #expect(graph.peers.count == count)
            #expect(graph.isConnected)
            #expect(graph.maximumDegree <= 4)
            // Ring plus chords: about log2(N) hops; a plain ring would be N/2.
            let bound = count <= 8 ? 3 : Int((log2(Double(count)) * 1.5).rounded(.up))
            #expect((graph.diameter ?? .max) <= bound, "\(count) peers, seed \(seed): diameter \(graph.diameter ?? -1)")
            // Peers agree whatever order they list the group in.
            #expect(MeshTopology.desiredGraph(of: peers.reversed(), targetDegree: 4, maximumDegree: 8) == desired)
        }
    }

    @Test func aJoinMovesFewLinks() throws {
        let peers = try Self.peerIDs(65, seed: 42)
        let before = MeshGraph(neighborLists: MeshTopology.desiredGraph(of: peers.dropLast(), targetDegree: 4, maximumDegree: 8))
        let after = MeshGraph(neighborLists: MeshTopology.desiredGraph(of: peers, targetDegree: 4, maximumDegree: 8))
        var changed = 0
        for peer in peers.dropLast() where before.adjacency[peer] != after.adjacency[peer] { changed += 1 }
        #expect(changed < 40, "a join changed the links of \(changed) of 64 peers")
    }

    @Test func higherTargetsGiveMoreLinks() throws {
        let peers = try Self.peerIDs(64, seed: 7)
        let four = MeshGraph(neighborLists: MeshTopology.desiredGraph(of: peers, targetDegree: 4, maximumDegree: 8))
        let six = MeshGraph(neighborLists: MeshTopology.desiredGraph(of: peers, targetDegree: 6, maximumDegree: 8))
        let two = MeshGraph(neighborLists: MeshTopology.desiredGraph(of: peers, targetDegree: 2, maximumDegree: 8))
        #expect(two.linkCount == 64)  // the ring alone
        #expect(four.linkCount > two.linkCount && six.linkCount > four.linkCount)
        #expect((six.diameter ?? .max) <= (four.diameter ?? .max))
    }

    @Test func diallerIsSymmetricAndSplitsTheWork() throws {
        let peers = try Self.peerIDs(40, seed: 3)
        var dials: [PeerID: Int] = [:]
        for a in peers {
            for b in peers where a < b {
                let dialler = MeshTopology.dialler(a, b)
                #expect(dialler == MeshTopology.dialler(b, a))
                #expect(dialler == a || dialler == b)
                dials[dialler, default: 0] += 1
            }
        }
        // Each peer dials about half of its 39 possible links, never all or none.
        #expect(dials.values.allSatisfy { (5...34).contains($0) }, "\(dials.values.sorted())")
        #expect(MeshTopology.pairHash(peers[0], peers[1]) == MeshTopology.pairHash(peers[1], peers[0]))
    }

    @Test func neighborMetadataRoundTripsWithinTheDiscoveryLimits() throws {
        let peers = try Self.peerIDs(MeshNeighborMetadata.maximumNeighbors + 5, seed: 9)
        let metadata = MeshNeighborMetadata.metadata(listing: peers)
        #expect(metadata.encodedSize <= PeerMetadata.maxEncodedSize)
        let prefixes = MeshNeighborMetadata.neighborPrefixes(in: metadata)
        #expect(prefixes.count == MeshNeighborMetadata.maximumNeighbors)
        #expect(Set(prefixes) == Set(peers.sorted().prefix(MeshNeighborMetadata.maximumNeighbors).map(MeshNeighborMetadata.prefix(of:))))
        #expect(MeshNeighborMetadata.neighborPrefixes(in: MeshNeighborMetadata.metadata(listing: [])).isEmpty)
        for key in metadata.keys { #expect(key.utf8.count + 1 + (metadata.bytes(forKey: key)?.count ?? 0) <= PeerMetadata.maxEntrySize) }
    }

    @Test func meshGraphMeasuresWhatItShould() throws {
        let ids = try (0..<5).map { try PeerID("n\($0)") }
        // A path n0 - n1 - n2 - n3 and a lone n4, given one direction only.
        let graph = MeshGraph(neighborLists: [ids[0]: [ids[1]], ids[1]: [ids[2]], ids[2]: [ids[3]], ids[4]: []])
        #expect(graph.linkCount == 3)
        #expect(graph.maximumDegree == 2)
        #expect(!graph.isConnected)
        #expect(graph.diameter == nil)
        #expect(graph.components.map(\.count) == [4, 1])
        #expect(graph.distances(from: ids[0])[ids[3]] == 3)
        let path = MeshGraph(neighborLists: [ids[0]: [ids[1]], ids[1]: [ids[2]], ids[2]: [ids[3]]])
        #expect(path.diameter == 3)
    }

    @Test func bridgeIsTheSameFromBothSides() throws {
        let peers = try Self.peerIDs(10, seed: 5)
        let left = Set(peers.prefix(4)), right = Set(peers.suffix(6))
        let fromLeft = try #require(MeshTopology.bridge(between: left, and: right))
        let fromRight = try #require(MeshTopology.bridge(between: right, and: left))
        #expect(fromLeft.0 == fromRight.1 && fromLeft.1 == fromRight.0)
    }
}
