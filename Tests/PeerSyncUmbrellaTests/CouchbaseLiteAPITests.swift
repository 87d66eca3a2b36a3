import Foundation
import PeerSync
import Synchronization
import Testing

/// Couchbase Lite's Swift API, item by item (issue 13 §1; seed 002 is Couchbase Lite's
/// `ReplicatorConfiguration` reference), checked with `import PeerSync` alone: each test
/// writes what a port from Couchbase Lite writes and asserts what Couchbase Lite documents.
/// `Packages/PeerSync/README.md` maps every item; where PeerSync differs, the test pins the
/// difference the README states.
@Suite struct CouchbaseLiteAPITests {
    /// Runs `body` with a database in a fresh temporary folder, deleted afterwards.
    func withDatabase(_ name: String = "cbl", _ body: (Database) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-cblapi-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let db = try await Database(name: name, config: DatabaseConfiguration(directory: folder))
        do { try await body(db) } catch {
            try? await db.delete()
            throw error
        }
        try await db.delete()
    }

    /// A URL on 127.0.0.1 where nothing listens: a listener's, after it stopped.
    func closedURL(_ db: Database) async throws -> URL {
        var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
        config.networkInterface = "127.0.0.1"
        config.disableTLS = true
        let listener = try URLEndpointListener(config: config)
        try await listener.start()
        let url = try #require(listener.urls.first)
        await listener.stop()
        return url
    }

    // MARK: URLEndpoint(url:)

    /// `URLEndpoint(url: URL)` — a listener's `urls` go in directly. Difference: it throws
    /// (`.invalidArgument`) on a URL without a host where Couchbase Lite traps.
    @Test func urlEndpointTakesAFoundationURL() throws {
        let url = try #require(URL(string: "wss://127.0.0.1:4984/db"))
        let endpoint = try URLEndpoint(url: url)
        #expect(endpoint.scheme == "wss")
        #expect(endpoint.host == "127.0.0.1")
        #expect(endpoint.port == 4984)
        #expect(endpoint.path == "/db")
        #expect(endpoint == (try URLEndpoint(url: "wss://127.0.0.1:4984/db")))
        let config = ReplicatorConfiguration(target: endpoint)
        #expect(config.target == endpoint)
        let noHost = try #require(URL(string: "wss:///db"))
        let error = #expect(throws: PeerSyncError.self) { try URLEndpoint(url: noHost) }
        #expect(error?.code == .invalidArgument)
    }

    // MARK: The static defaults (seed 002)

    /// Every `default…` constant of seed 002 that PeerSync has, with 002's value, and a new
    /// configuration starts from them. Times are `Duration`s (300 s), attempt counts `Int`s
    /// (`Int.max` for Couchbase Lite's `UInt.max`).
    @Test func staticDefaultsHaveTheValuesOfSeed002() throws {
        #expect(ReplicatorConfiguration.defaultType == .pushAndPull)
        #expect(ReplicatorConfiguration.defaultContinuous == false)
        #expect(ReplicatorConfiguration.defaultHeartbeat == .seconds(300))
        #expect(ReplicatorConfiguration.defaultMaxAttemptsSingleShot == 10)
        #expect(ReplicatorConfiguration.defaultMaxAttemptsContinuous == Int.max)
        #expect(ReplicatorConfiguration.defaultMaxAttemptWaitTime == .seconds(300))
        #expect(ReplicatorConfiguration.defaultEnableAutoPurge == true)
        #expect(ReplicatorConfiguration.defaultSelfSignedCertificateOnly == false)

        let config = ReplicatorConfiguration(target: try URLEndpoint(url: "wss://127.0.0.1:4984/db"))
        #expect(config.replicatorType == ReplicatorConfiguration.defaultType)
        #expect(config.continuous == ReplicatorConfiguration.defaultContinuous)
        #expect(config.heartbeat == ReplicatorConfiguration.defaultHeartbeat)
        #expect(config.heartbeatTimeInterval == 300)
        #expect(config.maxAttempts == 0)   // 0: the default for the replicator's mode
        #expect(config.maxAttemptWaitTime == ReplicatorConfiguration.defaultMaxAttemptWaitTime)
        #expect(config.maxAttemptWaitTimeInterval == 300)
        #expect(config.enableAutoPurge == ReplicatorConfiguration.defaultEnableAutoPurge)
        #expect(config.acceptOnlySelfSignedServerCertificate == ReplicatorConfiguration.defaultSelfSignedCertificateOnly)
        #expect(config.pinnedServerCertificate == nil)
        #expect(config.headers == nil)
        #expect(config.networkInterface == nil)
        #expect(config.authenticator == nil)
        #expect(config.collections.isEmpty)
    }

    // MARK: The settings of seed 002, as a port writes them

    /// The properties of seed 002 take what a Couchbase Lite port assigns (literals,
    /// optionals, `nil`), `init(config:)` copies them, and `addCollection`,
    /// `addCollections`, `removeCollection` chain.
    @Test func settingsTakeWhatACouchbaseLitePortAssigns() async throws {
        try await withDatabase { db in
            let tasks = try await db.createCollection(name: "tasks", scope: "app")
            let notes = try await db.createCollection(name: "notes", scope: "app")
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: try #require(URL(string: "ws://127.0.0.1:4984/db"))))
            config.replicatorType = .push
            config.continuous = true
            config.authenticator = BasicAuthenticator(username: "u", password: "p")
            config.acceptOnlySelfSignedServerCertificate = true
            config.headers = ["X-App": "1"]
            config.headers?["X-Build"] = "2"
            config.networkInterface = "lo"
            config.enableAutoPurge = false
            config.maxAttempts = 3
            config.heartbeatTimeInterval = 60
            config.maxAttemptWaitTimeInterval = 20
            let added = config.addCollection(tasks)
            let both = config.addCollections([notes], config: nil)
            let removed = config.removeCollection(notes)
            #expect(added.collections == [tasks])
            #expect(both.collections == [tasks, notes])
            #expect(removed.collections == [tasks])

            let copy = ReplicatorConfiguration(config: config)
            #expect(copy.replicatorType == .push)
            #expect(copy.continuous)
            #expect((copy.authenticator as? BasicAuthenticator)?.username == "u")
            #expect(copy.acceptOnlySelfSignedServerCertificate)
            #expect(copy.headers == ["X-App": "1", "X-Build": "2"])
            #expect(copy.networkInterface == "lo")
            #expect(copy.enableAutoPurge == false)
            #expect(copy.maxAttempts == 3)
            #expect(copy.heartbeat == .seconds(60))
            #expect(copy.maxAttemptWaitTime == .seconds(20))
            #expect(copy.collections == [tasks])
            config.headers = nil
            #expect(config.headers == nil)
        }
    }

    // MARK: TimeInterval setters, 0 = default

    /// `heartbeat` and `maxAttemptWaitTime` in seconds (`heartbeatTimeInterval`,
    /// `maxAttemptWaitTimeInterval`; the `Duration` forms keep the names): 0 means the default
    /// (300 s), as seed 002 says; a negative value, or a negative `maxAttempts`, is refused.
    /// Difference: Couchbase Lite raises when the value is set, PeerSync throws
    /// `.invalidArgument` when the replicator is created.
    @Test func timeIntervalSettersTakeZeroAsTheDefaultAndRefuseNegatives() async throws {
        try await withDatabase { db in
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: "ws://127.0.0.1:4984/db"))
            config.addCollection(try db.defaultCollection())
            config.heartbeatTimeInterval = 0
            config.maxAttemptWaitTimeInterval = 0
            #expect(config.heartbeat == .zero)
            let replicator = try Replicator(config: config)
            #expect(replicator.config.heartbeatTimeInterval == 300)
            #expect(replicator.config.maxAttemptWaitTimeInterval == 300)
            #expect(replicator.config.heartbeat == ReplicatorConfiguration.defaultHeartbeat)

            config.heartbeatTimeInterval = 12.5
            #expect(config.heartbeat == .milliseconds(12_500))
            #expect(try Replicator(config: config).config.heartbeatTimeInterval == 12.5)

            for refused in [
                { (c: inout ReplicatorConfiguration) in c.heartbeatTimeInterval = -1 },
                { (c: inout ReplicatorConfiguration) in c.maxAttemptWaitTimeInterval = -0.5 },
                { (c: inout ReplicatorConfiguration) in c.maxAttempts = -1 },
            ] {
                var bad = config
                refused(&bad)
                let candidate = bad
                let error = #expect(throws: PeerSyncError.self) { try Replicator(config: candidate) }
                #expect(error?.code == .invalidArgument)
            }
        }
    }

    /// `maxAttempts` 0 means `defaultMaxAttemptsSingleShot` (10) for a one-shot replicator:
    /// against a port where nothing listens it fails 10 times in a row, then stops with the
    /// error.
    @Test func zeroMaxAttemptsIsTenForAOneShotReplicator() async throws {
        try await withDatabase { db in
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: try await closedURL(db)))
            config.addCollection(try db.defaultCollection())
            config.maxAttempts = 0
            config.maxAttemptWaitTimeInterval = 0.02   // the backoff's cap: the test stays short
            let replicator = try Replicator(config: config)
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error != nil)
            #expect(replicator.status.retry?.failedAttempt == ReplicatorConfiguration.defaultMaxAttemptsSingleShot)
        }
    }

    /// `maxAttempts` 0 means `defaultMaxAttemptsContinuous` (unlimited) for a continuous
    /// replicator: it is still retrying after more than 10 failures, until stopped.
    @Test func zeroMaxAttemptsIsUnlimitedForAContinuousReplicator() async throws {
        try await withDatabase { db in
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: try await closedURL(db)))
            config.addCollection(try db.defaultCollection())
            config.continuous = true
            config.maxAttemptWaitTimeInterval = 0.02
            let replicator = try Replicator(config: config)
            let beyondTen = Shared(false)
            let token = replicator.addChangeListener { change in
                if (change.status.retry?.failedAttempt ?? 0) > 12 { beyondTen.update { $0 = true } }
            }
            replicator.start()
            // Generous: attempts are quick (refused at once, 20 ms apart); this only bounds a failure.
            let deadline = ContinuousClock.now + .seconds(120)
            while !beyondTen.value, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(beyondTen.value)
            #expect(replicator.status.activity != .stopped)
            replicator.stop()
            await replicator.waitUntilStopped()
            replicator.removeChangeListener(withToken: token)
        }
    }

    // MARK: removeChangeListener(withToken:)

    /// A change listener removed with `removeChangeListener(withToken:)` hears nothing; one
    /// kept hears the replicator's changes. (Document listeners: OneImportTests.)
    @Test func removeChangeListenerWithTokenStopsTheEvents() async throws {
        try await withDatabase { db in
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: try await closedURL(db)))
            config.addCollection(try db.defaultCollection())
            config.maxAttempts = 1
            let replicator = try Replicator(config: config)
            let kept = Shared<[ReplicatorActivityLevel]>([])
            let removed = Shared(0)
            replicator.addChangeListener { change in kept.update { $0.append(change.status.activity) } }
            let token = replicator.addChangeListener { _ in removed.update { $0 += 1 } }
            replicator.removeChangeListener(withToken: token)
            replicator.start()
            await replicator.waitUntilStopped()
            // The listener queue may deliver the last change just after the stop is seen.
            let deadline = ContinuousClock.now + .seconds(30)
            while kept.value.last != .stopped, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(kept.value.last == .stopped)
            #expect(removed.value == 0)
        }
    }

    // MARK: ReplicatedDocument.scope / .collection, DocumentReplication.replicator

    /// The names and types (the values are asserted over a real sync in OneImportTests):
    /// `scope` and `collection` are the two names; `replicator` is optional in PeerSync (nil
    /// only for a passive session's events, which no `Replicator` runs).
    @Test func replicationEventsHaveCouchbaseLitesPropertyNames() {
        let documentProperties: [PartialKeyPath<ReplicatedDocument>] = [
            \ReplicatedDocument.id as KeyPath<ReplicatedDocument, String>,
            \ReplicatedDocument.scope as KeyPath<ReplicatedDocument, String>,
            \ReplicatedDocument.collection as KeyPath<ReplicatedDocument, String>,
            \ReplicatedDocument.flags as KeyPath<ReplicatedDocument, DocumentFlags>,
            \ReplicatedDocument.error as KeyPath<ReplicatedDocument, PeerSyncError?>,
        ]
        let batchProperties: [PartialKeyPath<DocumentReplication>] = [
            \DocumentReplication.replicator as KeyPath<DocumentReplication, Replicator?>,
            \DocumentReplication.isPush as KeyPath<DocumentReplication, Bool>,
            \DocumentReplication.documents as KeyPath<DocumentReplication, [ReplicatedDocument]>,
        ]
        #expect(Set(documentProperties).count == 5)
        #expect(Set(batchProperties).count == 3)
        #expect(DocumentFlags.deleted != DocumentFlags.accessRemoved)
    }

    // MARK: collectionConfig(_:)

    /// `collectionConfig(_:)` returns a copy of a collection's settings, nil for one not
    /// added; adding again replaces them; a nil config is the default one.
    @Test func collectionConfigReturnsTheSettingsOfACollection() async throws {
        try await withDatabase { db in
            let tasks = try await db.createCollection(name: "tasks", scope: "app")
            let other = try await db.createCollection(name: "other", scope: "app")
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: "ws://127.0.0.1:4984/db"))
            #expect(config.collectionConfig(tasks) == nil)
            var settings = CollectionConfiguration()
            settings.documentIDs = ["a", "b"]
            settings.channels = ["public"]
            config.addCollection(tasks, config: settings)
            #expect(config.collectionConfig(tasks)?.documentIDs == ["a", "b"])
            #expect(config.collectionConfig(tasks)?.channels == ["public"])
            #expect(config.collectionConfig(other) == nil)
            config.addCollection(tasks, config: nil)
            #expect(config.collectionConfig(tasks)?.documentIDs == nil)
            #expect(config.collectionConfig(tasks)?.channels == nil)
            config.removeCollection(tasks)
            #expect(config.collectionConfig(tasks) == nil)
        }
    }

    // MARK: SessionAuthenticator

    /// `SessionAuthenticator(sessionID:cookieName:)`: Sync Gateway's cookie name by default,
    /// sent as `Cookie: <name>=<id>` on the replicator's upgrade request (after a `Cookie`
    /// of `headers`).
    @Test func sessionAuthenticatorSendsItsCookie() async throws {
        #expect(SessionAuthenticator(sessionID: "s1").cookieName == "SyncGatewaySession")
        #expect(SessionAuthenticator(sessionID: "s1", cookieName: "Sess").cookieName == "Sess")
        #expect(SessionAuthenticator(sessionID: "s1").sessionID == "s1")
        let cookies = Shared<[String]>([])
        var serverConfig = WebSocketServerConfiguration()
        serverConfig.host = "127.0.0.1"
        serverConfig.port = 0
        let route = WebSocketRoute(path: nil, subprotocols: WebSocketReplicatorConnector.subprotocols, authenticate: { request, _ in
            cookies.update { $0.append(request.headers["Cookie"] ?? "none") }
            return .reject(status: 403, message: "cookie seen")
        }) { _ in }
        let server = try await WebSocketServer.start(configuration: serverConfig, routes: [route])
        try await withDatabase { db in
            var config = ReplicatorConfiguration(target: try URLEndpoint(url: "ws://127.0.0.1:\(server.port)/db"))
            config.addCollection(try db.defaultCollection())
            config.maxAttempts = 1
            config.authenticator = SessionAuthenticator(sessionID: "abc123")
            config.headers = ["Cookie": "theme=dark"]
            let replicator = try Replicator(config: config)
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error != nil)
        }
        await server.stop()
        #expect(cookies.value == ["theme=dark; SyncGatewaySession=abc123"])
    }

    // MARK: The pinned certificate

    /// `pinnedServerCertificate` is a `Certificate` (Couchbase Lite: `SecCertificate`), e.g.
    /// the listener's: pinned, the sync goes through; another certificate pinned, the
    /// replicator stops with a TLS error. `serverCertificate` is the DER the server presented.
    @Test func pinnedServerCertificateIsACertificate() async throws {
        try await withDatabase("server") { server in
            try await withDatabase("client") { client in
                var listenerConfig = URLEndpointListenerConfiguration(collections: [try server.defaultCollection()])
                listenerConfig.networkInterface = "127.0.0.1"
                let listener = try URLEndpointListener(config: listenerConfig)
                try await listener.start()
                let certificate = try #require(listener.tlsIdentity?.certificate)
                try await server.defaultCollection().save(document: MutableDocument(id: "d", data: ["v": 1]))

                var config = ReplicatorConfiguration(target: try URLEndpoint(url: try #require(listener.urls.first)))
                config.addCollection(try client.defaultCollection())
                config.replicatorType = .pull
                config.maxAttempts = 1
                config.pinnedServerCertificate = certificate
                let pinned = try Replicator(config: config)
                pinned.start()
                await pinned.waitUntilStopped()
                #expect(pinned.status.error == nil)
                #expect(try await client.defaultCollection().document(id: "d")?.int(forKey: "v") == 1)
                #expect(try Certificate(derBytes: try #require(pinned.serverCertificate)) == certificate)

                let stranger = try TLSIdentity.createIdentity(for: [.serverAuth], attributes: [certAttrCommonName: "stranger"])
                config.pinnedServerCertificate = stranger.certificate
                let refused = try Replicator(config: config)
                refused.start()
                await refused.waitUntilStopped()
                #expect(refused.status.error?.trustFailure == .pinMismatch)
                await listener.stop()
            }
        }
    }

    // MARK: save(document:) by value

    /// `save(document:)` by value returns the saved document (the `inout` form stays):
    /// saving the returned document again makes its child revision.
    @Test func saveByValueReturnsTheSavedDocument() async throws {
        try await withDatabase { db in
            let tasks = try db.defaultCollection()
            let first = try await tasks.save(document: MutableDocument(id: "t", data: ["n": 1]))
            #expect(first.revisionID?.hasPrefix("1-") == true)
            var edited = first
            edited.setInt(2, forKey: "n")
            let second = try await tasks.save(document: edited)
            #expect(second.revisionID?.hasPrefix("2-") == true)
            var inPlace = second
            inPlace.setInt(3, forKey: "n")
            try await tasks.save(document: &inPlace)
            #expect(inPlace.revisionID?.hasPrefix("3-") == true)
            #expect(try await tasks.document(id: "t")?.int(forKey: "n") == 3)
        }
    }

    // MARK: Documents from Swift values

    struct TaskItem: Codable, Equatable {
        var title: String
        var done: Bool
        var tags: [String]
        var due: Double?
    }

    /// A `MutableDocument` from a `Codable` value (`init(id:encoding:)`) and back
    /// (`decode(as:)`), through a save.
    @Test func codableValuesRoundTripThroughADocument() async throws {
        try await withDatabase { db in
            let task = TaskItem(title: "Buy milk", done: false, tags: ["home", "shop"], due: 1.5)
            let saved = try await db.defaultCollection().save(document: try MutableDocument(id: "t", encoding: task))
            #expect(saved.string(forKey: "title") == "Buy milk")
            let read = try #require(try await db.defaultCollection().document(id: "t"))
            #expect(try read.decode(as: TaskItem.self) == task)
            #expect(try saved.decode(as: TaskItem.self) == task)
        }
    }

    /// `JSONValue` is expressible by string interpolation: `["title": "pid \(pid)"]`
    /// compiles as a document's data.
    @Test func jsonValueStringInterpolation() {
        let pid = 4242
        let data: [String: JSONValue] = ["title": "pid \(pid)", "plain": "text"]
        #expect(data["title"] == .string("pid 4242"))
        #expect(MutableDocument(id: "p", data: data).string(forKey: "title") == "pid 4242")
    }

    /// `[String: Any]` bridging both ways: `MutableDocument(id:dictionary:)`,
    /// `setData(dictionary:)`, `toDictionary()`, `JSONValue(any:)` / `.anyValue`; a value JSON
    /// cannot hold is refused with `.invalidArgument`.
    @Test func foundationDictionariesBridgeBothWays() async throws {
        let dictionary: [String: Any] = ["title": "x", "n": 3, "ratio": 0.5, "done": true,
                                         "tags": ["a", "b"], "nested": ["k": NSNull()]]
        var document = try MutableDocument(id: "d", dictionary: dictionary)
        #expect(document.string(forKey: "title") == "x")
        #expect(document.int(forKey: "n") == 3)
        let back = document.toDictionary()
        #expect(back["title"] as? String == "x")
        #expect(back["tags"] as? [String] == ["a", "b"])
        #expect((back["nested"] as? [String: Any])?["k"] is NSNull)
        #expect(try JSONValue(any: try #require(back["ratio"])) == .double(0.5))
        #expect(JSONValue.bool(true).anyValue as? Bool == true)

        try document.setData(dictionary: ["only": 1])
        #expect(document.toDictionary().keys.sorted() == ["only"])
        do {
            try document.setData(dictionary: ["bytes": Data([1, 2])])
            Issue.record("a Data value was accepted")
        } catch {
            #expect(error.code == .invalidArgument)
        }
        #expect(document.toDictionary().keys.sorted() == ["only"])
    }

    // MARK: The README's first screen

    /// The root README's first Swift block — a listener and a replicator syncing two
    /// databases — imports `PeerSync` only and fits a screen. (`Tools/checks/consumer-by-url`
    /// builds and runs exactly that block in a package depending on this repository by URL.)
    @Test func readmeFirstExampleImportsPeerSyncOnly() throws {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        let start = try #require(text.range(of: "```swift\n"))
        let end = try #require(text.range(of: "\n```", range: start.upperBound..<text.endIndex))
        let lines = text[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
        let imports = lines.filter { $0.hasPrefix("import ") || $0.hasPrefix("@_exported") || $0.hasPrefix("@testable") }
        #expect(imports == ["import PeerSync"])
        let code = lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
        #expect(code.count <= 25, "the first example has \(code.count) lines of code")
        #expect(lines.contains { $0.contains("URLEndpointListener(") } && lines.contains { $0.contains("Replicator(config:") })
    }
}

/// A value shared with listener callbacks (a `Mutex` cannot be captured: it is not copyable).
final class Shared<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ value: Value) { storage = Mutex(value) }
    func update(_ body: (inout Value) -> Void) { storage.withLock { body(&$0) } }
    var value: Value { storage.withLock { $0 } }
}
