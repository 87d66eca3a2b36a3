import Foundation
import PeerSync
import Synchronization
import Testing

/// What an app gets from `import PeerSync` alone (this target depends on the `PeerSync`
/// product only, and the build's import check refuses any other PeerSync import here): a
/// database, a listener and a replicator created with `Replicator(config:)`, under Couchbase
/// Lite's names (each name, item by item, in `CouchbaseLiteAPITests`).
@Suite struct OneImportTests {
    /// Runs `body` with a fresh temporary folder, removed afterwards.
    func withFolder(_ body: (String) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-umbrella-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try await body(folder)
    }

    /// A listener with TLS (anonymous identity) and a password, a replicator built from its
    /// `urls` with `URLEndpoint(url:)`: a one-shot push and pull of a named collection. The
    /// document events carry the replicator and the scope and collection names separately; a
    /// listener removed with `removeChangeListener(withToken:)` before the start hears nothing.
    @Test func aListenerAndAReplicatorSyncWithOneImport() async throws {
        try await withFolder { folder in
            let alice = try await Database(name: "alice", config: DatabaseConfiguration(directory: folder))
            let bob = try await Database(name: "bob", config: DatabaseConfiguration(directory: folder))
            let aliceTasks = try await alice.createCollection(name: "tasks", scope: "app")
            let bobTasks = try await bob.createCollection(name: "tasks", scope: "app")

            var listenerConfig = URLEndpointListenerConfiguration(collections: [bobTasks])
            listenerConfig.networkInterface = "127.0.0.1"
            listenerConfig.authenticator = ListenerPasswordAuthenticator.matching(username: "alice", password: "pw")
            let listener = try URLEndpointListener(config: listenerConfig)
            try await listener.start()

            let owner = "alice"
            let saved = try await aliceTasks.save(document: MutableDocument(id: "t1", data: ["title": "task of \(owner)", "n": 1]))
            #expect(saved.revisionID?.hasPrefix("1-") == true)
            try await bobTasks.save(document: MutableDocument(id: "t2", data: ["title": "task of bob"]))

            var config = ReplicatorConfiguration(target: try URLEndpoint(url: try #require(listener.urls.first)))
            config.addCollection(aliceTasks)
            config.acceptOnlySelfSignedServerCertificate = true
            config.authenticator = BasicAuthenticator(username: "alice", password: "pw")
            let replicator = try Replicator(config: config)

            let events = LockedEvents()
            replicator.addDocumentReplicationListener { events.append($0) }
            let removed = LockedEvents()
            let token = replicator.addDocumentReplicationListener { removed.append($0) }
            replicator.removeChangeListener(withToken: token)

            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            #expect(replicator.status.activity == .stopped)

            #expect(try await bobTasks.document(id: "t1")?.string(forKey: "title") == "task of alice")
            #expect(try await aliceTasks.document(id: "t2")?.string(forKey: "title") == "task of bob")

            let all = events.all
            let pushed = all.filter(\.isPush).flatMap(\.documents)
            let pulled = all.filter { !$0.isPush }.flatMap(\.documents)
            #expect(pushed.map(\.id) == ["t1"])
            #expect(pulled.map(\.id) == ["t2"])
            for document in pushed + pulled {
                #expect(document.scope == "app")
                #expect(document.collection == "tasks")
                #expect(document.collectionFullName == "app.tasks")
            }
            #expect(!all.isEmpty && all.allSatisfy { $0.replicator === replicator })
            #expect(removed.all.isEmpty)

            await listener.stop()
            try await alice.delete()
            try await bob.delete()
        }
    }
}

/// Events collected from a listener's queue.
final class LockedEvents: Sendable {
    private let events = Mutex<[DocumentReplication]>([])
    func append(_ event: DocumentReplication) { events.withLock { $0.append(event) } }
    var all: [DocumentReplication] { events.withLock { $0 } }
}
