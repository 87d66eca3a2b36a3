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

/// A passive side that was proposed a revision it already holds (answered 304) knows the peer
/// has it, and does not offer it back in the `changes` of the peer's pull (in a mesh every
/// such offer was a round trip and a tree read for nothing).
@Suite struct ProposedRevisionOfferTests {
    @Test func aRevisionTheClientProposedIsNotOfferedBackToIt() async throws {
        try await withPeers(1) { peers in
            let server = peers[0]
            try server.listen()
            try await save(server.defaultCollection, "known-doc", ["n": 1])
            try await save(server.defaultCollection, "other-doc", ["n": 2])
            let knownRev = try #require(try await server.defaultCollection.document(id: "known-doc")?.revisionID)

            let conn = try await LoopbackTransport(network: server.network, host: "proposer")
                .connect(to: server.endpoint, options: LoopbackConnectOptions())
            let blip = try BLIPConnection(connection: conn)
            let offered = Mutex<[String]>([])
            let caughtUp = Mutex(false)
            await blip.setHandler(profile: "changes") { request in
                let entries = try JSONValue(parsing: request.body).arrayValue ?? []
                if entries.isEmpty { caughtUp.withLock { $0 = true } }
                offered.withLock { $0 += entries.compactMap { $0.arrayValue?[1].stringValue } }
                // Wants nothing: only what is offered matters here.
                return BLIPMessage(type: .response, body: JSONValue.array(entries.map { _ in .int(0) }).canonicalData)
            }
            await blip.start()
            _ = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "proposer-cp")]))

            // The client holds the server's current revision of known-doc: 304.
            let proposal: JSONValue = [["known-doc", .string(knownRev), ""]]
            let answer = try await blip.sendRequest(.request("proposeChanges", body: proposal.canonicalData))
            #expect(!answer.isError)
            #expect((try JSONValue(parsing: answer.body).arrayValue ?? []) == [.int(304)])

            let sub = try await blip.sendRequest(.request("subChanges", properties: [("batch", "200")]))
            #expect(!sub.isError, "\(sub.bodyString)")
            #expect(try await eventually { caughtUp.withLock { $0 } })
            let docs = offered.withLock { $0 }
            #expect(docs.contains("other-doc"), "the feed was served: \(docs)")
            #expect(!docs.contains("known-doc"), "offered back a revision the client had just proposed: \(docs)")
            await blip.close()
        }
    }
}
