import Foundation
import PeerSyncAuth
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocketReplication
import Synchronization
import Testing

/// End-to-end replication between two databases over wss:// (and ws://) on 127.0.0.1.
@Suite(.serialized) struct ReplicationTests {
    @Test(arguments: [ReplicatorType.pushAndPull, .push, .pull])
    func oneShotOverTLS(_ type: ReplicatorType) async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            let server = try serverDB.defaultCollection(), client = try clientDB.defaultCollection()
            try await addDocuments(server, prefix: "s", count: 20)
            try await addDocuments(client, prefix: "c", count: 20)

            let replicator = try Replicator(config: try replicatorConfig(clientDB, listener, type: type))
            let status = try await runToCompletion(replicator)
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(replicator.serverCertificate == listener.tlsIdentity?.certificate.derBytes)

            let serverIDs = Set(try await server.documentIDs()), clientIDs = Set(try await client.documentIDs())
            let sIDs = Set((0..<20).map { "s-\($0)" }), cIDs = Set((0..<20).map { "c-\($0)" })
            switch type {
            case .pushAndPull:
                #expect(serverIDs == sIDs.union(cIDs) && clientIDs == serverIDs)
                #expect(try await snapshot(server) == snapshot(client))
            case .push:
                #expect(serverIDs == sIDs.union(cIDs) && clientIDs == cIDs)
            case .pull:
                #expect(clientIDs == sIDs.union(cIDs) && serverIDs == sIDs)
            }
            await listener.stop()
            #expect(listener.port == nil && listener.status.connectionCount == 0)
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    /// Live edits on both sides with a continuous push replicator and a continuous pull
    /// replicator running at once against one listener.
    @Test func continuousWithLiveEditsOnBothSides() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            let server = try serverDB.defaultCollection(), client = try clientDB.defaultCollection()
            let pusher = try Replicator(config: try replicatorConfig(clientDB, listener, type: .push, continuous: true))
            let puller = try Replicator(config: try replicatorConfig(clientDB, listener, type: .pull, continuous: true))
            pusher.start()
            puller.start()
            #expect(await eventually { pusher.status.activity == .idle })
            #expect(await eventually { puller.status.activity == .idle })
            #expect(await eventually { listener.status.activeConnectionCount == 2 })

            try await addDocuments(server, prefix: "live-s", count: 5)
            try await addDocuments(client, prefix: "live-c", count: 5)
            #expect(await eventually {
                let c = try? await client.count
                let s = try? await server.count
                return c == 10 && s == 10
            })

            // An edit and a deletion travel too.
            var edit = try #require(try await server.document(id: "live-c-1")).toMutable()
            edit.setString("edited on the server", forKey: "note")
            try await server.save(document: &edit)
            try await client.delete(document: try #require(try await client.document(id: "live-s-2")))
            #expect(await eventually {
                let note = (try? await client.document(id: "live-c-1"))??.string(forKey: "note")
                let gone = (try? await server.document(id: "live-s-2")) == .some(nil)
                return note == "edited on the server" && gone
            })
            #expect(try await snapshot(server) == snapshot(client))

            for r in [pusher, puller] {
                r.stop()
                await r.waitUntilStopped()
                #expect(r.status.error == nil)
            }
            #expect(await eventually { listener.status.activeConnectionCount == 0 })
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    /// One continuous push-and-pull replicator: live changes on both sides arrive, and it
    /// goes back to idle.
    @Test func continuousPushAndPullWithOneReplicator() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            let server = try serverDB.defaultCollection(), client = try clientDB.defaultCollection()
            let replicator = try Replicator(config: try replicatorConfig(clientDB, listener, continuous: true))
            replicator.start()
            #expect(await eventually { replicator.status.activity == .idle })
            try await addDocuments(server, prefix: "live-s", count: 3)
            try await addDocuments(client, prefix: "live-c", count: 3)
            #expect(await eventually(timeout: .seconds(10)) { (try? await client.count) == 6 })
            #expect(await eventually(timeout: .seconds(10)) { (try? await server.count) == 6 })
            #expect(await eventually { replicator.status.activity == .idle })
            replicator.stop()
            await replicator.waitUntilStopped()
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func wrongPasswordStopsWithHTTP401WithoutRetrying() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            for password: String? in ["wrong", nil] {
                let counter = CountingConnector()
                let replicator = try Replicator(config: try replicatorConfig(clientDB, listener, password: password),
                                                connector: counter.connector)
                let status = try await runToCompletion(replicator)
                let error = try #require(status.error)
                #expect(error.code == .unauthorized && error.context["status"] == "401")
                #expect(error.message.hasPrefix("HTTP 401"))
                #expect(counter.count == 1)
            }
            #expect(try await serverDB.defaultCollection().count == 0)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func untrustedCertificateFailsWithoutRetrying() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            var config = try replicatorConfig(clientDB, listener)
            config.pinnedServerCertificate = nil                 // system roots: self-signed is not trusted
            let counter = CountingConnector()
            let status = try await runToCompletion(try Replicator(config: config, connector: counter.connector))
            let error = try #require(status.error)
            #expect(error.isCertificateTrustFailure, "\(error)")
            #expect(counter.count == 1)

            // Pinning another certificate fails the same way; self-signed-only succeeds.
            let other = try TLSIdentity.createIdentity(for: [.serverAuth], attributes: [certAttrCommonName: "other"])
            config.pinnedServerCertificate = other.certificate
            let pinned = try await runToCompletion(try Replicator(config: config))
            #expect(pinned.error?.trustFailure == .pinMismatch)
            config.pinnedServerCertificate = nil
            config.acceptOnlySelfSignedServerCertificate = true
            let selfSigned = try await runToCompletion(try Replicator(config: config))
            #expect(selfSigned.error == nil)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func anonymousIdentityIsPersistedAndReused() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let first = try #require(listener.tlsIdentity)
            #expect(first.certificate.isSelfSigned)
            await listener.stop()
            try await listener.start()
            #expect(listener.tlsIdentity?.certificate == first.certificate)
            #expect(listener.urls.allSatisfy { $0.scheme == "wss" && $0.path == "/server" })
            await listener.stop()
            try await serverDB.close()
        }
    }

    @Test func readOnlyListenerRefusesPushesButServesPulls() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir, readOnly: true)
            let clientDB = try await openDatabase(dir, "client")
            let server = try serverDB.defaultCollection(), client = try clientDB.defaultCollection()
            try await addDocuments(server, prefix: "s", count: 3)
            try await addDocuments(client, prefix: "c", count: 3)

            let counter = CountingConnector()
            let push = try await runToCompletion(try Replicator(config: try replicatorConfig(clientDB, listener, type: .push),
                                                                connector: counter.connector))
            let error = try #require(push.error)
            #expect(error.code == .unauthorized && error.blipError?.domain == "HTTP" && error.blipError?.code == 403, "\(error)")
            #expect(counter.count == 1)
            #expect(try await server.count == 3)

            let pull = try await runToCompletion(try Replicator(config: try replicatorConfig(clientDB, listener, type: .pull)))
            #expect(pull.error == nil)
            #expect(try await client.count == 6)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func listenerDownThenUp() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let port = try #require(listener.port)
            let config = try replicatorConfig(try await openDatabase(dir, "client"), listener, continuous: true)
            let clientDB = try #require(config.collections.first?.database)
            await listener.stop()

            let replicator = try Replicator(config: config)
            let seen = Mutex<[ReplicatorActivityLevel]>([])
            replicator.addChangeListener { change in
                seen.withLock { if $0.last != change.status.activity { $0.append(change.status.activity) } }
            }
            replicator.start()
            #expect(await eventually { replicator.status.activity == .offline })
            try await addDocuments(try serverDB.defaultCollection(), prefix: "late", count: 3)

            var again = listener.config
            again.port = port
            let restarted = try URLEndpointListener(config: again)
            try await restarted.start()
            #expect(await eventually(timeout: .seconds(40)) {
                let count = try? await clientDB.defaultCollection().count
                return replicator.status.activity == .idle && count == 3
            })
            let order = seen.withLock { $0 }
            let offline = try #require(order.firstIndex(of: .offline))
            let tail = Array(order[offline...])
            #expect(tail.contains(.connecting) && tail.contains(.busy) && tail.last == .idle, "\(order)")
            if let c = tail.firstIndex(of: .connecting), let b = tail.lastIndex(of: .busy) { #expect(c < b) }

            replicator.stop()
            await replicator.waitUntilStopped()
            await restarted.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func manyClientsAtOnceAreIsolated() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clients = 6
            var dbs: [Database] = []
            for i in 0..<clients {
                let db = try await openDatabase(dir, "client\(i)")
                try await addDocuments(try db.defaultCollection(), prefix: "c\(i)", count: 10)
                dbs.append(db)
            }
            let results = try await withThrowingTaskGroup(of: (Int, PeerSyncError?).self) { group in
                for (i, db) in dbs.enumerated() {
                    let config = try replicatorConfig(db, listener)
                    group.addTask { (i, try await runToCompletion(try Replicator(config: config)).error) }
                }
                // Misbehaving clients at the same time: a wrong password and a raw garbage connection.
                let bad = try replicatorConfig(dbs[0], listener, password: "nope")
                group.addTask { (-1, try await runToCompletion(try Replicator(config: bad)).error) }
                let port = try #require(listener.port)
                group.addTask {
                    let r = try? await httpRequest(port: port, "GET", "/server/_blipsync",
                                                   headers: [("Upgrade", "websocket"), ("Connection", "Upgrade")])
                    return (-2, r.map { PeerSyncError(.protocolError, "status \($0.status)") })
                }
                var out: [Int: PeerSyncError?] = [:]
                for try await (i, e) in group { out[i] = e }
                return out
            }
            for i in 0..<clients { #expect(results[i] == .some(nil), "client \(i): \(String(describing: results[i]))") }
            #expect(results[-1]??.context["status"] == "401")
            // Everyone pushed and pulled: all databases converge.
            let server = try serverDB.defaultCollection()
            #expect(try await server.count == clients * 10)
            // Clients that ran before others finished pushing may lack some: one more round converges.
            for db in dbs {
                let status = try await runToCompletion(try Replicator(config: try replicatorConfig(db, listener, type: .pull)))
                #expect(status.error == nil)
                #expect(try await db.defaultCollection().count == clients * 10)
            }
            await listener.stop()
            for db in dbs { try await db.close() }
            try await serverDB.close()
        }
    }

    @Test func plainWebSocketUnknownDatabaseAndMissingSubprotocol() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir, password: false, disableTLS: true)
            let clientDB = try await openDatabase(dir, "client")
            try await addDocuments(try clientDB.defaultCollection(), prefix: "plain", count: 4)
            #expect(listener.urls.allSatisfy { $0.scheme == "ws" })
            let ok = try await runToCompletion(try Replicator(config: try replicatorConfig(clientDB, listener, password: nil)))
            #expect(ok.error == nil)
            #expect(try await serverDB.defaultCollection().count == 4)

            let port = try #require(listener.port)
            var wrongDB = ReplicatorConfiguration(target: try Endpoint(url: "ws://127.0.0.1:\(port)/nosuchdb"))
            wrongDB.addCollection(try clientDB.defaultCollection())
            let counter = CountingConnector()
            let missing = try await runToCompletion(try Replicator(config: wrongDB, connector: counter.connector))
            #expect(missing.error?.context["status"] == "404" && counter.count == 1, "\(String(describing: missing.error))")

            // A client offering no subprotocol we speak is refused before the upgrade.
            let refused = try await httpRequest(port: port, "GET", "/server/_blipsync", headers: [
                ("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Protocol", "BLIP_3+CBMobile_9")])
            #expect(refused.status == 400)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }
}
