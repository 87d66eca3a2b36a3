import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
@testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Synchronization
import Testing

/// The ``Pusher`` alone against a scripted peer: what it proposes, how it handles each answer
/// to `proposeChanges` (0, 304, 409, other), what it sends and what it checkpoints.
@Suite struct PusherTests {
    /// A scripted peer answering `proposeChanges` with `answer(docID, proposal number)` and
    /// recording proposals and `rev`s (each `rev` accepted).
    func peer(_ network: LoopbackNetwork, proposals: Received, revs: Received,
              answer: @escaping @Sendable (String, Int) -> JSONValue) throws -> ScriptedPeer {
        let count = Mutex(0)
        return try ScriptedPeer(network: network, script: { _ in }) { blip in
            await blip.setHandler(profile: "proposeChanges") { request in
                proposals.append(request.message)
                let round = count.withLock { $0 += 1; return $0 }
                let answers = try entries(request.message).map { answer($0.arrayValue?.first?.stringValue ?? "", round) }
                return BLIPMessage(type: .response, body: JSONValue.array(answers).canonicalData)
            }
            await blip.setHandler(profile: "rev") { request in
                revs.append(request.message)
                return nil
            }
        }
    }

    /// One proposal per local change; 0 → the `rev` is sent (current revision, stored body,
    /// `noconflicts`); 304 → nothing sent, the peer's revision remembered; 409 → a conflict
    /// (a document error unless the same session pulls the collection, which brings and
    /// resolves the peer's revision); any other status → a document error. The checkpoint
    /// stops before the first failed change.
    @Test(arguments: [false, true])
    func proposesThenSendsOnlyWhatThePeerWants(alsoPulling: Bool) async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            var revIDs: [String: String] = [:]
            for id in ["send", "has", "conflict", "refused"] {
                let revID = try #require(try await save(local, id, ["id": .string(id)]).revisionID)
                revIDs[id] = revID
            }
            let peerRev = fakeRev(7, "the peer's own")
            let proposals = Received(), revs = Received()
            let scripted = try peer(peers[0].network, proposals: proposals, revs: revs) { docID, _ in
                switch docID {
                case "has": .int(304)
                case "conflict": .object(["status": .int(409), "rev": .string(peerRev)])
                case "refused": .int(403)
                default: .int(0)
                }
            }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: alsoPulling)
            let checkpoint = Mutex<UInt64>(0)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { seq in checkpoint.withLock { $0 = seq } }

            // One proposal of the four current revisions, none naming a server revision.
            let proposed = try proposals.all.flatMap { try entries($0) }
            #expect(proposed == ["send", "has", "conflict", "refused"].map { id in
                .array([.string(id), .string(revIDs[id] ?? ""), ""])
            })
            // Only "send" travelled, as stored.
            let sent = revs.all
            #expect(sent.map { $0.properties["id"] } == ["send"])
            #expect(sent.first?.properties["rev"] == revIDs["send"])
            #expect(sent.first?.properties["noconflicts"] == "1")
            #expect(try JSONValue(parsing: try #require(sent.first).body) == ["id": "send"])
            // What the session now knows of the peer.
            let context = workers.context
            #expect(context.peerRevision(0, "send")?.description == revIDs["send"])
            #expect(context.peerRevision(0, "has")?.description == revIDs["has"])
            #expect(context.peerRevision(0, "conflict")?.description == peerRev)
            // Document events: "has" is not one; the conflict is an error only without a pull.
            let errors = Dictionary(workers.log.documents.map { ($0.id, $0.error?.code) }, uniquingKeysWith: { a, _ in a })
            #expect(errors["send"] == .some(nil) && errors["has"] == nil)
            #expect(errors["refused"] == .some(.replicationFailed))
            #expect(errors["conflict"] == (alsoPulling ? nil : .some(.conflict)))
            // Sequences 1–4: the checkpoint stays before the conflict (3).
            #expect(checkpoint.withLock { $0 } == 2)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// LiteCore's rule: a `rev` is BLIP-compressed only when its body has at least 500 bytes
    /// (`Pusher.minBodySizeToCompress`); smaller bodies go as they are.
    @Test func onlyRevisionBodiesOf500BytesOrMoreAreCompressed() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let large = String(repeating: "a compressible sentence, ", count: 40)
            _ = try await save(local, "small", ["note": "short"])
            _ = try await save(local, "large", ["note": .string(large)])
            let proposals = Received(), revs = Received()
            let scripted = try peer(peers[0].network, proposals: proposals, revs: revs) { _, _ in .int(0) }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { _ in }

            let flags = Dictionary(revs.all.map { ($0.properties["id"] ?? "", $0.flags.contains(.compressed)) },
                                   uniquingKeysWith: { a, _ in a })
            #expect(flags == ["small": false, "large": true])
            let sizes = Dictionary(revs.all.map { ($0.properties["id"] ?? "", $0.body.count) }, uniquingKeysWith: { a, _ in a })
            #expect((sizes["small"] ?? 0) < Pusher.minBodySizeToCompress)
            #expect((sizes["large"] ?? 0) >= Pusher.minBodySizeToCompress)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A 409 naming a revision this side's current one descends from (its knowledge of the
    /// peer was missing) is proposed again with that revision as the parent, and sent with a
    /// history ending there.
    @Test func reproposesAFastForwardAfterA409() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let first = try #require(try await save(local, "x", ["v": 1]).revisionID)
            let second = try #require(try await save(local, "x", ["v": 2]).revisionID)
            let proposals = Received(), revs = Received()
            let scripted = try peer(peers[0].network, proposals: proposals, revs: revs) { _, round in
                round == 1 ? .object(["status": .int(409), "rev": .string(first)]) : .int(0)
            }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { _ in }

            let rounds = try proposals.all.map { try entries($0) }
            #expect(rounds == [[.array(["x", .string(second), ""])], [.array(["x", .string(second), .string(first)])]])
            #expect(revs.all.map { $0.properties["rev"] } == [second])
            #expect(revs.all.first?.properties["history"] == first)
            #expect(workers.log.documents.map(\.id) == ["x"])
            #expect(workers.log.documents.allSatisfy { $0.error == nil })
            #expect(workers.context.peerRevision(0, "x")?.description == second)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// The same content under two IDs, the local one higher: the Pusher proposes its revision
    /// naming the peer's as the one it supersedes. A peer that refuses that `rev` (Couchbase
    /// Lite never takes a push that is not a fast-forward) gets the remote branch continued:
    /// here the resolver keeps the equal body, so the peer's revision is adopted — no document
    /// error, nothing more to send.
    @Test func aPeerRefusingTheHigherIDOfTheSameContentGetsItsBranchContinued() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let low = try RevisionID(fakeRev(1, "low")), high = try RevisionID(fakeRev(2, "high"))
            let (lower, higher) = low < high ? (low, high) : (high, low)
            try await local.insertRevision(docID: "d", revID: lower, history: [], body: ["v": "same"], deleted: false)
            try await local.insertRevision(docID: "d", revID: higher, history: [try RevisionID(fakeRev(1, "other root"))],
                                           body: ["v": "same"], deleted: false)
            try await local.closeConflict(docID: "d", winningRevisionID: higher, losingRevisionID: lower)
            let proposals = Received(), revs = Received()
            let scripted = try ScriptedPeer(network: peers[0].network, script: { _ in }) { blip in
                await blip.setHandler(profile: "proposeChanges") { request in
                    proposals.append(request.message)
                    // The peer's current revision is `lower`: 0 only when it is named.
                    let answers = try entries(request.message).map { entry -> JSONValue in
                        entry.arrayValue?[2].stringValue == lower.description
                            ? .int(0) : .object(["status": .int(409), "rev": .string(lower.description)])
                    }
                    return BLIPMessage(type: .response, body: JSONValue.array(answers).canonicalData)
                }
                await blip.setHandler(profile: "rev") { request in
                    revs.append(request.message)
                    return .error(domain: "HTTP", code: 409, message: "conflict")
                }
            }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            try await workers.pusher().push(since: 0, continuous: false, docIDs: nil) { _ in }

            let rounds = try proposals.all.map { try entries($0) }
            #expect(rounds.count == 2)
            #expect(rounds.last == [.array(["d", .string(higher.description), .string(lower.description)])])
            #expect(revs.all.map { $0.properties["rev"] } == [higher.description])
            #expect(workers.log.documents.allSatisfy { $0.error == nil }, "\(workers.log.documents)")
            let after = try #require(try await local.revisions(of: "d"))
            #expect(after.currentRevID == lower, "the peer's revision is adopted")
            #expect(workers.context.peerRevision(0, "d") == lower)
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// In push-and-pull the Pusher and the Puller may meet the same conflict at once: the
    /// peer refuses the proposal (409, its revision) while the Puller is resolving that very
    /// revision. The Pusher waits for the Puller's resolution instead of resolving again, so
    /// the resolver is asked once, and then proposes the resolution as a fast-forward.
    @Test func aRefusalMeetingThePullersResolutionAsksTheResolverOnce() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let base = try #require(try await save(local, "c", ["v": "base"]).revisionID)
            try await save(local, "c", ["v": "local"])
            let remote = fakeRev(2, "remote")
            let resolving = Mutex(false)
            let calls = Counter()
            var config = CollectionConfiguration()
            config.conflictResolver = ConflictResolvers.custom { _ in
                calls.value.withLock { $0 += 1 }
                resolving.withLock { $0 = true }
                // Long enough for the refusal to arrive while this resolution is under way.
                try await Task.sleep(for: .milliseconds(300))
                return MutableDocument(id: "c", data: ["v": "merged"])
            }
            let proposals = Received(), revs = Received()
            let scripted = try ScriptedPeer(network: peers[0].network, script: { blip in
                _ = try await PullerTests.changes(blip, [[1, "c", .string(remote)]])
                _ = try await PullerTests.rev(blip, [("id", "c"), ("rev", remote), ("history", base), ("sequence", "1")],
                                              ["v": "remote"])
                try await PullerTests.caughtUp(blip)
            }, handlers: { blip in
                // A passive peer holding `remote`: only fast-forwards of its current revision are
                // accepted. Concurrent: while it waits, the peer goes on reading (the subscription,
                // the rev's reply).
                let current = Mutex(remote)
                await blip.setHandler(profile: "proposeChanges", concurrent: true) { request in
                    proposals.append(request.message)
                    // The first proposal is answered once the puller is resolving the peer's revision.
                    if proposals.all.count == 1 { _ = try await eventually { resolving.withLock { $0 } } }
                    let answers = try entries(request.message).map { entry -> JSONValue in
                        let e = entry.arrayValue ?? []
                        let (rev, parent) = (e.count > 1 ? e[1].stringValue : nil, e.count > 2 ? e[2].stringValue : nil)
                        return current.withLock { now in
                            if rev == now { return .int(304) }
                            if parent == now { return .int(0) }
                            return ["status": 409, "rev": .string(now)]
                        }
                    }
                    return BLIPMessage(type: .response, body: JSONValue.array(answers).canonicalData)
                }
                await blip.setHandler(profile: "rev") { request in
                    revs.append(request.message)
                    if let rev = request.properties["rev"] { current.withLock { $0 = rev } }
                    return nil
                }
            })
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: true, config: config)
            let puller = try workers.puller(), pusher = try workers.pusher()
            async let pushed: Void = pusher.push(since: 0, continuous: false, docIDs: nil) { _ in }
            try await puller.subscribe(since: nil, continuous: false, docIDs: nil, channels: nil)
            await puller.waitUntilIdle()
            try await pushed

            #expect(calls.value.withLock { $0 } == 1)
            let revisions = try #require(try await local.revisions(of: "c"))
            #expect(try await local.document(id: "c")?.properties == ["v": "merged"])
            #expect(revisions.revision(revisions.currentRevID)?.parentRevID?.description == remote)
            // The resolution went to the peer as a fast-forward of its revision.
            let second = try proposals.all.dropFirst().first.map { try entries($0) }
            #expect(second == [.array(["c", .string(revisions.currentRevID.description), .string(remote)])])
            #expect(revs.all.map { $0.properties["rev"] } == [revisions.currentRevID.description])
            #expect(workers.log.documents.allSatisfy { $0.error == nil }, "\(workers.log.documents)")
            await workers.session.stop()
            await scripted.close()
        }
    }

    /// A document the peer is known to hold at its current revision is not proposed again.
    @Test func skipsRevisionsThePeerHas() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            for id in ["a", "b"] { try await save(local, id, ["id": .string(id)]) }
            let proposals = Received(), revs = Received()
            let scripted = try peer(peers[0].network, proposals: proposals, revs: revs) { _, _ in .int(304) }
            let workers = try await ActiveWorkers.connect(to: scripted, collection: local, push: true, pull: false)
            let pusher = try workers.pusher()
            try await pusher.push(since: 0, continuous: false, docIDs: nil) { _ in }
            try await pusher.push(since: 0, continuous: false, docIDs: nil) { _ in }
            #expect(try proposals.all.flatMap { try entries($0) }.count == 2)
            #expect(revs.all.isEmpty)
            await workers.session.stop()
            await scripted.close()
        }
    }
}
