import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

@Suite struct ReplicationSupportTests {
    @Test(arguments: Backend.available)
    func insertRevisionWithHistory(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let result = try await c.insertRevision(docID: "r", revID: .t(3, "c"), history: [.t(2, "b"), .t(1, "a")],
                                                    body: ["v": 3], deleted: false)
            #expect(result.added == 3 && result.inserted && result.sequence == 1)
            #expect(result.currentRevID == .t(3, "c") && !result.isConflicted && result.commonAncestorIndex == nil)
            let doc = try #require(try await c.document(id: "r"))
            #expect(doc.revisionID == RevisionID.t(3, "c").description && doc.int(forKey: "v") == 3)

            let revs = try #require(try await c.revisions(of: "r"))
            #expect(revs.revisions.map(\.revID) == [.t(3, "c"), .t(2, "b"), .t(1, "a")])
            #expect(revs.history(of: .t(3, "c")) == [.t(2, "b"), .t(1, "a")])
            #expect(revs.history(of: .t(3, "c"), maxCount: 1) == [.t(2, "b")])
            #expect(revs.revision(.t(2, "b"))?.hasBody == false)
            #expect(try await c.revisionBody(docID: "r", revID: .t(2, "b")) == nil)
            #expect(try await c.revisionBody(docID: "r", revID: .t(3, "c")) == ["v": 3])

            // Known revision: nothing changes, no new sequence.
            let again = try await c.insertRevision(docID: "r", revID: .t(3, "c"), history: [.t(2, "b")], body: ["v": 3],
                                                   deleted: false)
            #expect(!again.inserted && again.sequence == nil && again.commonAncestorIndex == 0)
            #expect(try await c.lastSequence == 1)

            // A local edit on top, then a pulled descendant of it.
            var local = doc.toMutable()
            local.setInt(4, forKey: "v")
            try await c.save(document: &local)
            let localRev = try RevisionID(try #require(local.revisionID))
            let pulled = try await c.insertRevision(docID: "r", revID: .t(5, "e"), history: [localRev, .t(3, "c")],
                                                    body: ["v": 5], deleted: false)
            #expect(pulled.added == 1 && pulled.commonAncestorIndex == 1 && !pulled.isConflicted)
            #expect(try await c.document(id: "r")?.int(forKey: "v") == 5)

            // Pulled tombstone.
            let tomb = try await c.insertRevision(docID: "r", revID: .t(6, "f"), history: [.t(5, "e")], body: [:],
                                                  deleted: true)
            #expect(tomb.inserted)
            #expect(try await c.document(id: "r") == nil)
            #expect(try await c.changes(since: 0).first?.deleted == true)

            // Bad input.
            await expectError(.invalidArgument) {
                try await c.insertRevision(docID: "bad", revID: .t(3, "c"), history: [.t(1, "a")], body: [:], deleted: false)
            }
            await expectError(.invalidArgument) {
                try await c.insertRevision(docID: "bad", revID: .t(1, "a"), history: [], body: ["_id": "x"], deleted: false)
            }
            await expectError(.invalidArgument) {
                try await c.insertRevision(docID: "bad", revID: try RevisionID("9999999999999999999-aa"), history: [], body: [:],
                                           deleted: false)
            }
            await expectError(.invalidDocumentID) {
                try await c.insertRevision(docID: "", revID: .t(1, "a"), history: [], body: [:], deleted: false)
            }
            // Legacy attachments are allowed in pulled bodies.
            #expect(try await c.insertRevision(docID: "legacy", revID: .t(1, "a"), history: [],
                                               body: ["_attachments": [:]], deleted: false).inserted)
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    /// A passive peer (no-conflicts mode) takes a push that is not a fast-forward only when it
    /// changes nothing but the revision ID upwards: the current revision's content (body, or
    /// deletion) under a higher ID. The current branch is closed, so no conflict is left.
    @Test(arguments: Backend.available)
    func noConflictsModeTakesTheSameContentUnderAHigherRevision(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "k", data: ["v": "same"])
            try await c.save(document: &doc)
            let current = try RevisionID(try #require(doc.revisionID))
            let other = RevisionID(generation: 1, digest: "0000000000000000000000000000000000000001")
            // Refused: a different body, or the same body under a lower ID.
            await expectError(.conflict) {
                try await c.insertRevision(docID: "k", revID: .t(2, "zz"), history: [other], body: ["v": "different"],
                                           deleted: false, allowConflict: false)
            }
            await expectError(.conflict) {
                try await c.insertRevision(docID: "k", revID: RevisionID(generation: 1, digest: "0000000000000000000000000000000000000002"),
                                           history: [], body: ["v": "same"], deleted: false, allowConflict: false)
            }
            // Taken: the same body under a higher ID; the old current branch is closed.
            let higher = RevisionID(generation: 2, digest: "ffffffffffffffffffffffffffffffffffffffff")
            let result = try await c.insertRevision(docID: "k", revID: higher, history: [other], body: ["v": "same"],
                                                    deleted: false, allowConflict: false)
            #expect(result.inserted && !result.isConflicted && result.currentRevID == higher)
            let revs = try #require(try await c.revisions(of: "k"))
            #expect(revs.currentRevID == higher && !revs.isConflicted)
            let closing = revs.leaves.filter { $0.revID != higher }
            #expect(closing.count == 1 && closing.allSatisfy { $0.isDeleted && $0.flags.contains(.closed) && $0.parentRevID == current })
            #expect(try await c.document(id: "k")?.string(forKey: "v") == "same")
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    @Test(arguments: Backend.available)
    func pulledConflictKeepsLocalCurrentUntilResolved(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "k", data: ["who": "base"])
            try await c.save(document: &doc)
            let base = try RevisionID(try #require(doc.revisionID))
            doc.setString("local", forKey: "who")
            try await c.save(document: &doc)
            let localRev = try RevisionID(try #require(doc.revisionID))

            // The remote edited the same base: a conflicting branch with a higher revision ID.
            let remoteRev = RevisionID(generation: 2, digest: "ffffffffffffffffffffffffffffffffffffffff")
            let result = try await c.insertRevision(docID: "k", revID: remoteRev, history: [base],
                                                    body: ["who": "remote"], deleted: false)
            #expect(result.inserted && result.isConflicted)
            #expect(result.currentRevID == localRev, "the local revision stays current")
            #expect(try await c.document(id: "k")?.string(forKey: "who") == "local")
            let feed = try await c.changes(since: 0)
            #expect(feed.count == 1 && feed[0].conflicted)
            let revs = try #require(try await c.revisions(of: "k"))
            #expect(revs.isConflicted && revs.leaves.count == 2)
            #expect(revs.leaves.first?.revID == localRev)
            #expect(revs.revision(remoteRev)?.isConflict == true)
            #expect(try await db.checkIntegrity().isEmpty)

            // No-conflicts mode refuses such a branch.
            await expectError(.conflict) {
                try await c.insertRevision(docID: "k", revID: .t(2, "ab"), history: [base], body: [:], deleted: false,
                                           allowConflict: false)
            }

            // Resolve: remote wins, merged body as a child of the remote revision (CBL's rule).
            let merged = try await c.resolveConflict(docID: "k", winningRevID: remoteRev, losingRevID: localRev,
                                                     mergedBody: ["who": "merged"])
            #expect(merged.generation == 3)
            #expect(merged == RevisionID.next(parent: remoteRev, deleted: false,
                                              canonicalBody: JSONValue.object(["who": "merged"]).canonicalData))
            let after = try #require(try await c.revisions(of: "k"))
            #expect(!after.isConflicted && after.currentRevID == merged)
            #expect(after.revision(localRev) == nil, "the losing branch is removed")
            #expect(after.revisions.allSatisfy { !$0.isConflict })
            #expect(after.history(of: merged) == [remoteRev, base])
            #expect(try await c.document(id: "k")?.string(forKey: "who") == "merged")
            #expect(try await c.changes(since: 0).first?.conflicted == false)

            await expectError(.invalidArgument) {
                try await c.resolveConflict(docID: "k", winningRevID: merged, losingRevID: base)
            }
            await expectError(.notFound) {
                try await c.resolveConflict(docID: "nope", winningRevID: merged, losingRevID: base)
            }
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    @Test func resolveWithoutMergeAndWithDeletion() async throws {
        try await withDatabase(.memory) { db, _ in
            let c = try db.defaultCollection()
            _ = try await c.insertRevision(docID: "d", revID: .t(2, "b"), history: [.t(1, "a")], body: ["x": 1], deleted: false)
            _ = try await c.insertRevision(docID: "d", revID: .t(2, "c"), history: [.t(1, "a")], body: ["x": 2], deleted: false)
            #expect(try await c.revisions(of: "d")?.isConflicted == true)
            // Winner without a merged body: it simply becomes the only branch.
            let current = try await c.resolveConflict(docID: "d", winningRevID: .t(2, "c"), losingRevID: .t(2, "b"))
            #expect(current == .t(2, "c"))
            #expect(try await c.document(id: "d")?.int(forKey: "x") == 2)

            _ = try await c.insertRevision(docID: "e", revID: .t(2, "b"), history: [.t(1, "a")], body: ["x": 1], deleted: false)
            _ = try await c.insertRevision(docID: "e", revID: .t(2, "c"), history: [.t(1, "a")], body: ["x": 2], deleted: false)
            let deleted = try await c.resolveConflict(docID: "e", winningRevID: .t(2, "b"), losingRevID: .t(2, "c"),
                                                      mergedBody: [:], mergedDeleted: true)
            #expect(deleted.generation == 3)
            #expect(try await c.document(id: "e") == nil)
            #expect(try await c.documentIncludingDeleted(id: "e")?.isDeleted == true)
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    @Test func twoDatabasesConvergeOnTheSameWinner() async throws {
        // Two peers receive the same three branches in opposite orders; after both know
        // everything and resolve deterministically (same rule), they hold the same tree.
        let branches: [(RevisionID, [RevisionID], [String: JSONValue])] = [
            (.t(2, "b1"), [.t(1, "a")], ["v": 1]),
            (.t(3, "c2"), [.t(2, "b2"), .t(1, "a")], ["v": 2]),
            (.t(2, "b3"), [.t(1, "a")], ["v": 3]),
        ]
        var trees: [DocumentRevisions] = []
        for order in [[0, 1, 2], [2, 1, 0]] {
            try await withDatabase(.memory) { db, _ in
                let c = try db.defaultCollection()
                for i in order {
                    try await c.insertRevision(docID: "x", revID: branches[i].0, history: branches[i].1,
                                               body: branches[i].2, deleted: false)
                }
                // Resolve every conflict: highest revision wins (the default resolver's tie rule).
                while let revs = try await c.revisions(of: "x"), revs.leaves.filter({ !$0.isDeleted }).count > 1 {
                    let live = revs.leaves.filter { !$0.isDeleted }.map(\.revID).sorted(by: >)
                    try await c.resolveConflict(docID: "x", winningRevID: live[0], losingRevID: live[1])
                }
                trees.append(try #require(try await c.revisions(of: "x")))
            }
        }
        #expect(trees.count == 2)
        #expect(trees[0].currentRevID == .t(3, "c2"))
        #expect(trees[0].currentRevID == trees[1].currentRevID)
        #expect(Set(trees[0].revisions.map(\.revID)) == Set(trees[1].revisions.map(\.revID)))
    }

    @Test func transactionsInsertRevisionsInBatches() async throws {
        try await withDatabase(.memory) { db, _ in
            let c = try db.defaultCollection()
            let inserted = try await db.inBatch { txn in
                var count = 0
                for i in 0..<50 {
                    let r = try txn.insertRevision(docID: "d\(i)", revID: .t(1, "aa"), history: [], body: ["i": .int(Int64(i))],
                                                   deleted: false, in: c)
                    if r.inserted { count += 1 }
                }
                #expect(try txn.revisions(of: "d7", in: c)?.currentRevID == .t(1, "aa"))
                return count
            }
            #expect(inserted == 50)
            #expect(try await c.count == 50)
        }
    }
}
