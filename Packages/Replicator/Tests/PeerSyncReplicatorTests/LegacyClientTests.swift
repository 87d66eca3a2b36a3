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

/// A CBL 3.0 / 2.x style client (first message `getCheckpoint`, no `collection` property
/// anywhere) against our passive side: legacy mode replicates the default collection.
@Suite struct LegacyClientTests {
    /// What the raw client received while pulling.
    final class Pulled: Sendable {
        let revs = Mutex<[String: (rev: String, body: JSONValue)]>([:])
        let collectionProperties = Mutex<[String]>([])
        let caughtUp = Mutex(false)
    }

    @Test func legacyClientPushesAndPullsTheDefaultCollection() async throws {
        try await withPeers(1) { peers in
            let server = peers[0]
            try server.listen()
            try await save(server.defaultCollection, "server-doc", ["from": "server"])

            let conn = try await LoopbackTransport(network: server.network, host: "legacy")
                .connect(to: server.endpoint, options: LoopbackConnectOptions())
            let blip = try BLIPConnection(connection: conn)
            let pulled = Pulled()
            await blip.setHandler(profile: "changes") { request in
                pulled.collectionProperties.withLock { $0 += request.properties["collection"].map { [$0] } ?? [] }
                let entries = try JSONValue(parsing: request.body).arrayValue ?? []
                if entries.isEmpty { pulled.caughtUp.withLock { $0 = true } }
                // Ask for every revision we don't have ("legacy-doc" we pushed ourselves).
                let answers: [JSONValue] = entries.map { $0.arrayValue?[1] == "legacy-doc" ? .int(0) : .array([]) }
                return BLIPMessage(type: .response, body: JSONValue.array(answers).canonicalData)
            }
            await blip.setHandler(profile: "rev") { request in
                pulled.collectionProperties.withLock { $0 += request.properties["collection"].map { [$0] } ?? [] }
                if let id = request.properties["id"], let rev = request.properties["rev"] {
                    let body = try JSONValue(parsing: request.body)
                    pulled.revs.withLock { $0[id] = (rev, body) }
                }
                return nil
            }
            await blip.start()

            // 1. The first message is getCheckpoint without `collection`: legacy mode.
            let none = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "legacy-cp")]))
            #expect(none.errorDomain == "HTTP" && none.errorCode == 404)

            // 2. Push one revision (proposeChanges + rev), no `collection` property.
            let rev = fakeRev(1, "legacy-doc")
            let proposal: JSONValue = [["legacy-doc", .string(rev), ""]]
            let answer = try await blip.sendRequest(.request("proposeChanges", body: proposal.canonicalData))
            #expect(!answer.isError)
            #expect((try JSONValue(parsing: answer.body).arrayValue ?? []).allSatisfy { $0 == .int(0) })
            let stored = try await blip.sendRequest(.request("rev", properties: [
                ("id", "legacy-doc"), ("rev", rev), ("noconflicts", "1"), ("sequence", "1"),
            ], body: JSONValue.object(["from": "legacy"]).canonicalData))
            #expect(!stored.isError, "\(stored.bodyString)")
            let serverDoc = try await server.defaultCollection.document(id: "legacy-doc")
            #expect(serverDoc?.properties == ["from": "legacy"] && serverDoc?.revisionID == rev)

            // 3. Checkpoints work without `collection`.
            let saved = try await blip.sendRequest(.request("setCheckpoint", properties: [("client", "legacy-cp")],
                                                            body: JSONValue.object(["local": 1]).canonicalData))
            #expect(!saved.isError && saved.properties["rev"] != nil)
            let read = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "legacy-cp")]))
            #expect(!read.isError && (try? JSONValue(parsing: read.body)) == ["local": 1])

            // 4. A `collection` property is refused in legacy mode.
            let wrong = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "legacy-cp"), ("collection", "0")]))
            #expect(wrong.errorDomain == "HTTP" && wrong.errorCode == 400)

            // 5. Pull: subChanges without `collection`; the server sends changes + rev.
            let sub = try await blip.sendRequest(.request("subChanges", properties: [("batch", "200")]))
            #expect(!sub.isError, "\(sub.bodyString)")
            #expect(try await eventually { pulled.caughtUp.withLock { $0 } && pulled.revs.withLock { $0["server-doc"] != nil } })
            let got = try #require(pulled.revs.withLock { $0["server-doc"] })
            #expect(got.body == ["from": "server"])
            #expect(got.rev == (try await server.defaultCollection.document(id: "server-doc"))?.revisionID)
            #expect(pulled.revs.withLock { $0["legacy-doc"] } == nil)
            #expect(pulled.collectionProperties.withLock { $0 }.isEmpty)
            await blip.close()
        }
    }
}
