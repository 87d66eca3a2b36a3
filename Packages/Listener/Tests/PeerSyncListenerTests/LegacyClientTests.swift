import Foundation
import PeerSyncAuth
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket
import Synchronization
import Testing

/// A CBL 2.x / 3.0 style client over wss://: it offers only `BLIP_3+CBMobile_2`, its first
/// message is `getCheckpoint` and it never sends `collection` (legacy mode: the default
/// collection).
@Suite(.serialized) struct LegacyClientOverTLSTests {
    final class Pulled: Sendable {
        let revs = Mutex<[String: JSONValue]>([:])
        let caughtUp = Mutex(false)
        let collectionProperties = Mutex(0)
    }

    @Test func cbMobile2LegacyClientSyncsOverTLS() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let server = try serverDB.defaultCollection()
            try await addDocuments(server, prefix: "s", count: 3)
            let port = try #require(listener.port)
            let identity = try #require(listener.tlsIdentity)

            var options = WebSocketClientOptions()
            options.subprotocols = ["BLIP_3+CBMobile_2"]
            options.headers.set("Authorization", BasicAuthorization.headerValue(username: "alice", password: "secret"))
            options.tls = .client(serverName: "127.0.0.1", serverTrust: .pinned(identity.certificate))
            let ws = try await WebSocketTransport().connectWebSocket(
                to: try Endpoint(url: "wss://127.0.0.1:\(port)/server/_blipsync"), options: options)
            #expect(ws.subprotocol == "BLIP_3+CBMobile_2")

            let blip = try BLIPConnection(connection: ws)
            let pulled = Pulled()
            await blip.setHandler(profile: "changes") { request in
                if request.properties["collection"] != nil { pulled.collectionProperties.withLock { $0 += 1 } }
                let entries = try JSONValue(parsing: request.body).arrayValue ?? []
                if entries.isEmpty { pulled.caughtUp.withLock { $0 = true } }
                let answers: [JSONValue] = entries.map { $0.arrayValue?[1] == "legacy-doc" ? .int(0) : .array([]) }
                return BLIPMessage(type: .response, body: JSONValue.array(answers).canonicalData)
            }
            await blip.setHandler(profile: "rev") { request in
                if request.properties["collection"] != nil { pulled.collectionProperties.withLock { $0 += 1 } }
                if let id = request.properties["id"] {
                    let body = try JSONValue(parsing: request.body)
                    pulled.revs.withLock { $0[id] = body }
                }
                return nil
            }
            await blip.start()

            let none = try await blip.sendRequest(.request("getCheckpoint", properties: [("client", "legacy-cp")]))
            #expect(none.errorDomain == "HTTP" && none.errorCode == 404)

            let rev = "1-" + String(repeating: "ab", count: 20)
            let proposal: JSONValue = [["legacy-doc", .string(rev), ""]]
            let answer = try await blip.sendRequest(.request("proposeChanges", body: proposal.canonicalData))
            let answers = try JSONValue(parsing: answer.body).arrayValue ?? []
            #expect(!answer.isError && answers.allSatisfy { $0 == .int(0) })
            let stored = try await blip.sendRequest(.request("rev", properties: [
                ("id", "legacy-doc"), ("rev", rev), ("noconflicts", "1"), ("sequence", "1"),
            ], body: JSONValue.object(["from": "legacy"]).canonicalData))
            #expect(!stored.isError, "\(stored.bodyString)")
            #expect(try await server.document(id: "legacy-doc")?.properties == ["from": "legacy"])

            let sub = try await blip.sendRequest(.request("subChanges", properties: [("batch", "200")]))
            #expect(!sub.isError, "\(sub.bodyString)")
            #expect(await eventually { pulled.caughtUp.withLock { $0 } && pulled.revs.withLock { $0.count } == 3 })
            #expect(pulled.revs.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<3).map {
                ("s-\($0)", JSONValue.object(["n": .int(Int64($0)), "from": "s"]))
            }))
            #expect(pulled.collectionProperties.withLock { $0 } == 0)

            await blip.close()
            await listener.stop()
            try await serverDB.close()
        }
    }
}
