import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Testing

@Suite struct ConcurrentEditsTests {
    /// The seeds to run: 100 by default; `PEERSYNC_CONVERGENCE_SEEDS=N` runs N.
    static let seeds = convergenceSeeds(default: 100)

    /// Three to six peers edit one document concurrently (nobody deletes it), then sync in a
    /// random order — random directions, more edits in between — so conflicts are resolved
    /// again and again, by different peers, against branches resolved away earlier. It must
    /// end live and identical everywhere, with its current revision an open leaf. (Before the
    /// fix, 9 of the first 60 seeds ended deleted: a resolution re-created a revision that an
    /// earlier resolution had closed, and the closing tombstone under it became current.)
    @Test(arguments: seeds)
    func concurrentEditsNeverEndDeleted(seed: Int) async throws {
        var rng = SplitMix64(state: UInt64(seed) &* 7919 &+ 1)
        let n = 3 + seed % 4
        try await withPeers(n) { p in
            for peer in p { try peer.listen() }
            try await save(try p[0].defaultCollection, "x", ["by": "p0"])
            for j in 1..<n { try await replicate(p[0], to: p[j], type: .push) }
            for peer in p { try await save(try peer.defaultCollection, "x", ["by": .string(peer.name)]) }
            for _ in 0..<(3 * n) {
                let (i, j) = randomPair(n, using: &rng)
                let type: ReplicatorType = [.push, .pull, .pushAndPull].randomElement(using: &rng) ?? .pushAndPull
                try await replicate(p[i], to: p[j], type: type)
                if Int.random(in: 0..<4, using: &rng) == 0 {
                    let k = Int.random(in: 0..<n, using: &rng)
                    try await save(try p[k].defaultCollection, "x", ["by": .string(p[k].name), "again": true])
                }
            }
            for _ in 0..<4 {
                for i in 0..<n { for j in 0..<n where i != j { try await replicate(p[i], to: p[j]) } }
            }
            var finals: [String] = []
            for peer in p {
                finals.append(try await snapshot(try peer.defaultCollection)["x"] ?? "absent")
                let revs = try #require(try await peer.defaultCollection.revisions(of: "x"))
                let current = try #require(revs.revision(revs.currentRevID))
                #expect(current.isLeaf && !current.isDeleted && !current.flags.contains(.closed),
                        "seed \(seed): \(peer.name)'s current revision \(current.revID) is not an open live leaf")
            }
            #expect(Set(finals).count == 1, "seed \(seed) did not converge: \(finals)")
            #expect(finals.allSatisfy { $0.contains(" false ") }, "seed \(seed) ended deleted: \(finals)")
        }
    }
}
