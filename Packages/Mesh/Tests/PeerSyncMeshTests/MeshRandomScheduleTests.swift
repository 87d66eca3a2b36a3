import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncMesh
import PeerSyncReplicator
import Testing

/// Seeded random schedules: peers save, edit the same documents concurrently, delete, stop and
/// restart, and lose their links to partitions, in an order drawn from the seed; after the
/// network heals and every peer runs, every database must hold the same current revisions.
@Suite struct MeshRandomScheduleTests {
    /// Seeds to run: 100 by default (10 under a sanitizer); `PEERSYNC_MESH_SEEDS=N` runs N
    /// (e.g. 1,000 once).
    static let seedCount = PeerSyncMeshTests.seedCount("PEERSYNC_MESH_SEEDS", normal: 100, sanitized: 10)
    /// Ten batches run side by side; the seeds of a batch run one after another.
    static let batches = 0..<min(10, seedCount)

    @Test(arguments: batches)
    func randomSchedulesConverge(batch: Int) async throws {
        for seed in stride(from: batch, to: Self.seedCount, by: Self.batches.count) {
            try await run(seed: seed)
        }
    }

    func run(seed: Int) async throws {
        var random = SplitMix64(seed: UInt64(seed) &* 0x9E37_79B9 &+ 17)
        let count = 3 + seed % 2
        var tuning = MeshTuning()
        tuning.handshakeTimeout = .seconds(1)
        tuning.maximumRetryDelay = .milliseconds(300)
        try await withMesh(count, prefix: "s\(seed)-", tuning: tuning) { mesh in
            let names = mesh.peers.map(\.name)
            var running = Set(names)
            try await mesh.startAll()
            let documents = ["a", "b", "c", "d", "e"]
            for _ in 0..<8 {
                let peer = mesh.peers[Int.random(in: 0..<count, using: &random)]
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    let id = documents.randomElement(using: &random) ?? "a"
                    try await peer.save(id, ["v": .int(Int64.random(in: 0..<1000, using: &random)), "by": .string(peer.name)])
                case 5:
                    try await peer.delete(documents.randomElement(using: &random) ?? "a")
                case 6:
                    if running.remove(peer.name) != nil { await peer.replicator.stop() }
                case 7:
                    if running.insert(peer.name).inserted { try await peer.replicator.start() }
                case 8:
                    let cut = Int.random(in: 1..<count, using: &random)
                    let shuffled = names.shuffled(using: &random)
                    mesh.network.partition([Array(shuffled[..<cut]), Array(shuffled[cut...])])
                default:
                    mesh.network.heal()
                }
                try await Task.sleep(for: .milliseconds(Int.random(in: 0..<80, using: &random)))
            }
            mesh.network.heal()
            for peer in mesh.peers where !running.contains(peer.name) { try await peer.replicator.start() }
            // The stall limit is longer than the links' 60 s reply timeout: on a heavily loaded
            // machine a `rev` can go unanswered that long (its reply waits behind the process's
            // other tasks), and the timeout and a re-dialled link are then what moves it on.
            if try await mesh.awaitConvergence(stallLimit: .seconds(100)) { return }
            // Any divergence fails; the report says which kind. "Same content everywhere" was
            // the known issue fixed in the Replicator (equal-bodied revisions of one conflict
            // swapping IDs around a cycle of links: Mesh README, "Known issues"); different
            // content, or a document missing on a peer, is a stalled replication.
            var snapshots: [[String: String]] = []
            for peer in mesh.peers { snapshots.append(try await peer.snapshot()) }
            let differing = Set(snapshots.flatMap(\.keys)).filter { id in Set(snapshots.map { $0[id] }).count > 1 }
            var sameContent = true
            for id in differing {
                var contents = Set<String>()
                for (peer, snapshot) in zip(mesh.peers, snapshots) {
                    guard snapshot[id] != nil else { contents.insert("absent"); continue }
                    let document = try await peer.collection.document(id: id)  // nil: deleted
                    contents.insert(document.map { JSONValue.object($0.properties).canonicalString } ?? "deleted")
                }
                if contents.count != 1 || contents.contains("absent") { sameContent = false }
            }
            let kind = sameContent ? "same content everywhere, different revision IDs" : "different content or a missing document"
            Issue.record(Comment(rawValue: "seed \(seed) did not converge (\(kind)):\n\(try await mesh.divergence())"))
        }
    }
}
