import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
@testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Testing

/// The ``Responder`` alone (a passive context with only its handlers) against a raw BLIP
/// client: `getCollections` chooses the collection table and returns checkpoints with their
/// revisions; `getCheckpoint`/`setCheckpoint` keep MVCC revisions; a legacy first message
/// selects legacy mode.
@Suite struct ResponderTests {
    func serve(_ peer: Peer, collections: [PeerSyncDatabase.Collection]) throws -> PassiveWorkerHost {
        try PassiveWorkerHost(network: peer.network, database: peer.db, collections: collections) { context, blip in
            let responder = Responder(context: context)
            await blip.setHandler(profile: "getCollections") { try await responder.handleGetCollections($0) }
            await blip.setHandler(profile: "getCheckpoint") { try await responder.handleGetCheckpoint($0) }
            await blip.setHandler(profile: "setCheckpoint") { try await responder.handleSetCheckpoint($0) }
        }
    }

    static func getCollections(_ blip: BLIPConnection, _ paths: [String], ids: [String]) async throws -> BLIPMessage {
        try await blip.sendRequest(.request("getCollections", body: JSONValue.object([
            "collections": .array(paths.map { .string($0) }), "checkpoint_ids": .array(ids.map { .string($0) }),
        ]).canonicalData))
    }

    @Test func getCollectionsAndCheckpointsWithRevisions() async throws {
        try await withPeers(1) { p in
            let other = try await p[0].db.createCollection(name: "things", scope: "app")
            let host = try serve(p[0], collections: [try p[0].defaultCollection, other])

            let client = try await host.client()
            let opened = try await Self.getCollections(client, ["app.things", "nope.none", "_default"], ids: ["cp-a", "cp-b", "cp-c"])
            #expect(try JSONValue(parsing: opened.body) == [[:], .null, [:]])
            // Index 2 is the default collection; index 1 is not served.
            let first = try await client.sendRequest(.request("setCheckpoint", properties: [("client", "cp-c"), ("collection", "2")],
                                                              body: Array(#"{"local":5}"#.utf8)))
            let rev1 = try #require(first.properties["rev"])
            let read = try await client.sendRequest(.request("getCheckpoint", properties: [("client", "cp-c"), ("collection", "2")]))
            #expect(read.properties["rev"] == rev1)
            #expect(try JSONValue(parsing: read.body) == ["local": 5])
            // A save that does not name the stored revision is refused; one that does moves it.
            let stale = try await client.sendRequest(.request("setCheckpoint", properties: [("client", "cp-c"), ("collection", "2")],
                                                              body: Array(#"{"local":6}"#.utf8)))
            #expect(stale.errorDomain == "HTTP" && stale.errorCode == 409)
            let second = try await client.sendRequest(.request("setCheckpoint", properties: [
                ("client", "cp-c"), ("collection", "2"), ("rev", rev1),
            ], body: Array(#"{"local":7}"#.utf8)))
            let rev2 = try #require(second.properties["rev"])
            #expect(rev2 != rev1)
            // Bad collection properties and a second getCollections are refused.
            let unserved = try await client.sendRequest(.request("getCheckpoint", properties: [("client", "cp-b"), ("collection", "1")]))
            #expect(unserved.errorDomain == "HTTP" && unserved.errorCode == 400)
            let missing = try await client.sendRequest(.request("getCheckpoint", properties: [("client", "cp-c")]))
            #expect(missing.errorDomain == "HTTP" && missing.errorCode == 400)
            let again = try await Self.getCollections(client, ["_default"], ids: ["cp-c"])
            #expect(again.errorDomain == "BLIP" && again.errorCode == 400)
            await client.close()

            // A new connection gets the saved checkpoint with its revision in getCollections.
            let next = try await host.client()
            let reopened = try await Self.getCollections(next, ["_default"], ids: ["cp-c"])
            #expect(try JSONValue(parsing: reopened.body) == [["local": 7, "rev": .string(rev2)]])
            await next.close()
            await host.close()
        }
    }

    /// A first message other than `getCollections` selects legacy mode: no `collection`
    /// property, the default collection, and no `getCollections` afterwards.
    @Test func aLegacyFirstMessageSelectsLegacyMode() async throws {
        try await withPeers(1) { p in
            let host = try serve(p[0], collections: [try p[0].defaultCollection])
            let client = try await host.client()
            let none = try await client.sendRequest(.request("getCheckpoint", properties: [("client", "legacy")]))
            #expect(none.errorDomain == "HTTP" && none.errorCode == 404)
            let saved = try await client.sendRequest(.request("setCheckpoint", properties: [("client", "legacy")],
                                                              body: Array(#"{"remote":3}"#.utf8)))
            #expect(!saved.isError && saved.properties["rev"] != nil)
            let wrong = try await client.sendRequest(.request("getCheckpoint", properties: [("client", "legacy"), ("collection", "0")]))
            #expect(wrong.errorDomain == "HTTP" && wrong.errorCode == 400)
            let late = try await Self.getCollections(client, ["_default"], ids: ["legacy"])
            #expect(late.errorDomain == "BLIP" && late.errorCode == 400)
            await client.close()
            await host.close()
        }
    }
}
