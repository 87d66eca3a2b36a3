import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
@_spi(Replication) @testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncStorage
import PeerSyncTransport
import Synchronization
import Testing

/// `revs` (``RevisionBatch``): several revisions per message between PeerSync peers. Offered
/// in every reply to `changes`/`proposeChanges`; sent only when offered (Couchbase Lite never
/// offers it, so it keeps getting `rev`s); each entry handled and answered as its `rev` would be.
@Suite struct RevisionBatchTests {
    /// The `revs` body of `entries` (properties and body of each).
    static func revsBody(_ entries: [(BLIPProperties, JSONValue)]) -> [UInt8] {
        RevisionBatch.body(entries.map { RevisionBatch.entry($0.0, body: $0.1.canonicalData) })
    }

    /// The answers of a `revs` reply, as "ok" or "<domain>/<code>"; the whole reply's error
    /// when it is one.
    static func answers(_ reply: BLIPMessage) throws -> [String] {
        if reply.isError { return ["\(reply.blipError?.domain ?? "?")/\(reply.errorCode ?? 0)"] }
        return try (JSONValue(parsing: reply.body).arrayValue ?? []).map { item in
            item.isNull ? "ok" : "\(item["domain"]?.stringValue ?? "?")/\(item["code"]?.intValue ?? 0)"
        }
    }

    /// The pulling side offers `revs` in its `changes` reply, stores each entry of one as the
    /// `rev` carrying it would be (here a delta against an unknown base is refused with 422 on
    /// its own, and then comes whole in a `rev`), answers each, and lets the checkpoint pass.
    @Test func thePullerStoresAndAnswersEachRevisionOfARevsMessage() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let offered = Mutex<String?>(nil)
            let replies = Mutex<[String]>([])
            let (workers, scripted) = try await PullerTests().pull(local, network: peers[0].network) { blip in
                let (_, reply) = try await PullerTests.changes(blip, [[1, "a", .string(fakeRev(1, "a"))],
                                                                      [2, "b", .string(fakeRev(1, "b"))],
                                                                      [3, "c", .string(fakeRev(1, "c"))]])
                offered.withLock { $0 = reply.properties[RevisionBatch.capabilityProperty] }
                let body = Self.revsBody([
                    ([("id", "a"), ("rev", fakeRev(1, "a")), ("sequence", "1")], ["n": 1]),
                    ([("id", "b"), ("rev", fakeRev(1, "b")), ("sequence", "2"), ("deltaSrc", fakeRev(1, "unknown"))], ["n": 9]),
                    ([("id", "c"), ("rev", fakeRev(1, "c")), ("sequence", "3"), ("deleted", "1")], [:]),
                ])
                let revs = try await blip.sendRequest(.request("revs", properties: [("collection", "0")], body: body))
                var got = try Self.answers(revs)
                got.append(try await PullerTests.rev(blip, [("id", "b"), ("rev", fakeRev(1, "b")), ("sequence", "2")], ["n": 2]))
                replies.withLock { $0 = got }
                try await PullerTests.caughtUp(blip)
            }
            #expect(offered.withLock { $0 } == String(RevisionBatch.maxRevisions))
            #expect(replies.withLock { $0 } == ["ok", "HTTP/422", "ok", "ok"])
            #expect(try await local.document(id: "a")?.properties == ["n": 1])
            #expect(try await local.document(id: "b")?.properties == ["n": 2])
            #expect(try await local.document(id: "c") == nil)
            #expect(try await local.documentIncludingDeleted(id: "c")?.isDeleted == true)
            #expect(try await workers.puller().pulledRemoteSequence == .int(3))
            #expect(workers.log.documents.allSatisfy { $0.error == nil })
            #expect(workers.context.failure == nil)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// The revisions of a pulled `revs` are inserted together, and still each as its `rev`
    /// would be: one that makes a conflict with a local edit is resolved (the document's
    /// conflict handling held from before its insertion), a document that comes twice in one
    /// message takes both revisions in order (the second waits for the first's conflict
    /// handling, by the way of a `rev`), each gets its document event, and the checkpoint
    /// passes the whole message.
    @Test func aPulledRevsMessageResolvesConflictsAndKeepsADocumentsRevisionsInOrder() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let localX = try #require(try await save(local, "x", ["by": "local"]).revisionID)
            let remoteX = fakeRev(1, "x-remote")
            let d1 = fakeRev(1, "d"), d2 = fakeRev(2, "d")
            let replies = Mutex<[String]>([])
            let (workers, scripted) = try await PullerTests().pull(local, network: peers[0].network) { blip in
                _ = try await PullerTests.changes(blip, [[1, "x", .string(remoteX)], [2, "d", .string(d1)],
                                                         [3, "d", .string(d2)], [4, "e", .string(fakeRev(1, "e"))]])
                let body = Self.revsBody([
                    ([("id", "x"), ("rev", remoteX), ("sequence", "1")], ["by": "remote"]),
                    ([("id", "d"), ("rev", d1), ("sequence", "2")], ["n": 1]),
                    ([("id", "d"), ("rev", d2), ("history", d1), ("sequence", "3")], ["n": 2]),
                    ([("id", "e"), ("rev", fakeRev(1, "e")), ("sequence", "4")], ["n": 1]),
                ])
                let revs = try await blip.sendRequest(.request("revs", properties: [("collection", "0")], body: body))
                replies.withLock { $0 = (try? Self.answers(revs)) ?? ["unreadable"] }
                try await PullerTests.caughtUp(blip)
            }
            #expect(replies.withLock { $0 } == ["ok", "ok", "ok", "ok"])
            #expect(try await local.conflictedDocumentIDs().isEmpty)
            let x = try #require(try await local.revisions(of: "x"))
            #expect(x.leaves.filter { !$0.isDeleted }.count == 1, "x still has two live leaves: \(x.leaves)")
            let localID = try RevisionID(localX), remoteID = try RevisionID(remoteX)
            #expect(x.revision(localID) != nil && x.revision(remoteID) != nil)
            #expect(try await local.document(id: "d")?.revisionID == d2)
            #expect(try await local.document(id: "d")?.properties == ["n": 2])
            #expect(try await local.document(id: "e")?.properties == ["n": 1])
            #expect(try await workers.puller().pulledRemoteSequence == .int(4))
            let events = workers.log.documents
            #expect(events.map(\.id).sorted() == ["d", "d", "e", "x"], "\(events)")
            #expect(events.allSatisfy { $0.error == nil }, "\(events)")
            #expect(workers.context.failure == nil)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// The revisions of a pulled `revs` share a transaction: when it fails (here the disk is
    /// full), every one of them gets the failure, as their `rev`s would have — none is stored
    /// or checkpointed, the first is answered 507 and reported with the error, the session
    /// fails (its close may overtake the reply), and the others are answered 503.
    @Test func aFailedTransactionReachesEveryRevisionOfAPulledRevsMessage() async throws {
        let network = LoopbackNetwork()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-revs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let backend = WriteGatedBackend(inner: MemoryStorageBackend())
        let database = try await Database(name: "client", config: DatabaseConfiguration(directory: directory, backend: backend,
                                                                                         durable: false))
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            MemoryStorageBackend().removeStore(in: directory)
        }
        let local = try database.defaultCollection()
        backend.armFailure("b", PeerSyncError(.diskFull, "no space left on the device (test)"))
        let replies = Mutex<[String]>([])
        let (workers, scripted) = try await PullerTests().pull(local, network: network) { blip in
            _ = try await PullerTests.changes(blip, [[1, "a", .string(fakeRev(1, "a"))], [2, "b", .string(fakeRev(1, "b"))],
                                                     [3, "c", .string(fakeRev(1, "c"))]])
            let body = Self.revsBody(["a", "b", "c"].enumerated().map { i, id in
                ([("id", id), ("rev", fakeRev(1, id)), ("sequence", String(i + 1))], ["n": .int(Int64(i))])
            })
            do {
                let reply = try await blip.sendRequest(.request("revs", properties: [("collection", "0")], body: body))
                replies.withLock { $0 = (try? Self.answers(reply)) ?? ["unreadable"] }
            } catch {
                replies.withLock { $0 = ["closed"] }
            }
        }
        #expect(try await eventually { workers.context.failure != nil && !replies.withLock { $0 }.isEmpty })
        let got = replies.withLock { $0 }
        #expect(got == ["closed"] || got.sorted() == ["HTTP/503", "HTTP/503", "HTTP/507"], "\(got)")
        #expect(workers.context.failure?.code == .diskFull)
        for id in ["a", "b", "c"] { #expect(try await local.documentIncludingDeleted(id: id) == nil, "\(id) was stored") }
        #expect(try await workers.puller().pulledRemoteSequence == nil)
        let events = workers.log.documents
        #expect(events.count == 1 && events.allSatisfy { $0.error?.code == .diskFull }, "\(events)")
        await workers.session.stop()
        await scripted.close()
        try await database.close()
    }

    /// A malformed `revs` on the pulling side (not an array; more revisions than offered) is
    /// answered `BLIP`/400 and fails the session (whose close may overtake the reply): the
    /// revisions it asked for would never come.
    @Test(arguments: ["not an array", "too many"])
    func aMalformedRevsMessageFailsThePull(kind: String) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let replies = Mutex<[String]>([])
            let (workers, scripted) = try await PullerTests().pull(local, network: peers[0].network) { blip in
                _ = try await PullerTests.changes(blip, [[1, "a", .string(fakeRev(1, "a"))]])
                let body = kind == "not an array"
                    ? Array(#"{"id":"a"}"#.utf8)
                    : Self.revsBody((0...RevisionBatch.maxRevisions).map { i in
                        ([("id", "a"), ("rev", fakeRev(1, "a")), ("sequence", "1")], ["i": .int(Int64(i))])
                    })
                do {
                    let reply = try await blip.sendRequest(.request("revs", properties: [("collection", "0")], body: body))
                    replies.withLock { $0 = (try? Self.answers(reply)) ?? [] }
                } catch {
                    replies.withLock { $0 = ["closed"] }
                }
            }
            #expect(try await eventually { workers.context.failure != nil && !replies.withLock { $0 }.isEmpty })
            // The failing session closes the connection, which may overtake the reply.
            #expect(replies.withLock { $0 } == ["BLIP/400"] || replies.withLock { $0 } == ["closed"])
            #expect(workers.context.failure?.code == .protocolError)
            #expect(try await workers.puller().pulledRemoteSequence == nil)
            #expect(try await local.document(id: "a") == nil)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// The passive side (a real listener) offers `revs` in its `proposeChanges` reply and
    /// answers each entry of a pushed `revs` as a pushed `rev`: stored when it extends the
    /// current revision, 409 when it does not, 400 for an entry that is not a revision —
    /// the others stored all the same.
    @Test func thePassiveSideAnswersEachPushedRevision() async throws {
        try await withPeers(1) { peers in
            let server = peers[0]
            try server.listen()
            let current = try #require(try await save(server.defaultCollection, "b", ["n": 1]).revisionID)
            let conn = try await LoopbackTransport(network: server.network, host: "pusher")
                .connect(to: server.endpoint, options: LoopbackConnectOptions())
            let blip = try BLIPConnection(connection: conn)
            await blip.start()
            _ = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "pusher-cp")]))
            let proposal: JSONValue = [["a", .string(fakeRev(1, "a")), ""], ["c", .string(fakeRev(1, "c")), ""]]
            let answer = try await blip.sendRequest(.request("proposeChanges", body: proposal.canonicalData))
            #expect(!answer.isError)
            #expect(answer.properties[RevisionBatch.capabilityProperty] == String(RevisionBatch.maxRevisions))

            var body = Self.revsBody([
                ([("id", "a"), ("rev", fakeRev(1, "a")), ("sequence", "1")], ["n": "a"]),
                // Not a fast-forward of b's current revision: a conflict.
                ([("id", "b"), ("rev", fakeRev(2, "b")), ("history", fakeRev(1, "other")), ("sequence", "2")], ["n": "b"]),
                ([("id", "c"), ("rev", fakeRev(1, "c")), ("sequence", "3")], ["n": "c"]),
            ])
            body.removeLast()
            body += Array(#","not a revision"]"#.utf8)
            let reply = try await blip.sendRequest(.request("revs", body: body))
            #expect(try Self.answers(reply) == ["ok", "HTTP/409", "ok", "HTTP/400"])
            #expect(try await server.defaultCollection.document(id: "a")?.properties == ["n": "a"])
            #expect(try await server.defaultCollection.document(id: "b")?.revisionID == current)
            #expect(try await server.defaultCollection.document(id: "c")?.properties == ["n": "c"])
            await blip.close()
        }
    }

    /// A scripted peer answering every proposal 0 — offering `revs` of at most `offer`
    /// revisions when given — and recording `rev`s and `revs`; it refuses document "refused"
    /// with 409 whichever way it comes.
    func peer(_ network: LoopbackNetwork, offer: Int?, revs: Received, batches: Received) throws -> ScriptedPeer {
        try ScriptedPeer(network: network, script: { _ in }) { blip in
            await blip.setHandler(profile: "proposeChanges") { request in
                let answers = try entries(request.message).map { _ in JSONValue.int(0) }
                var props: BLIPProperties = [("maxHistory", "20"), ("blobs", "true")]
                if let offer { props[RevisionBatch.capabilityProperty] = String(offer) }
                return BLIPMessage(type: .response, properties: props, body: JSONValue.array(answers).canonicalData)
            }
            await blip.setHandler(profile: "rev") { request in
                revs.append(request.message)
                if request.properties["id"] == "refused" { throw PeerSyncError.reply(.http(409, "conflict")) }
                return nil
            }
            await blip.setHandler(profile: "revs") { request in
                batches.append(request.message)
                let results: [BLIPError?] = try RevisionBatch.entries(request.body).map { properties, _ in
                    properties["id"] == "refused" ? .http(409, "conflict") : nil
                }
                return RevisionBatch.reply(results)
            }
        }
    }

    /// The pusher sends `revs` only to a peer that offers it, at most as many revisions per
    /// message as offered, each entry carrying what its `rev` would; a body too large for a
    /// batch still goes in a `rev`. A refused entry is that document's error and the checkpoint
    /// stays before it, as with a `rev`. A peer that does not offer `revs` gets only `rev`s.
    @Test(arguments: [nil, 2] as [Int?])
    func thePusherSendsRevsOnlyWhenOffered(offer: Int?) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let ids = ["a", "b", "c", "refused", "d", "large"]
            var revIDs: [String: String] = [:]
            for id in ids {
                let data: [String: JSONValue] = id == "large"
                    ? ["text": .string(String(repeating: "x", count: RevisionBatch.maxEntryBytes + 1))] : ["id": .string(id)]
                let revID: String = try #require(try await save(local, id, data).revisionID)
                revIDs[id] = revID
            }
            let revs = Received(), batches = Received()
            let scripted = try peer(peers[0].network, offer: offer, revs: revs, batches: batches)
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            let checkpoint = Mutex<UInt64>(0)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { seq in checkpoint.withLock { $0 = seq } }

            var sent: [String: (properties: BLIPProperties, body: JSONValue)] = [:]
            for message in revs.all { sent[message.properties["id"] ?? ""] = (message.properties, try JSONValue(parsing: message.body)) }
            for message in batches.all {
                let entries = try RevisionBatch.entries(message.body)
                #expect(entries.count >= 2 && entries.count <= (offer ?? 0), "\(entries.count) revisions in one revs")
                for (properties, body) in entries { sent[properties["id"] ?? ""] = (properties, body) }
            }
            #expect(Set(sent.keys) == Set(ids), "every revision sent once: \(sent.keys.sorted())")
            #expect(revs.all.count + batches.all.reduce(0) { $0 + ((try? RevisionBatch.entries($1.body).count) ?? 0) } == ids.count)
            if offer == nil {
                #expect(batches.all.isEmpty)
            } else {
                #expect(batches.all.count >= 2)
                #expect(revs.all.contains { $0.properties["id"] == "large" })
            }
            for id in ["a", "b", "c", "d"] {
                #expect(sent[id]?.properties["rev"] == revIDs[id])
                #expect(sent[id]?.properties["noconflicts"] == "1")
                #expect(sent[id]?.body == ["id": .string(id)])
            }
            let errors = Dictionary(workers.log.documents.map { ($0.id, $0.error?.code) }, uniquingKeysWith: { a, _ in a })
            #expect(errors["refused"] == .some(.conflict))
            #expect(ids.filter { $0 != "refused" }.allSatisfy { errors[$0] == .some(nil) })
            // Sequences 1–6: the checkpoint stays before the refused one (4).
            #expect(checkpoint.withLock { $0 } == 3)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A `revs` message is compressed exactly when its revisions would be in `rev`s: when
    /// their bodies average ``Pusher/minBodySizeToCompress`` bytes or more (the entries'
    /// properties do not count).
    @Test(arguments: [400, 600])
    func aRevsMessageIsCompressedWhenItsBodiesWouldBe(bodySize: Int) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            for i in 0..<5 {
                // `{"t":"…"}`: 8 bytes around the text.
                try await save(local, "doc-\(i)", ["t": .string(String(repeating: "s", count: bodySize - 8))])
            }
            let revs = Received(), batches = Received()
            let scripted = try peer(peers[0].network, offer: 100, revs: revs, batches: batches)
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { _ in }
            #expect(revs.all.isEmpty)
            #expect(batches.all.count == 1)
            #expect(batches.all.allSatisfy { $0.flags.contains(.compressed) == (bodySize >= Pusher.minBodySizeToCompress) })
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// Two PeerSync peers replicate through `revs` both ways (push and pull), and every
    /// document arrives.
    @Test func twoPeerSyncPeersUseRevsBothWays() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            for i in 0..<40 {
                try await save(a, "from-a-\(i)", ["i": .int(Int64(i))])
                try await save(b, "from-b-\(i)", ["i": .int(Int64(i))])
            }
            let before = ReplicationCounters.snapshot()
            let status = try await replicate(p[0], to: p[1])
            #expect(status.error == nil)
            #expect(try await a.count == 80)
            #expect(try await b.count == 80)
            // Process-wide counters (other tests may add to them): at least this run's 80
            // revisions went in at least two `revs` messages (one per direction).
            let work = ReplicationCounters.snapshot().since(before)
            #expect(work.revsMessagesSent >= 2)
        }
    }
}
