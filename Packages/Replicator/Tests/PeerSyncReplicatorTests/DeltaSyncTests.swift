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

/// Total bytes sent and received by every connection of a counting connector.
final class ByteTally: Sendable {
    private let counts = Mutex((sent: 0, received: 0))
    var sent: Int { counts.withLock { $0.sent } }
    var received: Int { counts.withLock { $0.received } }

    /// `connection`, tapped so that its traffic is added to this tally.
    func counting(_ connection: any MessageConnection) -> MessageConnectionTap {
        MessageConnectionTap(connection,
                             onSend: { m in self.counts.withLock { $0.sent += m.byteCount } },
                             onReceive: { m in self.counts.withLock { $0.received += m.byteCount } })
    }
}

@Suite struct DeltaSyncTests {
    /// A large body of hard-to-compress text, so compression does not hide the difference.
    static func bigBody(version: Int) -> [String: JSONValue] {
        var rng = SystemRandomNumberGenerator()
        var items: [JSONValue] = []
        for i in 0..<60 {
            let noise = (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max, using: &rng), radix: 36) }.joined()
            items.append(.object(["i": .int(Int64(i)), "text": .string(noise)]))
        }
        return ["items": .array(items), "version": .int(Int64(version)), "title": "big document"]
    }

    /// Replicates with a tally of the client's bytes.
    func replicateCounting(_ active: Peer, to passive: Peer, type: ReplicatorType, tally: ByteTally) async throws -> ReplicatorStatus {
        var cfg = ReplicatorConfiguration(target: passive.endpoint)
        cfg.replicatorType = type
        cfg.maxAttemptWaitTime = .milliseconds(100)
        cfg.replyTimeout = slow(.seconds(10))
        cfg.addCollections([try active.defaultCollection], config: .init())
        let connect = passive.connector()
        let replicator = try Replicator(config: cfg, connector: { config in
            tally.counting(try await connect(config))
        })
        replicator.start()
        await replicator.waitUntilStopped()
        return replicator.status
    }

    /// Pushes then pulls rounds of small edits of large documents; returns the bytes the
    /// client sent while pushing the edits and received while pulling them.
    func editRounds(deltas: Bool) async throws -> (pushed: Int, pulled: Int) {
        var result = (pushed: 0, pulled: 0)
        try await withPeers(2) { p in
            try p[1].listen(options: .init(enableDeltaSync: deltas))
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            var bodies: [String: [String: JSONValue]] = [:]
            for d in 0..<5 {
                bodies["doc\(d)"] = Self.bigBody(version: 0)
                try await save(a, "doc\(d)", bodies["doc\(d)"] ?? [:])
            }
            var status = try await replicateCounting(p[0], to: p[1], type: .push, tally: ByteTally())
            #expect(status.error == nil)
            // Edits pushed from a to b.
            let pushTally = ByteTally()
            for round in 1...3 {
                for d in 0..<5 {
                    var body = bodies["doc\(d)"] ?? [:]
                    body["version"] = .int(Int64(round))
                    body["note"] = .string("push round \(round)")
                    bodies["doc\(d)"] = body
                    try await save(a, "doc\(d)", body)
                }
                status = try await replicateCounting(p[0], to: p[1], type: .push, tally: pushTally)
                #expect(status.error == nil)
            }
            // Edits made on b, pulled by a.
            let pullTally = ByteTally()
            for round in 4...6 {
                for d in 0..<5 {
                    var body = bodies["doc\(d)"] ?? [:]
                    body["version"] = .int(Int64(round))
                    body["note"] = nil
                    if case .array(var items)? = body["items"] {
                        items.removeLast()
                        body["items"] = .array(items)
                    }
                    bodies["doc\(d)"] = body
                    try await save(b, "doc\(d)", body)
                }
                status = try await replicateCounting(p[0], to: p[1], type: .pull, tally: pullTally)
                #expect(status.error == nil)
            }
            let sa = try await snapshot(a), sb = try await snapshot(b)
            #expect(sa == sb)
            #expect(sa.count == 5)
            for d in 0..<5 {
                let doc = try await a.document(id: "doc\(d)")
                #expect(doc.map { JSONValue.object($0.properties) } == bodies["doc\(d)"].map { JSONValue.object($0) })
            }
            result = (pushTally.sent, pullTally.received)
        }
        return result
    }

    @Test func deltasSendFewerBytesAndDatabasesEndIdentical() async throws {
        let with = try await editRounds(deltas: true)
        let without = try await editRounds(deltas: false)
        // 15 revisions of ~5 kB each way (compressible to ~3 kB): whole bodies cost far more.
        #expect(without.pushed > 30_000 && without.pulled > 30_000, "without deltas: \(without)")
        #expect(with.pushed * 3 < without.pushed, "push bytes with deltas \(with.pushed), without \(without.pushed)")
        #expect(with.pulled * 3 < without.pulled, "pull bytes with deltas \(with.pulled), without \(without.pulled)")
    }

    /// A passive receiver answers HTTP/422 to deltas against an unknown or deleted base and to
    /// corrupt deltas, stores nothing for them, and applies a good delta.
    @Test func receiverRejectsBadDeltasWith422() async throws {
        try await withPeers(2) { p in
            try p[1].listen(options: .init(enableDeltaSync: true))
            let b = try p[1].defaultCollection
            let base = try await save(b, "doc", ["a": 1, "s": "hello world"])
            let baseRev = try #require(base.revisionID)
            let conn = try await p[1].connector()(ReplicatorConfiguration(target: p[1].endpoint))
            let blip = try BLIPConnection(connection: conn)
            await blip.start()
            let open = try await blip.sendRequest(.request("getCollections", body: Array(
                #"{"checkpoint_ids":["cp-test"],"collections":["_default"]}"#.utf8)))
            #expect(!open.isError)
            let gen = (Int(baseRev.prefix { $0 != "-" }) ?? 1) + 1
            func rev(_ n: Int, deltaSrc: String, _ delta: String) async throws -> BLIPMessage {
                let revID = "\(gen)-" + String(repeating: String(n), count: 8)
                return try await blip.sendRequest(.request("rev", properties: [
                    ("collection", "0"), ("id", "doc"), ("rev", revID), ("history", baseRev), ("deltaSrc", deltaSrc),
                ], body: Array(delta.utf8)))
            }
            let unknown = try await rev(1, deltaSrc: "1-abcdef", #"{"a":2}"#)
            #expect(unknown.errorDomain == "HTTP" && unknown.errorCode == 422)
            let corrupt = try await rev(2, deltaSrc: baseRev, #"{"s":["3=",0,2]}"#)
            #expect(corrupt.errorDomain == "HTTP" && corrupt.errorCode == 422)
            let notAnObject = try await rev(3, deltaSrc: baseRev, #"[5]"#)
            #expect(notAnObject.isError)
            #expect(try await b.document(id: "doc")?.revisionID == baseRev)
            let good = try await rev(4, deltaSrc: baseRev, #"{"a":[],"s":["5=1-1+_|5=",0,2],"t":[[1]]}"#)
            #expect(!good.isError)
            let doc = try #require(try await b.document(id: "doc"))
            #expect(JSONValue.object(doc.properties) == ["s": "hello_world", "t": [1]])
            await blip.close()
        }
    }
}
