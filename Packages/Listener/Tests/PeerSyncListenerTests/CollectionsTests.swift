import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocketReplication
import Synchronization
import Testing

/// Named collections end to end over wss://: per-collection filters and conflict resolvers,
/// and a collection the listener does not serve.
@Suite(.serialized) struct CollectionsTests {
    /// Keeps one side of every conflict and records the documents it saw.
    final class KeepSide: ConflictResolver {
        let local: Bool
        let seen = Mutex<[String]>([])
        init(local: Bool) { self.local = local }
        func resolve(_ conflict: Conflict) async throws -> (any DocumentProperties)? {
            seen.withLock { $0.append(conflict.documentID) }
            return local ? conflict.localDocument : conflict.remoteDocument
        }
    }

    /// A listener on 127.0.0.1 serving the default collection and `scope.a`, `scope.b`.
    func startListener(_ dir: String) async throws -> (Database, URLEndpointListener) {
        let db = try await openDatabase(dir, "server")
        let a = try await db.createCollection(name: "a", scope: "scope")
        let b = try await db.createCollection(name: "b", scope: "scope")
        var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection(), a, b])
        config.networkInterface = "127.0.0.1"
        config.authenticator = ListenerPasswordAuthenticator.matching(username: "alice", password: "secret")
        let listener = try URLEndpointListener(config: config)
        try await listener.start()
        return (db, listener)
    }

    func target(_ listener: URLEndpointListener) throws -> ReplicatorConfiguration {
        var config = ReplicatorConfiguration(target: try Endpoint(url: "wss://127.0.0.1:\(try #require(listener.port))/server"))
        config.authenticator = BasicAuthenticator(username: "alice", password: "secret")
        config.pinnedServerCertificate = listener.tlsIdentity?.certificate
        config.maxAttemptWaitTime = .milliseconds(200)
        return config
    }

    @Test func namedCollectionsWithFiltersAndResolvers() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await startListener(dir)
            let sDefault = try serverDB.defaultCollection()
            let sA = try #require(try await serverDB.collection(name: "a", scope: "scope"))
            let sB = try #require(try await serverDB.collection(name: "b", scope: "scope"))
            let clientDB = try await openDatabase(dir, "client")
            let cDefault = try clientDB.defaultCollection()
            let cA = try await clientDB.createCollection(name: "a", scope: "scope")
            let cB = try await clientDB.createCollection(name: "b", scope: "scope")

            try await addDocuments(sA, prefix: "sa", count: 3)
            try await addDocuments(sB, prefix: "sb", count: 3)
            try await addDocuments(cA, prefix: "ca", count: 3)
            try await addDocuments(cB, prefix: "cb", count: 3)
            try await addDocuments(cDefault, prefix: "cdef", count: 2)
            var secret = MutableDocument(id: "ca-secret", data: ["secret": true])
            try await cA.save(document: &secret)
            var hidden = MutableDocument(id: "sb-hidden", data: ["hidden": true])
            try await sB.save(document: &hidden)
            for (c, id) in [(cA, "conf-a"), (cB, "conf-b")] {
                var doc = MutableDocument(id: id, data: ["v": "base"])
                try await c.save(document: &doc)
            }

            // a: push filter drops "secret" docs, local side wins conflicts;
            // b: pull filter drops "hidden" docs, remote side wins conflicts.
            var config = try target(listener)
            let keepLocal = KeepSide(local: true), keepRemote = KeepSide(local: false)
            config.addCollection(cA, config: CollectionConfiguration(
                conflictResolver: keepLocal,
                pushFilter: { doc, _ in doc.properties["secret"] != .bool(true) }))
            config.addCollection(cB, config: CollectionConfiguration(
                conflictResolver: keepRemote,
                pullFilter: { doc, _ in doc.properties["hidden"] != .bool(true) }))
            let first = try await runToCompletion(try Replicator(config: config))
            #expect(first.error == nil, "\(String(describing: first.error))")

            let aIDs = Set((0..<3).flatMap { ["sa-\($0)", "ca-\($0)"] }).union(["conf-a"])
            let bIDs = Set((0..<3).flatMap { ["sb-\($0)", "cb-\($0)"] }).union(["conf-b"])
            #expect(Set(try await sA.documentIDs()) == aIDs)
            #expect(Set(try await cA.documentIDs()) == aIDs.union(["ca-secret"]))
            #expect(Set(try await sB.documentIDs()) == bIDs.union(["sb-hidden"]))
            #expect(Set(try await cB.documentIDs()) == bIDs)
            #expect(try await sDefault.documentIDs().isEmpty)
            #expect(Set(try await cDefault.documentIDs()) == ["cdef-0", "cdef-1"])

            // Concurrent edits on both sides: each collection's resolver decides.
            for (c, id, v) in [(cA, "conf-a", "client"), (cB, "conf-b", "client"), (sA, "conf-a", "server"), (sB, "conf-b", "server")] {
                var doc = try #require(try await c.document(id: id)).toMutable()
                doc.setData(["v": .string(v)])
                try await c.save(document: &doc)
            }
            let second = try await runToCompletion(try Replicator(config: config))
            #expect(second.error == nil, "\(String(describing: second.error))")
            #expect(try await cA.document(id: "conf-a")?.properties == ["v": "client"])
            #expect(try await sA.document(id: "conf-a")?.properties == ["v": "client"])
            #expect(try await cB.document(id: "conf-b")?.properties == ["v": "server"])
            #expect(try await sB.document(id: "conf-b")?.properties == ["v": "server"])
            #expect(Set(keepLocal.seen.withLock { $0 }) == ["conf-a"])
            #expect(Set(keepRemote.seen.withLock { $0 }) == ["conf-b"])

            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    /// The listener answers `getCollections` with null for a collection it does not serve
    /// (as LiteCore does); the replicator stops with `.collectionNotServed`, no retry loop.
    @Test func collectionNotServedStopsTheReplicator() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await startListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            let cA = try await clientDB.createCollection(name: "a", scope: "scope")
            let cC = try await clientDB.createCollection(name: "c", scope: "scope")
            var config = try target(listener)
            config.addCollections([cA, cC])
            let counting = CountingConnector()
            let status = try await runToCompletion(try Replicator(config: config, connector: counting.connector))
            let error = try #require(status.error)
            #expect(error.code == .collectionNotServed)
            #expect(error.message.contains("scope.c"))
            #expect(counting.count == 1)
            #expect(try await serverDB.collection(name: "c", scope: "scope") == nil)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }
}
