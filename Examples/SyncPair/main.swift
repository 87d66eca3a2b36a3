// SyncPair: a passive peer (a listener) and an active peer (a replicator) in one program, over
// wss:// on 127.0.0.1 with an anonymous self-signed TLS identity and a password; continuous
// sync, live edits on both sides, every replicator status and document event printed. It ends
// by itself: exit 0 once every edit has reached both sides, exit 1 with one clear line if
// something did not converge within a generous deadline (60 s per step, × PEERSYNC_SLOW).
//
//   swift run --enable-all-traits example-syncpair [DIR]
//
// DIR (default: a new temporary directory, removed at the end) holds the two databases.

import ExampleSupport
import Foundation
import PeerSync
import Synchronization

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count <= 1, arguments.first?.hasPrefix("-") != true else {
    say("usage: example-syncpair [DIR]")
    exit(2)
}
let keepFolder = arguments.first != nil
let folder = try arguments.first ?? makeTemporaryDirectory(prefix: "peersync-syncpair")

/// Prints replicator statuses: one line per change of activity (progress alone is not printed).
/// Listeners run on the replicator's queue; the last activity printed is kept under a lock.
final class StatusPrinter: Sendable {
    private let last = Mutex<ReplicatorActivityLevel?>(nil)

    func print(_ change: ReplicatorChange) {
        let status = change.status
        let previous = last.withLock { last in
            defer { last = status.activity }
            return last
        }
        guard previous != status.activity || status.error != nil else { return }
        var line = "replicator: \(status.activity)"
        if status.progress.total > 0 { line += " (\(status.progress.completed)/\(status.progress.total))" }
        if let error = status.error { line += ", error: \(error)" }
        say(line)
    }
}

func run(in folder: String) async throws {
    // The passive peer, "laptop": its collection is served by the listener.
    let laptop = try await Database(name: "laptop", config: DatabaseConfiguration(directory: folder))
    let phone = try await Database(name: "phone", config: DatabaseConfiguration(directory: folder))
    let laptopTasks = try await laptop.createCollection(name: "tasks", scope: "app")
    let phoneTasks = try await phone.createCollection(name: "tasks", scope: "app")

    var listenerConfig = URLEndpointListenerConfiguration(collections: [laptopTasks])
    listenerConfig.networkInterface = "127.0.0.1"          // never reachable from elsewhere
    listenerConfig.authenticator = ListenerPasswordAuthenticator.matching(username: "phone", password: "correct horse")
    // No tlsIdentity: an anonymous self-signed one is made on the first start (kept in the
    // database folder and reused later).
    let listener = try URLEndpointListener(config: listenerConfig)
    try await listener.start()
    guard let url = listener.urls.first else { throw PeerSyncError(.internalError, "the listener has no URL") }
    say("laptop: listening on \(url) (anonymous self-signed TLS identity, password for user phone)")

    // Documents written before the replicator starts.
    for (id, title) in [("phone-1", "Buy milk"), ("phone-2", "Call Alice")] {
        try await phoneTasks.save(document: MutableDocument(id: id, data: ["title": "\(title)", "by": "phone"]))
    }
    try await laptopTasks.save(document: MutableDocument(id: "laptop-1", data: ["title": "Book flights", "by": "laptop"]))
    say("phone:  wrote phone-1, phone-2;  laptop: wrote laptop-1")

    // The active peer, "phone": continuous push and pull, trusting only a self-signed server
    // certificate (the anonymous identity), with the password.
    var config = ReplicatorConfiguration(target: try URLEndpoint(url: url))
    config.addCollection(phoneTasks)
    config.continuous = true
    config.acceptOnlySelfSignedServerCertificate = true
    config.authenticator = BasicAuthenticator(username: "phone", password: "correct horse")
    let replicator = try Replicator(config: config)

    let printer = StatusPrinter()
    let statusToken = replicator.addChangeListener { printer.print($0) }
    let documentToken = replicator.addDocumentReplicationListener { event in
        for document in event.documents {
            let direction = event.isPush ? "pushed to laptop  " : "pulled from laptop"
            let deleted = document.flags.contains(.deleted) ? " (deleted)" : ""
            let error = document.error.map { ", error: \($0)" } ?? ""
            say("phone:  \(direction) \(document.collectionFullName)/\(document.id)\(deleted)\(error)")
        }
    }
    replicator.start()

    try await waitUntil("the first sync (3 documents on both sides)") {
        try await sameDocuments(phoneTasks, laptopTasks, count: 3)
    }
    say("both:   3 documents, identical")

    // Live edits on both sides while the replicator runs: each reaches the other side.
    var milk = try await laptopTasks.document(id: "phone-1")?.toMutable() ?? MutableDocument(id: "phone-1")
    milk.setBool(true, forKey: "done")
    try await laptopTasks.save(document: &milk)
    try await laptopTasks.save(document: MutableDocument(id: "laptop-2", data: ["title": "Water the plants", "by": "laptop"]))
    say("laptop: marked phone-1 done, wrote laptop-2")
    var flights = try await phoneTasks.document(id: "laptop-1")?.toMutable() ?? MutableDocument(id: "laptop-1")
    flights.setString("aisle seat", forKey: "note")
    try await phoneTasks.save(document: &flights)
    if let call = try await phoneTasks.document(id: "phone-2") { _ = try await phoneTasks.delete(document: call) }
    say("phone:  added a note to laptop-1, deleted phone-2")

    try await waitUntil("the live edits reaching both sides (3 documents, the same bodies)") {
        guard try await sameDocuments(phoneTasks, laptopTasks, count: 3) else { return false }
        let done = try await phoneTasks.document(id: "phone-1")?.bool(forKey: "done") == true
        let note = try await laptopTasks.document(id: "laptop-1")?.string(forKey: "note") == "aisle seat"
        return done && note
    }
    for document in try await laptopTasks.allDocuments().sorted(by: { $0.id < $1.id }) {
        say("both:   \(document.id) \(document.toJSON())")
    }

    replicator.stop()
    await replicator.waitUntilStopped()
    statusToken.remove()
    documentToken.remove()
    await listener.stop()
    try await phone.close()
    try await laptop.close()
    say("SyncPair: converged, both peers hold the same 3 documents")
}

do {
    try await run(in: folder)
    if !keepFolder { try? FileManager.default.removeItem(atPath: folder) }
} catch {
    if !keepFolder { try? FileManager.default.removeItem(atPath: folder) }
    fail("\(error)")
}
