import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Testing

typealias SeededRandom = SplitMix64

@Suite struct ConvergenceTests {
    /// The seeds to run: 200 by default; `PEERSYNC_CONVERGENCE_SEEDS=N` runs N.
    static let seeds = convergenceSeeds(default: 200)

    /// Several peers make random saves, deletes and conflicting edits, then sync in a random
    /// order (random directions and types), a third of those syncs interrupted: the link
    /// breaks after a random number of bytes and the replicator gives up (one attempt);
    /// finally every pair syncs until nothing changes. The databases must end identical
    /// (same current revision IDs, deletion flags and bodies; the trees may differ by the
    /// local-only tombstones that closed resolved branches), and one more sweep must move
    /// nothing and report no document error. Three or four peers (by seed), with Couchbase
    /// Lite's rules: passive peers refuse every non-fast-forward push, only current
    /// revisions travel.
    @Test(arguments: seeds)
    func randomizedPeersConverge(seed: Int) async throws {
        var rng = SeededRandom(state: UInt64(seed) &* 7919 &+ 1)
        let peerCount = 3 + seed % 2
        try await withPeers(peerCount) { p in
            for peer in p { try peer.listen() }
            let docIDs = ["a", "b", "c", "d"]
            for _ in 0..<4 {
                // Random local edits.
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    let peer = p[Int.random(in: 0..<peerCount, using: &rng)]
                    let c = try peer.defaultCollection
                    let id = docIDs.randomElement(using: &rng) ?? "a"
                    if Bool.random(using: &rng), let doc = try await c.document(id: id), Int.random(in: 0..<3, using: &rng) == 0 {
                        try await c.delete(document: doc)
                    } else {
                        try await save(c, id, ["v": .int(Int64.random(in: 0..<1000, using: &rng)), "by": .string(peer.name)])
                    }
                }
                // A random sync.
                let (i, j) = randomPair(peerCount, using: &rng)
                let type: ReplicatorType = [.push, .pull, .pushAndPull].randomElement(using: &rng) ?? .pushAndPull
                if Int.random(in: 0..<3, using: &rng) == 0 {
                    // Interrupted: the link breaks part-way (maybe before anything was saved,
                    // maybe between revisions or checkpoints) and the replicator stops.
                    let cut = LinkConditions(dropAfterBytes: Int.random(in: 50...3_000, using: &rng), seed: UInt64(seed))
                    try await replicate(p[i], to: p[j], type: type, conditions: cut, maxAttempts: 1)
                } else {
                    try await replicate(p[i], to: p[j], type: type)
                }
            }
            // Settle: sync every ordered pair until a full sweep changes nothing.
            var stable = false
            for _ in 0..<6 where !stable {
                let before = try await allSnapshots(p)
                for i in 0..<peerCount {
                    for j in 0..<peerCount where i != j {
                        let status = try await replicate(p[i], to: p[j])
                        #expect(status.error == nil, "seed \(seed): \(String(describing: status.error))")
                    }
                }
                let after = try await allSnapshots(p)
                stable = before == after && Set(after).count == 1
            }
            let final = try await allSnapshots(p)
            #expect(Set(final).count == 1, "seed \(seed) did not converge: \(final)")
            // Converged means quiet: another sweep transfers nothing and reports no error.
            let quiet = EventLog()
            for i in 0..<peerCount {
                for j in 0..<peerCount where i != j { try await replicate(p[i], to: p[j], events: quiet) }
            }
            #expect(quiet.documents.isEmpty, "seed \(seed): a converged sweep still moved or failed \(quiet.documents)")
            if Set(final).count != 1 {
                for peer in p {
                    for id in docIDs {
                        if let r = try await peer.defaultCollection.revisions(of: id) {
                            print("DBG \(peer.name) \(id) cur=\(r.currentRevID.description.prefix(8)) " + r.revisions.map { "\($0.revID.description.prefix(8))<\($0.parentRevID?.description.prefix(8) ?? "-")\($0.isDeleted ? "D" : "")\($0.isLeaf ? "L" : "")\($0.isConflict ? "C" : "")" }.joined(separator: " "))
                        }
                    }
                }
            }
        }
    }

    func allSnapshots(_ p: [Peer]) async throws -> [[String: String]] {
        var out: [[String: String]] = []
        for peer in p { out.append(try await snapshot(try peer.defaultCollection)) }
        return out
    }
}
