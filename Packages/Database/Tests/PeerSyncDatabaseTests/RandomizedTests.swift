import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase


@Suite struct RandomizedTests {
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func randomRevTreeOperationsKeepTheTreeConsistent(_ seed: UInt64) throws {
        var rng = SplitMix64(seed: seed)
        var tree = RevTree()
        for step in 0..<300 {
            let choice = Int.random(in: 0..<10, using: &rng)
            switch choice {
            case 0..<4:
                // Local edit on the winner.
                let body = Array("{\"s\":\(step)}".utf8)
                let deleted = Int.random(in: 0..<8, using: &rng) == 0
                tree.addLocal(parent: tree.winnerIndex, body: deleted ? Array("{}".utf8) : body, deleted: deleted,
                              hasAttachments: false)
            case 4..<8 where !tree.isEmpty:
                // A pulled branch of 1–3 new revisions from a random node.
                let from = Int.random(in: 0..<tree.nodes.count, using: &rng)
                let ancestry = tree.ancestry(of: from).map { tree[$0].revID }
                let extra = Int.random(in: 1...3, using: &rng)
                var chain: [RevisionID] = []
                for k in 0..<extra {
                    let gen = tree[from].revID.generation + UInt64(extra - k)
                    chain.append(RevisionID(generation: gen, digest: String(format: "%08x", UInt32.random(in: 0...UInt32.max, using: &rng))))
                }
                let deleted = Int.random(in: 0..<6, using: &rng) == 0
                let result = try tree.insertHistory(revID: chain[0], history: Array(chain.dropFirst()) + ancestry,
                                                    body: Array("{\"b\":\(step)}".utf8), deleted: deleted,
                                                    hasAttachments: false, allowConflict: true, markConflict: true)
                #expect(result.added == extra)
            case 8:
                // Resolve: purge a random non-winning leaf.
                let leaves = tree.leafIndices
                if leaves.count > 1 {
                    tree.purgeBranch(leaf: leaves[Int.random(in: 1..<leaves.count, using: &rng)])
                }
            default:
                tree.prune(maxDepth: Int.random(in: 3...20, using: &rng))
                tree.dropOldBodies(ancestorDepth: 1)
            }
            guard let w = tree.winnerIndex else { continue }
            #expect(tree.validate().isEmpty, "seed \(seed) step \(step): \(tree.validate())")
            #expect(tree[w].isLeaf)
            // The winner sorts before every other node.
            #expect(tree.nodes.indices.allSatisfy { $0 == w || !RevTree.sortsBefore(tree[$0], tree[w]) })
            let decoded = try RevTree.decode(tree.encode(), winnerBody: tree[w].body ?? [])
            #expect(decoded == tree, "seed \(seed) step \(step): encoding does not round-trip")
        }
    }

    /// Random saves, deletes and purges, compared with a plain dictionary after every step.
    @Test(arguments: Backend.available)
    func databaseMatchesAModel(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let config = makeConfig(backend, dir)
        var db = try await Database(name: "model", config: config)
        var rng = SplitMix64(seed: 42)
        var model: [String: [String: JSONValue]] = [:]
        var everSaved = Set<String>()
        for step in 0..<300 {
            let c = try db.defaultCollection()
            let id = "d\(Int.random(in: 0..<15, using: &rng))"
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<6:
                var doc = try await c.document(id: id)?.toMutable() ?? MutableDocument(id: id)
                doc.setInt(step, forKey: "step")
                if Bool.random(using: &rng) { doc.setString(String(repeating: "x", count: step % 50), forKey: "pad") }
                try await c.save(document: &doc)
                model[id] = doc.properties
                everSaved.insert(id)
            case 6..<8:
                if let doc = try await c.document(id: id) {
                    try await c.delete(document: doc)
                    model[id] = nil
                }
            case 8:
                if model[id] != nil || everSaved.contains(id) {
                    do {
                        try await c.purge(id: id)
                    } catch let error as PeerSyncError where error.code == .notFound {}
                    model[id] = nil
                    everSaved.remove(id)
                }
            default:
                // Reopen now and then.
                try await db.close()
                db = try await Database(name: "model", config: config)
            }
            let read = try await db.defaultCollection().document(id: id)
            #expect(read?.properties == model[id], "step \(step) \(id)")
        }
        let c = try db.defaultCollection()
        #expect(try await c.count == model.count)
        #expect(try await c.documentIDs() == model.keys.sorted())
        let feed = try await c.changes(since: 0)
        #expect(Set(feed.map(\.docID)) == everSaved)
        #expect(feed.filter { !$0.deleted }.map(\.docID).sorted() == model.keys.sorted())
        #expect(feed.map(\.sequence) == feed.map(\.sequence).sorted())
        #expect(try await db.checkIntegrity().isEmpty)
        try await db.close()
    }
}
