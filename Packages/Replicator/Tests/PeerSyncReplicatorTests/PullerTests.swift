import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
@testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Synchronization
import Testing

/// The ``Puller`` alone against a scripted peer: which revisions it asks for, deltas, `norev`,
/// revocations, and the remote sequence it lets the checkpoint reach.
@Suite struct PullerTests {
    /// Subscribes `collection`'s puller to a scripted peer running `script` on `subChanges`
    /// and waits until the pull is idle (or the session failed). Returns the session.
    func pull(_ collection: PeerSyncDatabase.Collection, network: LoopbackNetwork,
              script: @escaping @Sendable (BLIPConnection) async throws -> Void) async throws -> (ActiveWorkers, ScriptedPeer) {
        let scripted = try ScriptedPeer(network: network, script: script)
        let workers = try await ActiveWorkers.connect(to: scripted, collection: collection, push: false, pull: true)
        let puller = try workers.puller()
        try await puller.subscribe(since: nil, continuous: false, docIDs: nil, channels: nil)
        await puller.waitUntilIdle()
        #expect(scripted.scriptErrors.isEmpty, "\(scripted.scriptErrors)")
        return (workers, scripted)
    }

    /// Sends a `changes` batch for collection 0 and returns the answers, padded to one per entry.
    static func changes(_ blip: BLIPConnection, _ batch: JSONValue) async throws -> (answers: [JSONValue], reply: BLIPMessage) {
        let reply = try await blip.sendRequest(.request("changes", properties: [("collection", "0")], body: batch.canonicalData))
        return (try replyAnswers(reply, count: batch.arrayValue?.count ?? 0), reply)
    }

    /// Sends a `rev` for collection 0; returns "ok" or the error code.
    static func rev(_ blip: BLIPConnection, _ props: BLIPProperties, _ body: JSONValue) async throws -> String {
        var all: BLIPProperties = [("collection", "0")]
        for (k, v) in props { all[k] = v }
        let reply = try await blip.sendRequest(.request("rev", properties: all, body: body.canonicalData))
        return reply.isError ? "\(reply.errorCode ?? 0)" : "ok"
    }

    static func caughtUp(_ blip: BLIPConnection) async throws {
        try await blip.sendNoReply(.request("changes", properties: [("collection", "0")], body: Array("[]".utf8)))
    }

    /// A revision known here is not asked for (0); an unknown one is, with the revisions this
    /// side has of the document (empty for a new one). The checkpoint reaches the batch's
    /// last sequence once every asked-for revision is stored.
    @Test func requestsExactlyTheUnknownRevisions() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let known = try #require(try await save(local, "known", ["v": 1]).revisionID)
            let older = try #require(try await save(local, "older", ["v": 1]).revisionID)
            let newer = fakeRev(2, "older")
            let answers = Mutex<[JSONValue]>([])
            let (workers, scripted) = try await pull(local, network: peers[0].network) { blip in
                let (got, _) = try await Self.changes(blip, [[1, "known", .string(known)],
                                                            [2, "older", .string(newer)],
                                                            [3, "new", .string(fakeRev(1, "new"))]])
                answers.withLock { $0 = got }
                #expect(try await Self.rev(blip, [("id", "older"), ("rev", newer), ("history", older), ("sequence", "2")],
                                           ["v": 2]) == "ok")
                #expect(try await Self.rev(blip, [("id", "new"), ("rev", fakeRev(1, "new")), ("sequence", "3")],
                                           ["v": "new"]) == "ok")
                try await Self.caughtUp(blip)
            }
            let got = answers.withLock { $0 }
            #expect(got.count == 3)
            #expect(got.first == .int(0))
            #expect(got.dropFirst().first?.arrayValue?.contains(.string(older)) == true)
            #expect(got.last == .array([]))
            let puller = try workers.puller()
            #expect(await puller.pulledRemoteSequence == .int(3))
            #expect(try await local.document(id: "older")?.properties == ["v": 2])
            #expect(try await local.document(id: "new")?.properties == ["v": "new"])
            #expect(workers.context.peerRevision(0, "known")?.description == known)
            #expect(workers.log.documents.allSatisfy { $0.error == nil })
            #expect(workers.context.failure == nil)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A delta against a revision this side has is applied; a delta against an unknown base is
    /// refused with 422 and the change stays pending until the revision comes whole.
    @Test func appliesADeltaAndAsksForTheWholeRevisionOnAnUnknownBase() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let before: [String: JSONValue] = ["title": "a document", "n": 1, "list": [1, 2, 3]]
            let after: [String: JSONValue] = ["title": "a document", "n": 2, "list": [1, 2, 3, 4]]
            let base = try #require(try await save(local, "d", before).revisionID)
            let delta = try #require(JSONDelta.create(old: .object(before), new: .object(after)))
            let replies = Mutex<[String]>([])
            let offered = Mutex<String?>(nil)
            let (workers, scripted) = try await pull(local, network: peers[0].network) { blip in
                let (_, reply) = try await Self.changes(blip, [[1, "d", .string(fakeRev(2, "d"))],
                                                              [2, "e", .string(fakeRev(1, "e"))]])
                offered.withLock { $0 = reply.properties["deltas"] }
                var got: [String] = []
                got.append(try await Self.rev(blip, [("id", "d"), ("rev", fakeRev(2, "d")), ("history", base),
                                                    ("deltaSrc", base), ("sequence", "1")], delta))
                got.append(try await Self.rev(blip, [("id", "e"), ("rev", fakeRev(1, "e")), ("deltaSrc", fakeRev(1, "unknown")),
                                                    ("sequence", "2")], ["n": 9]))
                got.append(try await Self.rev(blip, [("id", "e"), ("rev", fakeRev(1, "e")), ("sequence", "2")], ["whole": true]))
                replies.withLock { $0 = got }
                try await Self.caughtUp(blip)
            }
            #expect(offered.withLock { $0 } == "true")
            #expect(replies.withLock { $0 } == ["ok", "422", "ok"])
            #expect(try await local.document(id: "d")?.properties == after)
            #expect(try await local.document(id: "e")?.properties == ["whole": true])
            #expect(try await workers.puller().pulledRemoteSequence == .int(2))
            #expect(workers.log.documents.allSatisfy { $0.error == nil })
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// `norev` 404 (replaced on the peer since its `changes`) completes the change; any other
    /// error fails the session with the peer's error code, and the checkpoint never passes it.
    @Test(arguments: [404, 500])
    func noRev(status: Int) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let (workers, scripted) = try await pull(local, network: peers[0].network) { blip in
                _ = try await Self.changes(blip, [[1, "gone", .string(fakeRev(1, "gone"))],
                                                  [2, "here", .string(fakeRev(1, "here"))]])
                var props: BLIPProperties = [("collection", "0"), ("id", "gone"), ("rev", fakeRev(1, "gone")),
                                             ("sequence", "1"), ("error", String(status))]
                if status != 404 { props["errorCode"] = PeerSyncError.Code.storage.rawValue; props["reason"] = "unreadable" }
                try await blip.sendNoReply(.request("norev", properties: props))
                guard status == 404 else { return }
                _ = try await Self.rev(blip, [("id", "here"), ("rev", fakeRev(1, "here")), ("sequence", "2")], ["v": 1])
                try await Self.caughtUp(blip)
            }
            let puller = try workers.puller()
            if status == 404 {
                #expect(workers.context.failure == nil)
                #expect(await puller.pulledRemoteSequence == .int(2))
                #expect(workers.log.documents.allSatisfy { $0.error == nil })
            } else {
                #expect(workers.context.failure?.code == .storage)
                #expect(await puller.pulledRemoteSequence == nil)
                #expect(workers.log.documents.contains { $0.id == "gone" && $0.error?.code == .storage })
            }
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A revocation flag in `changes` is not asked for and a `_removed` revision is not saved:
    /// both documents are purged (auto-purge) and reported with `accessRemoved`.
    @Test func revocationsPurge() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            try await save(local, "revoked", ["v": 1])
            try await save(local, "removed", ["v": 1])
            let answers = Mutex<[JSONValue]>([])
            let (workers, scripted) = try await pull(local, network: peers[0].network) { blip in
                let (got, _) = try await Self.changes(blip, [[1, "revoked", .string(fakeRev(2, "revoked")), 2],
                                                            [2, "removed", .string(fakeRev(2, "removed"))]])
                answers.withLock { $0 = got }
                _ = try await Self.rev(blip, [("id", "removed"), ("rev", fakeRev(2, "removed")), ("sequence", "2")],
                                       ["_removed": true])
                try await Self.caughtUp(blip)
            }
            let got = answers.withLock { $0 }
            #expect(got.first == .int(0) && got.last?.arrayValue != nil)
            #expect(try await local.revisions(of: "revoked") == nil)
            #expect(try await local.revisions(of: "removed") == nil)
            #expect(Set(workers.log.documents.filter { $0.flags.contains(.accessRemoved) }.map(\.id)) == ["revoked", "removed"])
            #expect(try await workers.puller().pulledRemoteSequence == .int(2))
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A `changes` batch that waits for a revision another link of this database is fetching,
    /// and whose session stops during the wait, leaves no claim behind when the wait ends. (Claims taken after a session's stop were never
    /// released: in a 64-peer mesh every batch offering them over another link then waited
    /// its 2 s quiet limit, and the last documents trickled in for 10–15 s.)
    @Test func aBatchSettledAfterItsSessionStoppedLeavesNoClaims() async throws {
        final class OtherLink: Sendable {}
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let registry = peers[0].db.revisionsInFlight
            let otherLink = OtherLink()
            let fetchedElsewhere = RevisionsInFlight.key(collection: local.fullName, docID: "a", revID: try RevisionID(fakeRev(1, "a")))
            #expect(registry.claim([fetchedElsewhere], owner: ObjectIdentifier(otherLink)).isEmpty)
            let scripted = try ScriptedPeer(network: peers[0].network) { blip in
                // Answered (if ever) after the session stopped: the reply cannot arrive.
                _ = try? await Self.changes(blip, [[1, "a", .string(fakeRev(1, "a"))], [2, "b", .string(fakeRev(1, "b"))]])
            }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: false, pull: true)
            try await workers.puller().subscribe(since: nil, continuous: true, docIDs: nil, channels: nil)
            #expect(try await eventually { registry.waiterCount == 1 }, "the batch never waited for the other link")
            // Waiting, it holds "b"; "a" is the other link's.
            #expect(registry.count == 2)
            await workers.session.stop()
            #expect(registry.count == 1, "the stop released the session's claims")
            // The other link's fetch fails: the batch, its session stopped, reads the database
            // again and takes "a" over.
            registry.release(fetchedElsewhere, owner: ObjectIdentifier(otherLink))
            #expect(try await eventually { registry.waiterCount == 0 }, "the batch still waits")
            // (Time to read the database and claim, which follows the wait at once.)
            try await Task.sleep(for: slow(.milliseconds(500)))
            #expect(try await eventually { registry.count == 0 }, "\(registry.count) claims left behind by a stopped session")
            await scripted.close()
        }
    }
}

