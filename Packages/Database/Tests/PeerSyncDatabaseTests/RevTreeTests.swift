import PeerSyncCore
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

private func body(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct RevTreeTests {
    @Test func localEditsFormAChainWithDeterministicIDs() throws {
        var tree = RevTree()
        let a = tree.addLocal(parent: nil, body: body(#"{"v":1}"#), deleted: false, hasAttachments: false)
        let b = tree.addLocal(parent: a, body: body(#"{"v":2}"#), deleted: false, hasAttachments: false)
        #expect(tree.nodes.count == 2)
        #expect(tree[a].revID.generation == 1 && tree[b].revID.generation == 2)
        #expect(!tree[a].isLeaf && tree[b].isLeaf)
        #expect(tree.winnerIndex == b)
        #expect(tree[b].revID == RevisionID.next(parent: tree[a].revID, deleted: false, canonicalBody: body(#"{"v":2}"#)))
        #expect(!tree.hasConflict)
        #expect(tree.validate().isEmpty)
    }

    @Test func insertHistoryAddsUnknownAncestorsWithoutBodies() throws {
        var tree = RevTree()
        let result = try tree.insertHistory(revID: .t(3, "c"), history: [.t(2, "b"), .t(1, "a")], body: body("{}"),
                                            deleted: false, hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(result.added == 3 && result.commonAncestor == nil)
        #expect(tree.nodes.count == 3)
        #expect(tree[tree.index(of: .t(1, "a"))!].body == nil)
        #expect(tree[tree.index(of: .t(2, "b"))!].body == nil)
        #expect(tree.winner?.revID == .t(3, "c"))
        #expect(tree.winner?.isConflict == false)
        // The same revision again changes nothing.
        let again = try tree.insertHistory(revID: .t(3, "c"), history: [.t(2, "b")], body: body("{}"), deleted: false,
                                           hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(again.added == 0 && again.commonAncestor == 0)
        // Extending the current leaf is not a conflict.
        let next = try tree.insertHistory(revID: .t(5, "e"), history: [.t(4, "d"), .t(3, "c"), .t(2, "b")], body: body("{}"),
                                          deleted: false, hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(next.added == 2 && next.commonAncestor == 2)
        #expect(tree.winner?.revID == .t(5, "e") && !tree.hasConflict)
        #expect(tree.validate().isEmpty)
    }

    @Test func branchFromNonLeafIsFlaggedConflictAndLocalStaysCurrent() throws {
        var tree = RevTree()
        _ = try tree.insertHistory(revID: .t(2, "b"), history: [.t(1, "a")], body: body(#"{"l":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        // A remote branch 2-z (higher digest than 2-b) starts from 1-a, which is not a leaf.
        let remote = try tree.insertHistory(revID: .t(2, "z"), history: [.t(1, "a")], body: body(#"{"r":1}"#), deleted: false,
                                            hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(remote.added == 1)
        #expect(tree[remote.index].isConflict)
        #expect(tree.winner?.revID == .t(2, "b"), "non-conflict leaves win over conflict leaves")
        #expect(tree.hasConflict)
        // Extending the conflict branch keeps it a conflict.
        let ext = try tree.insertHistory(revID: .t(3, "y"), history: [.t(2, "z")], body: body("{}"), deleted: false,
                                         hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(tree[ext.index].isConflict)
        #expect(tree.winner?.revID == .t(2, "b"))
        // Without allowConflict, creating a branch is refused.
        #expect(throws: PeerSyncError.self) {
            try tree.insertHistory(revID: .t(2, "q"), history: [.t(1, "a")], body: body("{}"), deleted: false,
                                   hasAttachments: false, allowConflict: false, markConflict: true)
        }
        // A second root is a conflict too.
        let root = try tree.insertHistory(revID: .t(1, "r"), history: [], body: body("{}"), deleted: false,
                                          hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(tree[root.index].isConflict)
        #expect(tree.validate().isEmpty)
    }

    @Test func winnerOrder() throws {
        func node(_ id: RevisionID, _ flags: RevisionFlags) -> RevTree.Node {
            RevTree.Node(revID: id, parent: nil, flags: flags, body: [])
        }
        // Leaves first.
        #expect(RevTree.sortsBefore(node(.t(1, "a"), [.leaf]), node(.t(9, "z"), [])))
        // Non-conflict before conflict, even with a lower revision ID.
        #expect(RevTree.sortsBefore(node(.t(1, "a"), [.leaf]), node(.t(9, "z"), [.leaf, .conflict])))
        // Live before deleted.
        #expect(RevTree.sortsBefore(node(.t(1, "a"), [.leaf]), node(.t(9, "z"), [.leaf, .deleted])))
        // Conflict outranks deletion: a non-conflict tombstone beats a live conflict leaf.
        #expect(RevTree.sortsBefore(node(.t(1, "a"), [.leaf, .deleted]), node(.t(9, "z"), [.leaf, .conflict])))
        // Then the higher generation, then the higher digest.
        #expect(RevTree.sortsBefore(node(.t(3, "a"), [.leaf]), node(.t(2, "z"), [.leaf])))
        #expect(RevTree.sortsBefore(node(.t(2, "b"), [.leaf]), node(.t(2, "a"), [.leaf])))
    }

    @Test func liveBranchBesideADeletedWinnerReplacesTheTombstone() throws {
        // The CouchDB/LiteCore rule at the tree level: a branch started while the document is
        // deleted is not flagged as a conflict, and live sorts before deleted, so it becomes
        // the current revision. Whether a concurrent edit should lose against a deletion is
        // decided by the replicator before it inserts (see Packages/Replicator/README.md).
        var tree = RevTree()
        let a = tree.addLocal(parent: nil, body: body("{}"), deleted: false, hasAttachments: false)
        _ = tree.addLocal(parent: a, body: body("{}"), deleted: true, hasAttachments: false)
        _ = try tree.insertHistory(revID: .t(2, "ff"), history: [tree[a].revID], body: body(#"{"x":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(tree.winner?.isDeleted == false)
        #expect(tree.winner?.revID == .t(2, "ff"))
        #expect(!tree.hasConflict, "recreating a deleted document is not a conflict")
    }

    @Test func sameTreeInDifferentOrdersHasTheSameWinner() throws {
        let histories: [(RevisionID, [RevisionID])] = [
            (.t(3, "c1"), [.t(2, "b1"), .t(1, "a")]),
            (.t(3, "c2"), [.t(2, "b2"), .t(1, "a")]),
            (.t(4, "d3"), [.t(3, "c3"), .t(2, "b1"), .t(1, "a")]),
            (.t(2, "b9"), [.t(1, "a")]),
        ]
        var winners = Set<RevisionID>()
        var leafSets = Set<Set<RevisionID>>()
        for permutation in permutations(Array(histories.indices)) {
            var tree = RevTree()
            for i in permutation {
                // markConflict: false models a tree whose branches were all accepted as equals
                // (e.g. written locally); with markConflict the first-arrived branch stays
                // current by design, which differs per peer until resolved.
                _ = try tree.insertHistory(revID: histories[i].0, history: histories[i].1, body: body("{}"), deleted: false,
                                           hasAttachments: false, allowConflict: true, markConflict: false)
            }
            #expect(tree.validate().isEmpty)
            winners.insert(try #require(tree.winner).revID)
            leafSets.insert(Set(tree.leafIndices.map { tree[$0].revID }))
        }
        #expect(winners == [.t(4, "d3")])
        #expect(leafSets.count == 1)
    }

    @Test func pruningKeepsLeavesAndRecentGenerations() throws {
        var tree = RevTree()
        var last: Int? = nil
        for i in 0..<30 { last = tree.addLocal(parent: last, body: body(#"{"i":\#(i)}"#), deleted: false, hasAttachments: false) }
        // A conflicting branch forking at generation 5.
        let fork = tree.nodes.firstIndex { $0.revID.generation == 5 }!
        let branch = try tree.insertHistory(revID: .t(6, "ee"), history: [tree[fork].revID], body: body("{}"), deleted: false,
                                            hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(tree[branch.index].isConflict)
        let leavesBefore = Set(tree.leafIndices.map { tree[$0].revID })
        tree.prune(maxDepth: 10)
        let leavesAfter = Set(tree.leafIndices.map { tree[$0].revID })
        #expect(leavesBefore == leavesAfter)
        #expect(tree.validate().isEmpty)
        // Main branch: generations 21…30 kept; the short branch keeps 6-ee and its ancestors up to depth 10.
        let main = tree.nodes.filter { !$0.isConflict }.map(\.revID.generation)
        #expect(Set(main) == Set(1...5).union(21...30), "generations kept: \(main.sorted())")
        #expect(tree.nodes.allSatisfy { node in
            node.isLeaf || tree.nodes.contains { $0.isLeaf && $0.revID.generation - node.revID.generation < 10 }
        })
        #expect(tree.winner?.revID.generation == 30)
    }

    @Test func pruneDepthOnAChain() {
        var tree = RevTree()
        var last: Int? = nil
        for i in 0..<25 { last = tree.addLocal(parent: last, body: body(#"{"i":\#(i)}"#), deleted: false, hasAttachments: false) }
        tree.prune(maxDepth: 20)
        #expect(tree.nodes.count == 20)
        #expect(tree.nodes.map(\.revID.generation).min() == 6)
        #expect(tree.nodes.filter { $0.parent == nil }.count == 1)
        #expect(tree.validate().isEmpty)
    }

    @Test func oldBodiesAreDropped() {
        var tree = RevTree()
        var last: Int? = nil
        for i in 0..<5 { last = tree.addLocal(parent: last, body: body(#"{"i":\#(i)}"#), deleted: false, hasAttachments: false) }
        tree.setKeepBody(0, true)
        tree.dropOldBodies(ancestorDepth: 1)
        let withBodies = tree.nodes.filter { $0.body != nil }.map(\.revID.generation).sorted()
        #expect(withBodies == [1, 4, 5])
    }

    @Test func purgeBranchRemovesOnlyTheLosingBranch() throws {
        var tree = RevTree()
        _ = try tree.insertHistory(revID: .t(3, "c"), history: [.t(2, "b"), .t(1, "a")], body: body("{}"), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        let loser = try tree.insertHistory(revID: .t(3, "z"), history: [.t(2, "y"), .t(1, "a")], body: body("{}"), deleted: false,
                                           hasAttachments: false, allowConflict: true, markConflict: true)
        #expect(tree.nodes.count == 5 && tree.hasConflict)
        tree.purgeBranch(leaf: loser.index)
        #expect(Set(tree.nodes.map(\.revID)) == [.t(1, "a"), .t(2, "b"), .t(3, "c")])
        #expect(!tree.hasConflict && tree.validate().isEmpty)
    }

    @Test func historyMustBeConsecutive() {
        var tree = RevTree()
        #expect(throws: PeerSyncError.self) {
            try tree.insertHistory(revID: .t(3, "c"), history: [.t(1, "a")], body: body("{}"), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        }
        #expect(tree.isEmpty)
    }

    @Test func encodingRoundTrips() throws {
        var tree = RevTree()
        _ = try tree.insertHistory(revID: .t(3, "c"), history: [.t(2, "b"), .t(1, "a")], body: body(#"{"w":1}"#),
                                   deleted: false, hasAttachments: true, allowConflict: true, markConflict: true)
        _ = try tree.insertHistory(revID: .t(2, "z"), history: [.t(1, "a")], body: body(#"{"c":1}"#), deleted: true,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        let encoded = tree.encode()
        let decoded = try RevTree.decode(encoded, winnerBody: body(#"{"w":1}"#))
        #expect(decoded == tree)
        // Every truncation and a few corruptions fail with .corrupt, never trap.
        for length in 0..<encoded.count {
            #expect(throws: PeerSyncError.self) { try RevTree.decode(Array(encoded.prefix(length)), winnerBody: []) }
        }
        var bad = encoded
        bad[0] = 9
        #expect(throws: PeerSyncError.self) { try RevTree.decode(bad, winnerBody: []) }
        for i in encoded.indices {
            var flipped = encoded
            flipped[i] ^= 0xFF
            _ = try? RevTree.decode(flipped, winnerBody: [])  // must not crash
        }
    }
}

private func permutations(_ items: [Int]) -> [[Int]] {
    guard items.count > 1 else { return [items] }
    var out: [[Int]] = []
    for (i, item) in items.enumerated() {
        var rest = items
        rest.remove(at: i)
        for p in permutations(rest) { out.append([item] + p) }
    }
    return out
}

/// Couchbase Lite's conflict rules as the tree implements them (issue: conflicts the
/// Couchbase Lite way): closed branches never win, a passive peer's no-conflicts insert only
/// fast-forwards the current revision, and a closed branch can be reopened.
@Suite struct ClosedBranchTests {
    /// base 1-a, local 2-b (current), remote 2-z pulled as a conflict.
    func conflicted() throws -> RevTree {
        var tree = RevTree()
        _ = try tree.insertHistory(revID: .t(2, "b"), history: [.t(1, "a")], body: body(#"{"l":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        _ = try tree.insertHistory(revID: .t(2, "z"), history: [.t(1, "a")], body: body(#"{"r":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: true, markConflict: true)
        return tree
    }

    @Test func aClosedLeafNeverWinsOverAnOpenOne() throws {
        var tree = try conflicted()
        // Both branches end in deletions; the local one (under 2-b) closes a resolved branch.
        let closing = tree.addLocal(parent: tree.index(of: .t(2, "b")), body: body("{}"), deleted: true, hasAttachments: false)
        tree.markClosed(closing)
        let remoteEnd = tree.addLocal(parent: tree.index(of: .t(2, "z")), body: body("{}"), deleted: true, hasAttachments: false)
        // Both are deleted leaves of generation 3; whichever has the higher digest, the open one wins.
        #expect(tree.winnerIndex == remoteEnd)
        #expect(tree[closing].isClosed && tree[closing].isLeaf)
        // Whatever the IDs: a closed deleted leaf with the higher ID still sorts after an open one.
        let high = RevTree.Node(revID: .t(3, "ff"), parent: nil, flags: [.leaf, .deleted, .closed], body: [])
        let low = RevTree.Node(revID: .t(3, "00"), parent: nil, flags: [.leaf, .deleted], body: [])
        #expect(RevTree.sortsBefore(low, high) && !RevTree.sortsBefore(high, low))
        // Encoding keeps the flag.
        let decoded = try RevTree.decode(tree.encode(), winnerBody: tree.winner?.body ?? [])
        #expect(decoded == tree)
    }

    @Test func noConflictsInsertOnlyFastForwardsTheCurrentRevision() throws {
        var tree = RevTree()
        let base = tree.addLocal(parent: nil, body: body(#"{"v":0}"#), deleted: false, hasAttachments: false)
        let baseID = tree[base].revID
        let tombstone = tree.addLocal(parent: base, body: body("{}"), deleted: true, hasAttachments: false)
        let tombstoneID = tree[tombstone].revID
        // A live branch beside the deleted current revision is a conflict for a passive peer.
        #expect(throws: PeerSyncError.self) {
            try tree.insertHistory(revID: .t(2, "live"), history: [baseID], body: body(#"{"v":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: false, markConflict: true)
        }
        // So is a new root beside an existing document.
        #expect(throws: PeerSyncError.self) {
            try tree.insertHistory(revID: .t(1, "root"), history: [], body: body(#"{"v":1}"#), deleted: false,
                                   hasAttachments: false, allowConflict: false, markConflict: true)
        }
        // A child of the current revision (here: reviving the tombstone) is accepted.
        let child = try tree.insertHistory(revID: .t(3, "revive"), history: [tombstoneID, baseID], body: body(#"{"v":2}"#),
                                           deleted: false, hasAttachments: false, allowConflict: false, markConflict: true)
        #expect(child.added == 1 && tree.winner?.revID == .t(3, "revive"))
    }

    @Test func reopeningRemovesTheClosingTombstone() throws {
        var tree = try conflicted()
        let closing = tree.addLocal(parent: tree.index(of: .t(2, "z")), body: body("{}"), deleted: true, hasAttachments: false)
        tree.markClosed(closing)
        #expect(tree.winner?.revID == .t(2, "b"))
        let reopenedIndex = tree.reopen(.t(2, "z"))
        let reopened = try #require(reopenedIndex)
        #expect(tree[reopened].isLeaf && !tree[reopened].isClosed)
        #expect(tree.nodes.count == 3, "the closing tombstone is gone")
        #expect(tree.validate().isEmpty)
    }

    /// A revision re-created by a resolution (`addLocal` finds the same ID: same parent and
    /// content) after an earlier resolution had closed a *continuation* of it — an edit on top,
    /// then the closing tombstone — is reopened as a whole: the closed continuation goes and it
    /// is the current revision again. (Before: only a closing tombstone directly under it was
    /// removed, so the tombstone deeper down stayed the only leaf of the branch and became
    /// the document's current revision: concurrent edits ended as a deletion.)
    @Test func recreatingARevisionReopensItsClosedContinuation() throws {
        var tree = try conflicted()
        // 2-z continues: 3-m on top of it, then closed (resolved away by a later resolution).
        let z = try #require(tree.index(of: .t(2, "z")))
        let merged = tree.addLocal(parent: z, body: body(#"{"m":1}"#), deleted: false, hasAttachments: false)
        let mergedID = tree[merged].revID
        tree.markClosed(tree.addLocal(parent: merged, body: body("{}"), deleted: true, hasAttachments: false))
        // 2-b loses too: every leaf is closed except a new resolution's revision, which
        // re-creates 3-m (same parent, same content).
        let b = try #require(tree.index(of: .t(2, "b")))
        tree.markClosed(tree.addLocal(parent: b, body: body("{}"), deleted: true, hasAttachments: false))
        let again = tree.addLocal(parent: tree.index(of: .t(2, "z")), body: body(#"{"m":1}"#), deleted: false, hasAttachments: false)
        #expect(tree[again].revID == mergedID)
        #expect(tree[again].isLeaf && !tree[again].isClosed)
        #expect(tree.winner?.revID == mergedID && tree.winner?.isDeleted == false)
        #expect(tree.validate().isEmpty)
    }

    /// Reopening keeps every branch that ends in an open leaf: only closed-only subtrees go.
    @Test func reopeningKeepsOpenContinuations() throws {
        var tree = try conflicted()
        let z = try #require(tree.index(of: .t(2, "z")))
        let open = tree.addLocal(parent: z, body: body(#"{"o":1}"#), deleted: false, hasAttachments: false)
        let openID = tree[open].revID
        let zAgain = try #require(tree.index(of: .t(2, "z")))
        let closedSide = tree.addLocal(parent: zAgain, body: body(#"{"c":1}"#), deleted: false, hasAttachments: false)
        tree.markClosed(tree.addLocal(parent: closedSide, body: body("{}"), deleted: true, hasAttachments: false))
        let count = tree.nodes.count
        let reopenedIndex = tree.reopen(.t(2, "z"))
        let reopened = try #require(reopenedIndex)
        #expect(!tree[reopened].isLeaf, "an open branch still continues it")
        #expect(tree.index(of: openID) != nil)
        #expect(tree.nodes.count == count - 2, "the closed continuation (edit and tombstone) is gone")
        #expect(tree.validate().isEmpty)
    }
}
