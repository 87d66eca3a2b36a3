import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// Couchbase Lite's conflict rules, which keep a real Couchbase Lite peer from losing data:
/// the resolution continues the remote branch, the local losing branch is closed by a
/// tombstone that stays local, only current revisions are replicated, and a passive peer
/// never lets a push create a conflict. Each test models one observed data-loss scenario.
@Suite struct CouchbaseLiteRulesTests {
    /// `k1` edited on both sides from the same parent; returns the remote (passive) revision.
    func conflict(_ active: Peer, _ passive: Peer, local: [String: JSONValue], remote: [String: JSONValue]) async throws -> RevisionID {
        let a = try active.defaultCollection, b = try passive.defaultCollection
        try await save(a, "k1", ["v": "base"])
        try await replicate(active, to: passive, type: .push)
        try await save(a, "k1", local)
        try await save(b, "k1", remote)
        return try RevisionID(try #require(try await b.document(id: "k1")?.revisionID))
    }

    /// Scenario 1: the active side keeps its local revision. Before, it tombstoned the remote
    /// branch and pushed the tombstone (which a Couchbase Lite passive peer accepts as a
    /// fast-forward) plus its own revision (which it refuses): the passive peer ended with the
    /// document deleted. Now the local body continues the remote branch: one fast-forward.
    @Test(arguments: ["localWins", "merge", "default"])
    func resolutionContinuesTheRemoteBranch(_ kind: String) async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let remoteRev = try await conflict(p[0], p[1], local: ["v": "local"], remote: ["v": "remote"])
            var cfg = CollectionConfiguration()
            switch kind {
            case "localWins": cfg.conflictResolver = ConflictResolvers.localWins
            case "merge": cfg.conflictResolver = ConflictResolvers.merge { l, r in
                    ["v": "merged", "l": l.properties["v"] ?? .null, "r": r.properties["v"] ?? .null]
                }
            default: break
            }
            let log = EventLog()
            let status = try await replicate(p[0], to: p[1], config: cfg, events: log)
            #expect(status.error == nil)
            #expect(log.documents.allSatisfy { $0.error == nil }, "\(log.documents)")
            let a = try #require(try await p[0].defaultCollection.revisions(of: "k1"))
            let b = try #require(try await p[1].defaultCollection.revisions(of: "k1"))
            // Both hold the same current revision and body; the passive peer's document is live.
            #expect(a.currentRevID == b.currentRevID)
            #expect(!b.isDeleted && !a.isDeleted)
            let bodyA = try await p[0].defaultCollection.document(id: "k1")?.properties
            let bodyB = try await p[1].defaultCollection.document(id: "k1")?.properties
            #expect(bodyA == bodyB)
            // The current revision is the remote one or its child; the passive peer never got a
            // tombstone or a second branch.
            #expect(a.currentRevID == remoteRev || a.revision(a.currentRevID)?.parentRevID == remoteRev)
            #expect(b.revisions.allSatisfy { !$0.isDeleted }, "\(b.revisions)")
            #expect(b.leaves.count == 1)
            // The local branch is closed here by a tombstone that stays local.
            #expect(a.leaves.contains { $0.isDeleted && $0.flags.contains(.closed) })
            // A second sync moves nothing and reports no conflict.
            let again = EventLog()
            let second = try await replicate(p[0], to: p[1], config: cfg, events: again)
            #expect(second.error == nil)
            #expect(again.documents.isEmpty, "\(again.documents)")
        }
    }

    /// Scenario 2: a listener whose database resolved a conflict (as an active peer towards
    /// someone else) sent a pulling client both leaves, winner first and the branch-closing
    /// tombstone last; Couchbase Lite takes each pulled revision as the server's current one,
    /// so the tombstone won there. Now only the current revision is sent.
    @Test func aListenerSendsOnlyTheCurrentRevision() async throws {
        try await withPeers(3) { p in
            try p[1].listen()
            try p[2].listen()
            var cfg = CollectionConfiguration()
            cfg.conflictResolver = ConflictResolvers.localWins
            _ = try await conflict(p[1], p[2], local: ["v": "p1"], remote: ["v": "p2"])
            try await replicate(p[1], to: p[2], config: cfg)
            let log = EventLog()
            let status = try await replicate(p[0], to: p[1], type: .pull, events: log)
            #expect(status.error == nil)
            let pulled = log.documents.filter { $0.id == "k1" }
            #expect(pulled.count == 1, "\(pulled)")
            #expect(pulled.allSatisfy { !$0.flags.contains(.deleted) && $0.error == nil })
            let client = try await p[0].defaultCollection.revisions(of: "k1")
            let server = try await p[1].defaultCollection.revisions(of: "k1")
            #expect(client?.currentRevID == server?.currentRevID)
            #expect(client?.revisions.contains { $0.isDeleted } == false)
            #expect(try await p[0].defaultCollection.document(id: "k1")?.string(forKey: "v") == "p1")
        }
    }

    func proposeStatuses(_ blip: BLIPConnection, _ entries: JSONValue) async throws -> [JSONValue] {
        let reply = try await blip.sendRequest(.request("proposeChanges", properties: [("conflictIncludesRev", "true")],
                                                        body: entries.canonicalData))
        #expect(!reply.isError, "\(reply.bodyString)")
        return try replyAnswers(reply, count: entries.arrayValue?.count ?? 0)
    }

    /// A passive peer never lets a push create a conflict: a proposal whose parent is not the
    /// current revision is answered 409 with the current revision in the proposeChanges reply
    /// (before, a proposal onto a deleted document got 0 and its body travelled for nothing),
    /// and a `rev` whose parent is not current is refused with 409 with or without
    /// `noconflicts` (before, a `rev` without it created a branch).
    @Test func passiveRefusesEveryPushThatIsNotAFastForward() async throws {
        try await withPeers(1) { p in
            let server = p[0]
            try server.listen()
            let c = try server.defaultCollection
            try await save(c, "live", ["v": 0])
            let liveBase = try #require(try await c.document(id: "live")?.revisionID)
            try await save(c, "live", ["v": 1])
            let liveCurrent = try #require(try await c.document(id: "live")?.revisionID)
            try await save(c, "gone", ["v": 0])
            let goneBase = try #require(try await c.document(id: "gone")?.revisionID)
            try await c.delete(document: try #require(try await c.document(id: "gone")))
            let goneCurrent = try #require(try await c.documentIncludingDeleted(id: "gone")?.revisionID)

            let blip = try await server.rawClient()
            await blip.start()
            let answers = try await proposeStatuses(blip, .array([
                .array(["live", .string(fakeRev(2, "x")), .string(liveBase)]),      // parent not current
                .array(["live", .string(liveCurrent), .string(liveBase)]),          // already current
                .array(["live", .string(fakeRev(3, "y")), .string(liveCurrent)]),   // fast-forward
                .array(["gone", .string(fakeRev(2, "z")), .string(goneBase)]),      // edit vs deletion
                .array(["gone", .string(fakeRev(3, "w")), .string(goneCurrent)]),   // child of the tombstone
                .array(["new", .string(fakeRev(1, "n")), ""]),                      // new document
            ]))
            #expect(answers[0] == .object(["status": .int(409), "rev": .string(liveCurrent)]))
            #expect(answers[1] == .int(304))
            #expect(answers[2] == .int(0))
            #expect(answers[3] == .object(["status": .int(409), "rev": .string(goneCurrent)]))
            #expect(answers[4] == .int(0))
            #expect(answers[5] == .int(0))

            for noConflicts in [true, false] {
                var props: BLIPProperties = [("id", "live"), ("rev", fakeRev(2, "branch\(noConflicts)")),
                                             ("history", liveBase), ("sequence", "1")]
                if noConflicts { props["noconflicts"] = "1" }
                let refused = try await blip.sendRequest(.request("rev", properties: props, body: Array(#"{"v":9}"#.utf8)))
                #expect(refused.errorDomain == "HTTP" && refused.errorCode == 409, "\(refused.bodyString)")
            }
            let onTombstone = try await blip.sendRequest(.request("rev", properties: [
                ("id", "gone"), ("rev", fakeRev(2, "edit")), ("history", goneBase), ("sequence", "2"),
            ], body: Array(#"{"v":9}"#.utf8)))
            #expect(onTombstone.errorDomain == "HTTP" && onTombstone.errorCode == 409)
            let live = try #require(try await c.revisions(of: "live"))
            #expect(live.currentRevID.description == liveCurrent && live.leaves.count == 1)
            #expect(try await c.revisions(of: "gone")?.leaves.count == 1)
            await blip.close()
        }
    }

    /// `subChanges` with `activeOnly` (Couchbase Lite pulling into an empty database) skips
    /// deleted documents; before, a fresh client got every tombstone.
    /// Scenario 3 (found by the mesh's random schedules: three or four peers kept swapping two
    /// revision IDs of one document for good): two revisions with the *same body* on different
    /// branches — "local wins" copies the local body onto the remote branch, so the copy and
    /// the original meet later. Whichever side is active, both must end on the higher revision
    /// ID, without a new revision. Before, the active side always adopted the peer's revision
    /// ("the remote as it is"), so the outcome depended on which side was local, and around a
    /// cycle of peers the IDs rotated.
    @Test(arguments: [true, false])
    func equalBodiesSettleOnTheHigherRevisionWhicheverSideIsActive(_ higherSideIsActive: Bool) async throws {
        try await withPeers(3) { p in
            for peer in p { try peer.listen() }
            try await save(try p[0].defaultCollection, "d", ["v": "zero"])
            try await save(try p[1].defaultCollection, "d", ["v": "one"])
            let rev0 = try RevisionID(try #require(try await p[0].defaultCollection.document(id: "d")?.revisionID))
            let rev1 = try RevisionID(try #require(try await p[1].defaultCollection.document(id: "d")?.revisionID))
            // `high` holds the higher revision (the default resolver's winner), `low` the other.
            let (high, low, highRev) = rev0 > rev1 ? (p[0], p[1], rev0) : (p[1], p[0], rev1)
            let copy = p[2]
            try await replicate(high, to: copy, type: .push)   // the copy holds highRev
            try await replicate(high, to: low, type: .pull)    // local wins: highRev's body on low's branch
            let merged = try #require(try await high.defaultCollection.revisions(of: "d")).currentRevID
            #expect(merged.generation == 2 && merged != highRev)
            // `high` holds `merged`, the copy holds `highRev`: the same body, and merged > highRev.
            let log = EventLog()
            if higherSideIsActive {
                try await replicate(high, to: copy, events: log)
            } else {
                try await replicate(copy, to: high, events: log)
            }
            #expect(log.documents.allSatisfy { $0.error == nil }, "\(log.documents)")
            for peer in [high, copy] {
                let revs = try #require(try await peer.defaultCollection.revisions(of: "d"))
                #expect(revs.currentRevID == merged, "\(peer.name) holds \(revs.currentRevID), not the higher \(merged)")
                #expect(revs.revisions.allSatisfy { $0.revID.generation <= 2 || $0.flags.contains(.closed) },
                        "a new revision was made: \(revs.revisions.map(\.revID))")
                #expect(!revs.isConflicted)
            }
            #expect(try await copy.defaultCollection.document(id: "d")?.properties
                    == high.defaultCollection.document(id: "d")?.properties)
            // Nothing moves on a second sync either way.
            let again = EventLog()
            try await replicate(copy, to: high, events: again)
            try await replicate(high, to: copy, events: again)
            #expect(again.documents.isEmpty, "\(again.documents)")
        }
    }

    @Test func activeOnlySkipsDeletedDocuments() async throws {
        try await withPeers(1) { p in
            let server = p[0]
            try server.listen()
            let c = try server.defaultCollection
            for id in ["keep", "drop"] { try await save(c, id, ["id": .string(id)]) }
            try await c.delete(document: try #require(try await c.document(id: "drop")))

            let blip = try await server.rawClient()
            let seen = Mutex<[String]>([])
            let caughtUp = Mutex(false)
            await blip.setHandler(profile: "changes") { request in
                let entries = try JSONValue(parsing: request.body).arrayValue ?? []
                if entries.isEmpty { caughtUp.withLock { $0 = true } }
                seen.withLock { $0 += entries.compactMap { $0.arrayValue?[1].stringValue } }
                return BLIPMessage(type: .response, body: JSONValue.array(entries.map { _ in .int(0) }).canonicalData)
            }
            await blip.start()
            let sub = try await blip.sendRequest(.request("subChanges", properties: [("batch", "200"), ("activeOnly", "true")]))
            #expect(!sub.isError)
            #expect(try await eventually { caughtUp.withLock { $0 } })
            #expect(seen.withLock { $0 } == ["keep"])
            await blip.close()
        }
    }
}
