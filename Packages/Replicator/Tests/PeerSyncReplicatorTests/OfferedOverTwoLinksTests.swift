import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Testing

/// A mesh peer hears of each new revision from several neighbours at about the same time. The
/// database's `RevisionsInFlight` makes it fetch each revision over one link only.
@Suite(.timeLimit(.minutes(5)))
struct OfferedOverTwoLinksTests {
    @Test func aRevisionOfferedByTwoPeersAtOnceIsFetchedOnce() async throws {
        try await withPeers(3) { p in
            let count = 300
            for i in 0..<count { try await save(p[0].defaultCollection, "doc-\(i)", ["i": .int(Int64(i))]) }
            try p[0].listen()
            try p[1].listen()
            // p1 gets the same revisions as p0.
            try await replicate(p[1], to: p[0], type: .pull)
            #expect(try await snapshot(p[1].defaultCollection) == snapshot(p[0].defaultCollection))
            // p2 pulls from both at once, over links slow enough that the two pulls overlap.
            let events = EventLog()
            let slowLink = LinkConditions(latency: .milliseconds(20))
            // The default 60 s reply timeout, as in a mesh: a claim is waited for while the other
            // link keeps delivering, up to 15 s (the tests' usual 10 s would allow only 2.5 s,
            // which a loaded machine exceeds).
            async let fromP0 = replicate(p[2], to: p[0], type: .pull, events: events, conditions: slowLink,
                                         replyTimeout: .seconds(60))
            async let fromP1 = replicate(p[2], to: p[1], type: .pull, events: events, conditions: slowLink,
                                         replyTimeout: .seconds(60))
            let statuses = try await [fromP0, fromP1]
            #expect(statuses.allSatisfy { $0.error == nil })
            #expect(try await snapshot(p[2].defaultCollection) == snapshot(p[0].defaultCollection))
            let received = events.documents.filter { $0.error == nil }.count
            // Each revision once; a few twice only if a claim's wait ran out on a slow machine.
            #expect(received >= count)
            #expect(received <= count + count / 10, "\(received) revisions received for \(count) documents")
            #expect(p[2].db.revisionsInFlight.count == 0, "claims left behind")
        }
    }
}
