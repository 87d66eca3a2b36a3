import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// Issue 9: a peer sending a document ID that `DocumentID.validate` refuses (NUL, other
/// control characters, too long) gets a per-document error — the entry refused with 400 in
/// the `changes`/`proposeChanges` reply, the `rev` answered with an HTTP 400 error — and the
/// session goes on: the rest of the batch is answered normally and later messages work.
@Suite struct DocumentIDValidationTests {
    @Test func passiveSessionRefusesBadIDsPerDocument() async throws {
        try await withPeers(1) { p in
            let server = p[0]
            try server.listen()
            let c = try server.defaultCollection
            let blip = try await server.rawClient()
            await blip.start()
            let long = String(repeating: "x", count: 256)

            // proposeChanges: the bad entries are 400, the good ones around them still 0.
            let proposal: JSONValue = .array([
                .array(["good1", .string(fakeRev(1, "g1")), ""]),
                .array(["a\u{0}b", .string(fakeRev(1, "nul")), ""]),
                .array(["tab\there", .string(fakeRev(1, "tab")), ""]),
                .array([.string(long), .string(fakeRev(1, "long")), ""]),
                .array(["good2", .string(fakeRev(1, "g2")), ""]),
            ])
            let proposed = try await blip.sendRequest(.request("proposeChanges", body: proposal.canonicalData))
            #expect(!proposed.isError, "\(proposed.bodyString)")
            #expect(try replyAnswers(proposed, count: 5) == [.int(0), .int(400), .int(400), .int(400), .int(0)])

            // changes (a legacy pusher): the same, with the known-revisions arrays for good IDs.
            let changes: JSONValue = .array([
                .array([1, "good3", .string(fakeRev(1, "g3"))]),
                .array([2, "nul\u{0}", .string(fakeRev(1, "nul2"))]),
                .array([3, "del\u{7F}", .string(fakeRev(1, "del"))]),
                .array([4, "good4", .string(fakeRev(1, "g4"))]),
            ])
            let changed = try await blip.sendRequest(.request("changes", body: changes.canonicalData))
            #expect(!changed.isError, "\(changed.bodyString)")
            #expect(try replyAnswers(changed, count: 4) == [.array([]), .int(400), .int(400), .array([])])

            // rev: a control character in `id` (NUL itself cannot even be framed: our BLIP
            // layer refuses to send it) is an HTTP 400 error for that revision only.
            for id in ["a\u{1}b", "line\nbreak", long] {
                let refused = try await blip.sendRequest(.request("rev", properties: [
                    ("id", id), ("rev", fakeRev(1, id)), ("noconflicts", "1"), ("sequence", "1"),
                ], body: Array(#"{"v":1}"#.utf8)))
                #expect(refused.errorDomain == "HTTP" && refused.errorCode == 400, "\(refused.bodyString)")
            }
            let unframed = await #expect(throws: PeerSyncError.self) {
                try await blip.sendRequest(.request("rev", properties: [("id", "a\u{0}b"), ("rev", fakeRev(1, "z"))]))
            }
            #expect(unframed?.message.contains("NUL") == true)

            // The session is alive: the good documents still go through.
            for id in ["good1", "good2"] {
                let stored = try await blip.sendRequest(.request("rev", properties: [
                    ("id", id), ("rev", fakeRev(1, id == "good1" ? "g1" : "g2")), ("noconflicts", "1"), ("sequence", "2"),
                ], body: Array(#"{"ok":true}"#.utf8)))
                #expect(!stored.isError, "\(stored.bodyString)")
            }
            #expect(try await c.documentIDs() == ["good1", "good2"])
            let closed = await blip.isClosed
            #expect(!closed)
            await blip.close()
        }
    }
}

/// The pulling side: a peer that sends an ID no database can hold (in `changes`, or a `rev`
/// it was never asked for) gets a per-document error; the pull completes with the rest.
@Suite struct PulledBadIDTests {
    @Test func aBadIDFromThePeerIsAPerDocumentErrorAndThePullCompletes() async throws {
        try await withPeers(1) { peers in
            let local = try peers[0].defaultCollection
            let bad = "a\u{1}b"
            let changesReply = Mutex<JSONValue?>(nil)
            let revReplies = Mutex<[String]>([])
            let peer = try ScriptedPeer(network: peers[0].network) { blip in
                let changes: JSONValue = [[1, .string(bad), .string(fakeRev(1, "bad"))],
                                          [2, "good", .string(fakeRev(1, "good"))]]
                let reply = try await blip.sendRequest(.request("changes", properties: [("collection", "0")], body: changes.canonicalData))
                changesReply.withLock { $0 = try? JSONValue(parsing: reply.body) }
                for (seq, id) in [(1, bad), (2, "good")] {
                    let r = try await blip.sendRequest(.request("rev", properties: [
                        ("collection", "0"), ("id", id), ("rev", fakeRev(1, id == bad ? "bad" : "good")), ("sequence", String(seq)),
                    ], body: JSONValue.object(["x": 1]).canonicalData))
                    revReplies.withLock { $0.append(r.isError ? "\(r.errorCode ?? 0)" : "ok") }
                }
                try await blip.sendNoReply(.request("changes", properties: [("collection", "0")], body: Array("[]".utf8)))
            }
            let log = EventLog()
            let status = try await peer.pull(into: local, log: log)
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(peer.scriptErrors.isEmpty, "\(peer.scriptErrors)")
            #expect(changesReply.withLock { $0 }?.arrayValue?.first == .int(400))
            #expect(revReplies.withLock { $0 } == ["400", "ok"])
            #expect(try await local.document(id: "good") != nil)
            #expect(log.documents.contains { $0.id == bad && $0.error?.code == .invalidDocumentID })
            await peer.close()
        }
    }
}
