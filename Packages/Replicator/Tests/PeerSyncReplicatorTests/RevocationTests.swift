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

/// Loss of access on the pull side: a revocation flag in `changes` and a `_removed` rev,
/// sent by a scripted peer (P2P listeners never revoke).
@Suite struct RevocationTests {
    @Test(arguments: [true, false])
    func revokedDocumentsArePurgedOrKept(autoPurge: Bool) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            try await save(local, "d1", ["v": 1])
            try await save(local, "d2", ["v": 2])
            let changesReply = Mutex<JSONValue?>(nil)
            let revReplies = Mutex<[String]>([])
            let peer = try ScriptedPeer(network: peers[0].network) { blip in
                // d1: access revoked (flag 2); d2: a normal change whose rev says _removed;
                // d3: a normal new document.
                let changes: JSONValue = [[1, "d1", .string(fakeRev(2, "d1")), 2],
                                          [2, "d2", .string(fakeRev(2, "d2")), 0],
                                          [3, "d3", .string(fakeRev(1, "d3")), 0]]
                let reply = try await blip.sendRequest(.request("changes", properties: [("collection", "0")], body: changes.canonicalData))
                changesReply.withLock { $0 = try? JSONValue(parsing: reply.body) }
                for (seq, id, body) in [(2, "d2", JSONValue.object(["_removed": true])), (3, "d3", ["x": 1])] {
                    let gen = id == "d2" ? 2 : 1
                    let r = try await blip.sendRequest(.request("rev", properties: [
                        ("collection", "0"), ("id", id), ("rev", fakeRev(gen, id)), ("sequence", String(seq)),
                    ], body: body.canonicalData))
                    revReplies.withLock { $0.append(r.isError ? "\(id): \(r.errorCode ?? 0)" : "\(id): ok") }
                }
                try await blip.sendNoReply(.request("changes", properties: [("collection", "0")], body: Array("[]".utf8)))
            }
            let log = EventLog()
            let status = try await peer.pull(into: local, log: log) { $0.enableAutoPurge = autoPurge }
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(peer.scriptErrors.isEmpty)
            // The revoked revision is not requested; the other two are.
            let reply = try #require(changesReply.withLock { $0 }?.arrayValue)
            #expect(reply.first == .int(0))
            #expect(reply.count == 3 && reply[1].arrayValue != nil && reply[2].arrayValue != nil)
            #expect(revReplies.withLock { $0 } == ["d2: ok", "d3: ok"])

            #expect(try await eventually {
                Set(log.documents.filter { $0.flags.contains(.accessRemoved) }.map(\.id)) == ["d1", "d2"]
            })
            #expect(log.documents.allSatisfy { $0.error == nil })
            #expect(try await local.document(id: "d3")?.properties == ["x": 1])
            if autoPurge {
                #expect(try await local.revisions(of: "d1") == nil)
                #expect(try await local.revisions(of: "d2") == nil)
            } else {
                #expect(try await local.document(id: "d1")?.properties == ["v": 1])
                #expect(try await local.document(id: "d2")?.properties == ["v": 2])
            }

            // Purged documents leave no tombstone: a later push does not send them back.
            try await save(local, "later", ["v": 3])
            var cfg = ReplicatorConfiguration(target: peer.endpoint)
            cfg.replicatorType = .push
            cfg.enableAutoPurge = autoPurge
            cfg.replyTimeout = slow(.seconds(10))
            cfg.maxAttempts = 1
            cfg.addCollection(local)
            let pusher = try Replicator(config: cfg, connector: peer.connector())
            pusher.start()
            await pusher.waitUntilStopped()
            #expect(pusher.status.error == nil)
            let proposed = Set(peer.proposed)
            #expect(proposed.contains("later"))
            #expect(proposed.contains("d1") == !autoPurge && proposed.contains("d2") == !autoPurge)
            await peer.close()
        }
    }

    /// Flag 4 (removed from channel) is a revocation and 5 (deleted + removed) an ordinary
    /// deletion, as in LiteCore; a pull filter refusing a document with `.accessRemoved` keeps it.
    @Test func removedFromChannelAndPullFilter() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            try await save(local, "keep", ["keep": true])
            try await save(local, "drop", ["keep": false])
            let goneRev = try #require(try await save(local, "gone", ["v": 1]).revisionID)
            let changesReply = Mutex<JSONValue?>(nil)
            let peer = try ScriptedPeer(network: peers[0].network) { blip in
                let changes: JSONValue = [[1, "keep", .string(fakeRev(2, "keep")), 4],
                                          [2, "drop", .string(fakeRev(2, "drop")), 4],
                                          [3, "gone", .string(fakeRev(2, "gone")), 5]]
                let reply = try await blip.sendRequest(.request("changes", properties: [("collection", "0")], body: changes.canonicalData))
                changesReply.withLock { $0 = try? JSONValue(parsing: reply.body) }
                // Flag 5 is an ordinary deletion: the client asks for it.
                _ = try await blip.sendRequest(.request("rev", properties: [
                    ("collection", "0"), ("id", "gone"), ("rev", fakeRev(2, "gone")), ("history", goneRev),
                    ("deleted", "1"), ("sequence", "3"),
                ], body: Array("{}".utf8)))
                try await blip.sendNoReply(.request("changes", properties: [("collection", "0")], body: Array("[]".utf8)))
            }
            var cfg = ReplicatorConfiguration(target: peer.endpoint)
            cfg.replicatorType = .pull
            cfg.replyTimeout = slow(.seconds(10))
            cfg.maxAttempts = 1
            cfg.addCollection(local, config: CollectionConfiguration(pullFilter: { doc, flags in
                !(flags.contains(.accessRemoved) && doc.properties["keep"] == .bool(true))
            }))
            let replicator = try Replicator(config: cfg, connector: peer.connector())
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil, "\(String(describing: replicator.status.error))")
            #expect(peer.scriptErrors.isEmpty)
            let reply = try #require(changesReply.withLock { $0 }?.arrayValue)
            #expect(reply.count == 3 && reply[0] == .int(0) && reply[1] == .int(0) && reply[2].arrayValue != nil, "\(reply)")
            #expect(try await local.document(id: "keep")?.properties == ["keep": true])
            #expect(try await local.revisions(of: "drop") == nil)
            #expect(try await local.document(id: "gone") == nil)
            #expect(try await local.revisions(of: "gone")?.isDeleted == true)
            await peer.close()
        }
    }

    /// A one-shot pull whose peer closes the connection while revisions are still awaited
    /// stops with an error instead of waiting forever.
    @Test func peerClosingMidPullDoesNotHangAOneShotReplicator() async throws {
        try await withPeers(1) { peers in
            let peer = try ScriptedPeer(network: peers[0].network) { blip in
                let changes: JSONValue = [[1, "never", .string(fakeRev(1, "never")), 0]]
                _ = try await blip.sendRequest(.request("changes", properties: [("collection", "0")], body: changes.canonicalData))
                await blip.close()
            }
            var cfg = ReplicatorConfiguration(target: peer.endpoint)
            cfg.replicatorType = .pull
            cfg.replyTimeout = slow(.seconds(60))
            cfg.maxAttempts = 1
            cfg.addCollection(try peers[0].defaultCollection)
            let replicator = try Replicator(config: cfg, connector: peer.connector())
            replicator.start()
            #expect(try await eventually(.seconds(20)) { replicator.status.activity == .stopped })
            replicator.stop()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error != nil)
            #expect(try await peers[0].defaultCollection.document(id: "never") == nil)
            await peer.close()
        }
    }
}
