import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncReplicator
import PeerSyncWebSocketReplication
import Testing

/// The REST API with real HTTP requests over TCP.
@Suite struct RESTTests {
    @Test func documentLifecycleChangesAndInfo() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let auth = basic("alice", "secret")

            // Credentials are required, with a Basic challenge.
            let anonymous = try await httpRequest(port: port, "GET", "/server")
            #expect(anonymous.status == 401 && anonymous.headers["WWW-Authenticate"] == "Basic realm=\"PeerSync\", charset=\"UTF-8\"")
            #expect(try await httpRequest(port: port, "GET", "/server", headers: [basic("alice", "wrong")]).status == 401)

            let created = try await httpRequest(port: port, "PUT", "/server/task%203", body: #"{"name":"task3","done":false}"#,
                                                headers: [auth])
            #expect(created.status == 201)
            let rev1 = try #require(created.json?["rev"]?.stringValue)
            #expect(rev1.hasPrefix("1-") && created.json?["id"] == "task 3")
            #expect(try await db.defaultCollection().document(id: "task 3")?.string(forKey: "name") == "task3")

            let fetched = try await httpRequest(port: port, "GET", "/server/task%203", headers: [auth])
            #expect(fetched.status == 200 && fetched.headers["Content-Type"] == "application/json")
            #expect(fetched.json == ["_id": "task 3", "_rev": .string(rev1), "name": "task3", "done": false])

            // Update needs the current revision.
            #expect(try await httpRequest(port: port, "PUT", "/server/task%203", body: #"{"done":true}"#, headers: [auth]).status == 409)
            #expect(try await httpRequest(port: port, "PUT", "/server/task%203?rev=1-abc", body: #"{"done":true}"#, headers: [auth]).status == 409)
            let updated = try await httpRequest(port: port, "PUT", "/server/task%203?rev=\(rev1)", body: #"{"done":true}"#, headers: [auth])
            #expect(updated.status == 201)
            let rev2 = try #require(updated.json?["rev"]?.stringValue)
            #expect(rev2.hasPrefix("2-"))
            // `_rev` in the body works too (and a stale one conflicts).
            #expect(try await httpRequest(port: port, "PUT", "/server/task%203", body: #"{"_rev":"\#(rev1)","x":1}"#, headers: [auth]).status == 409)

            // Bad input.
            #expect(try await httpRequest(port: port, "PUT", "/server/bad", body: "{not json", headers: [auth]).status == 400)
            #expect(try await httpRequest(port: port, "PUT", "/server/bad", body: "[1,2]", headers: [auth]).status == 400)
            #expect(try await httpRequest(port: port, "PUT", "/server/bad", body: #"{"_secret":1}"#, headers: [auth]).status == 400)
            #expect(try await httpRequest(port: port, "GET", "/server/missing", headers: [auth]).status == 404)
            #expect(try await httpRequest(port: port, "GET", "/otherdb/x", headers: [auth]).status == 404)
            #expect(try await httpRequest(port: port, "POST", "/server/x", body: "{}", headers: [auth]).status == 405)
            #expect(try await httpRequest(port: port, "GET", "/server/_blipsync", headers: [auth]).status == 426)

            // Changes feed and info.
            var other = MutableDocument(id: "other", data: ["v": 1])
            try await db.defaultCollection().save(document: &other)
            let changes = try await httpRequest(port: port, "GET", "/server/_changes?since=0", headers: [auth])
            #expect(changes.status == 200)
            let results = try #require(changes.json?["results"]?.arrayValue)
            #expect(results.compactMap { $0["id"]?.stringValue } == ["task 3", "other"])
            #expect(results.first?["changes"]?.arrayValue?.first?["rev"]?.stringValue == rev2)
            let lastSeq = try #require(changes.json?["last_seq"]?.intValue)
            let since = try await httpRequest(port: port, "GET", "/server/_changes?since=\(lastSeq)", headers: [auth])
            #expect(since.json?["results"]?.arrayValue?.isEmpty == true)
            #expect(try await httpRequest(port: port, "GET", "/server/_changes?since=x", headers: [auth]).status == 400)
            let info = try await httpRequest(port: port, "GET", "/server", headers: [auth])
            #expect(info.json?["db_name"] == "server" && info.json?["doc_count"] == 2)

            // Delete needs the revision; then the document is gone and the change is a deletion.
            #expect(try await httpRequest(port: port, "DELETE", "/server/task%203", headers: [auth]).status == 409)
            let deleted = try await httpRequest(port: port, "DELETE", "/server/task%203?rev=\(rev2)", headers: [auth])
            #expect(deleted.status == 200 && deleted.json?["rev"]?.stringValue?.hasPrefix("3-") == true)
            #expect(try await httpRequest(port: port, "GET", "/server/task%203", headers: [auth]).status == 404)
            let after = try await httpRequest(port: port, "GET", "/server/_changes?since=\(lastSeq)", headers: [auth])
            #expect(after.json?["results"]?.arrayValue?.first?["deleted"] == true)
            // A deleted document can be created again without a revision.
            #expect(try await httpRequest(port: port, "PUT", "/server/task%203", body: "{}", headers: [auth]).status == 201)

            await listener.stop()
            try await db.close()
        }
    }

    @Test func documentAddedWithRESTSyncsToAPeer() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let port = try #require(listener.port)
            let clientDB = try await openDatabase(dir, "client")
            let replicator = try Replicator(config: try replicatorConfig(clientDB, listener, type: .pull, continuous: true))
            replicator.start()
            #expect(await eventually { replicator.status.activity == .busy || replicator.status.activity == .idle })
            // REST over TLS needs a TLS client: write through the server database's REST twin on
            // a plain listener sharing the database.
            var plainConfig = URLEndpointListenerConfiguration(collections: [try serverDB.defaultCollection()])
            plainConfig.disableTLS = true
            plainConfig.enableREST = true
            plainConfig.networkInterface = "127.0.0.1"
            let plain = try URLEndpointListener(config: plainConfig)
            try await plain.start()
            let restPort = try #require(plain.port)
            #expect(restPort != port)
            let put = try await httpRequest(port: restPort, "PUT", "/server/from-curl", body: #"{"name":"via REST"}"#)
            #expect(put.status == 201)
            #expect(await eventually { (try? await clientDB.defaultCollection().document(id: "from-curl"))??.string(forKey: "name") == "via REST" })
            replicator.stop()
            await replicator.waitUntilStopped()
            await plain.stop()
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func readOnlyListenerRefusesRESTWrites() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, readOnly: true, password: false, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            #expect(try await httpRequest(port: port, "PUT", "/server/x", body: "{}").status == 403)
            #expect(try await httpRequest(port: port, "GET", "/server").status == 200)
            await listener.stop()
            try await db.close()
        }
    }

    /// Like Couchbase Lite's listener, only `_blipsync` is served unless REST is turned on.
    @Test func restIsOffByDefaultWhileReplicationWorks() async throws {
        try await withTempDirectory { dir in
            let serverDB = try await openDatabase(dir, "server")
            var config = URLEndpointListenerConfiguration(collections: [try serverDB.defaultCollection()])
            #expect(config.enableREST == false)
            config.disableTLS = true
            config.networkInterface = "127.0.0.1"
            config.authenticator = ListenerPasswordAuthenticator.matching(username: "alice", password: "secret")
            let listener = try URLEndpointListener(config: config)
            try await listener.start()
            let port = try #require(listener.port)
            var doc = MutableDocument(id: "seed", data: ["v": 1])
            try await serverDB.defaultCollection().save(document: &doc)
            let auth = basic("alice", "secret")
            #expect(try await httpRequest(port: port, "GET", "/server", headers: [auth]).status == 404)
            #expect(try await httpRequest(port: port, "GET", "/server/seed", headers: [auth]).status == 404)
            #expect(try await httpRequest(port: port, "PUT", "/server/x", body: "{}", headers: [auth]).status == 404)
            #expect(try await serverDB.defaultCollection().document(id: "x") == nil)
            let clientDB = try await openDatabase(dir, "client")
            let status = try await runToCompletion(try Replicator(config: try replicatorConfig(clientDB, listener, type: .pull)))
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(try await clientDB.defaultCollection().document(id: "seed") != nil)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    /// The default URL name is the database name made valid; explicit names must follow the rule.
    @Test func databaseNamesFollowCouchbaseLitesRule() async throws {
        #expect(URLEndpointListener.defaultDatabaseName(for: "L") == "l")
        #expect(URLEndpointListener.defaultDatabaseName(for: "My Tasks") == "my_tasks")
        #expect(URLEndpointListener.defaultDatabaseName(for: "2024") == "db2024")
        #expect(URLEndpointListener.defaultDatabaseName(for: "_x") == "db_x")
        #expect(URLEndpointListener.defaultDatabaseName(for: "") == "db")
        #expect(URLEndpointListener.defaultDatabaseName(for: "café.db") == "caf__db")
        #expect(URLEndpointListener.defaultDatabaseName(for: "a-b_c$(d)+e") == "a-b_c$(d)+e")
        for name in ["L", "My Tasks", "2024", "_x", "", "café.db", "a/b"] {
            #expect(URLEndpointListener.isValidDatabaseName(URLEndpointListener.defaultDatabaseName(for: name)))
        }
        for bad in ["Server", "1db", "_db", "a b", "a/b", "a.b", ""] {
            #expect(!URLEndpointListener.isValidDatabaseName(bad), "\(bad)")
        }
        try await withTempDirectory { dir in
            let db = try await Database(path: dir + "/My Tasks", config: DatabaseConfiguration(directory: dir, backend: storageBackend()))
            var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
            config.disableTLS = true
            config.networkInterface = "127.0.0.1"
            let listener = try URLEndpointListener(config: config)
            try await listener.start()
            #expect(listener.urls.first?.path == "/my_tasks")
            await listener.stop()
            config.databaseName = "Tasks"
            let error = #expect(throws: PeerSyncError.self) { try URLEndpointListener(config: config) }
            #expect(error?.code == .invalidArgument && error?.message.contains("[a-z][a-z0-9_$()+-]*") == true)
            try await db.close()
        }
    }

    @Test func configurationIsValidated() async throws {
        try await withTempDirectory { dir in
            #expect(throws: PeerSyncError.self) { try URLEndpointListener(config: URLEndpointListenerConfiguration(collections: [])) }
            let db = try await openDatabase(dir, "v")
            var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
            config.port = 70000
            #expect(throws: PeerSyncError.self) { try URLEndpointListener(config: config) }
            config.port = 0
            config.databaseName = "has space"
            #expect(throws: PeerSyncError.self) { try URLEndpointListener(config: config) }
            try await db.close()
        }
    }
}
