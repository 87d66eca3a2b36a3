// AppAndExtension: an app and its extension — two processes — share one database folder and
// each sees the other's changes live; the app also syncs continuously with a "gateway" (a
// plain ws:// listener on 127.0.0.1 with its REST API on), so a document that `curl PUT`s
// into the gateway shows up in the app and in the extension. The shape of Couchbase's
// "sharing data between an iOS app and its extension" post, on Linux processes.
//
// `Examples/AppAndExtension/run` starts all three and the curl; by hand:
//
//   example-appandextension gateway DIR      the listener; writes its port to DIR/gateway.port,
//                                            stops when DIR/stop exists
//   example-appandextension extension DIR    waits for task-1 (the app's), marks it done, writes
//                                            task-2, exits once it sees task-3 (the gateway's)
//   example-appandextension app DIR          writes task-1, syncs with the gateway, touches
//                                            DIR/app.ready once in sync, exits once it holds the
//                                            extension's edits and task-3 and has pushed everything
//   curl -X PUT http://127.0.0.1:$(cat DIR/gateway.port)/demo/task-3 -d '{"title":"...","by":"curl"}'
//
// The app and the extension open the same folder DIR/shared. Each role exits 0 when its part
// is done, 1 with one clear line if it is not within a generous deadline (× PEERSYNC_SLOW).

import ExampleSupport
import Foundation
import PeerSync

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 2, ["gateway", "app", "extension"].contains(arguments[0]) else {
    say("usage: example-appandextension gateway|app|extension DIR")
    exit(2)
}
let role = arguments[0]
let folder = arguments[1]

/// Opens the database the app and the extension share (the "app group container",
/// `DIR/shared`) as `role`, with a change listener that prints what it sees (see ``watch``).
func openShared(_ folder: String, as role: String) async throws -> (Database, PeerSync.Collection, ListenerToken) {
    let database = try await Database(name: "tasks", config: DatabaseConfiguration(directory: folder + "/shared"))
    let tasks = try database.defaultCollection()
    let token = watch(tasks, as: role)
    say("\(role): opened \(database.path)")
    return (database, tasks, token)
}

/// Prints every change of `tasks` committed by any process, as `<role>: sees …`.
func watch(_ tasks: PeerSync.Collection, as role: String) -> ListenerToken {
    tasks.addChangeListener { change in
        Task {
            for id in change.documentIDs.sorted() {
                let body = try? await tasks.document(id: id)?.toJSON()
                say("\(role): sees \(id) \(body ?? "(deleted)")")
            }
        }
    }
}

/// The listener standing in for Sync Gateway: ws:// (no TLS) on 127.0.0.1, guest access, REST on.
func gateway(_ folder: String) async throws {
    let database = try await Database(name: "gateway", config: DatabaseConfiguration(directory: folder))
    var config = URLEndpointListenerConfiguration(collections: [try database.defaultCollection()])
    config.networkInterface = "127.0.0.1"
    config.disableTLS = true
    config.enableREST = true
    config.databaseName = "demo"
    let listener = try URLEndpointListener(config: config)
    try await listener.start()
    guard let port = listener.port else { throw PeerSyncError(.internalError, "the listener has no port") }
    say("gateway: replication on ws://127.0.0.1:\(port)/demo, REST on http://127.0.0.1:\(port)/demo")
    try "\(port)\n".write(toFile: folder + "/gateway.port", atomically: true, encoding: .utf8)
    try await waitUntil("DIR/stop", timeout: .seconds(300)) { FileManager.default.fileExists(atPath: folder + "/stop") }
    await listener.stop()
    try await database.close()
    say("gateway: stopped")
}

/// The extension: no sync of its own; it sees what the app writes and pulls.
func appExtension(_ folder: String) async throws {
    let (database, tasks, token) = try await openShared(folder, as: "extension")
    try await waitUntil("task-1 from the app") { try await tasks.document(id: "task-1") != nil }
    if var task = try await tasks.document(id: "task-1")?.toMutable() {
        task.setBool(true, forKey: "done")
        try await tasks.save(document: &task)
        say("extension: marked task-1 done")
    }
    try await tasks.save(document: MutableDocument(id: "task-2", data: ["title": "Water the plants", "by": "extension", "done": false]))
    say("extension: wrote task-2")
    try await waitUntil("task-3 from the gateway (pulled by the app)") { try await tasks.document(id: "task-3") != nil }
    token.remove()
    try await database.close()
    say("extension: done")
}

/// The app: writes, syncs continuously with the gateway, sees the extension's edits live.
func app(_ folder: String) async throws {
    let (database, tasks, token) = try await openShared(folder, as: "app")
    try await tasks.save(document: MutableDocument(id: "task-1", data: ["title": "Buy milk", "by": "app", "done": false]))
    say("app: wrote task-1")

    let port = try String(contentsOfFile: folder + "/gateway.port", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    var config = ReplicatorConfiguration(target: try URLEndpoint(url: URL(string: "ws://127.0.0.1:\(port)/demo")!))
    config.addCollection(tasks)
    config.continuous = true
    let replicator = try Replicator(config: config)
    let statusToken = replicator.addChangeListener { change in
        if let error = change.status.error { say("app: replicator error: \(error)") }
    }
    let documentToken = replicator.addDocumentReplicationListener { event in
        for document in event.documents { say("app: \(event.isPush ? "pushed" : "pulled") \(document.id)") }
    }
    replicator.start()
    try await waitUntil("the first sync with the gateway") { replicator.status.activity == .idle }
    _ = FileManager.default.createFile(atPath: folder + "/app.ready", contents: nil)
    say("app: in sync with the gateway")

    try await waitUntil("the extension's edits, task-3 from the gateway, and everything pushed") {
        guard try await tasks.document(id: "task-1")?.bool(forKey: "done") == true,
              try await tasks.document(id: "task-2") != nil,
              try await tasks.document(id: "task-3") != nil else { return false }
        guard replicator.status.activity == .idle else { return false }
        return try await replicator.pendingDocumentIDs(collection: tasks).isEmpty
    }
    for document in try await tasks.allDocuments().sorted(by: { $0.id < $1.id }) {
        say("app: holds \(document.id) \(document.toJSON())")
    }
    replicator.stop()
    await replicator.waitUntilStopped()
    statusToken.remove()
    documentToken.remove()
    token.remove()
    try await database.close()
    say("app: done")
}

do {
    switch role {
    case "gateway": try await gateway(folder)
    case "extension": try await appExtension(folder)
    default: try await app(folder)
    }
} catch {
    fail("\(role): \(error)")
}
