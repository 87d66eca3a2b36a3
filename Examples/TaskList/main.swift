// A task list on the default (SQLite) backend: saves, updates and deletes documents,
// resolves a conflicting edit with a conflict handler, then keeps a live query — the open
// tasks, ordered by date — on screen while a local save, another process and a syncing peer
// change the tasks.
//
//   swift run example-tasklist /tmp/tasks.peersync
//
// Run `peersync --db /tmp/tasks.peersync --collection app.tasks watch` in another terminal to
// see a second process receive every change live, or
// `peersync --db /tmp/tasks.peersync query "SELECT meta().id, title FROM app.tasks WHERE done = false"`.

import ExampleSupport
import Foundation
import PeerSync
import Synchronization

// `example-tasklist PATH --add ID TITLE DATE`: the "other process" of the live-query part —
// opens the same database, saves one open task, exits.
let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.count == 5, arguments[1] == "--add" {
    do {
        let db = try await Database(path: arguments[0], config: DatabaseConfiguration(directory: arguments[0]))
        guard let tasks = try await db.collection(name: "tasks", scope: "app") else {
            throw PeerSyncError(.notFound, "no collection app.tasks in \(arguments[0])")
        }
        try await tasks.save(document: MutableDocument(id: arguments[2], data: [
            "title": .string(arguments[3]), "done": false, "date": .string(arguments[4]),
        ]))
        try await db.close()
        exit(0)
    } catch {
        fail("\(error)")
    }
}

let path = arguments.first ?? FileManager.default.temporaryDirectory
    .appendingPathComponent("tasks.peersync").path

do {
    let db = try await Database(path: path, config: DatabaseConfiguration(directory: path))
    var tasks = try await db.collection(name: "tasks", scope: "app")
    if tasks == nil { tasks = try await db.createCollection(name: "tasks", scope: "app") }
    guard let tasks else { throw PeerSyncError(.notFound, "no tasks collection") }
    say("opened \(db.path) (backend: \(db.config.backend.name)), collection \(tasks.fullName)")

    // Save three tasks.
    for (id, title, date) in [("task-1", "Buy milk", "2026-12-03"), ("task-2", "Call Alice", "2026-12-01"),
                              ("task-3", "Book flights", "2026-12-02")] {
        var task = MutableDocument(id: id)
        task.setString(title, forKey: "title")
        task.setBool(false, forKey: "done")
        task.setString(date, forKey: "date")
        try await tasks.save(document: &task)
        say("saved   \(id) \"\(title)\" as revision \(task.revisionID ?? "-")")
    }

    // Update one.
    if var task = try await tasks.document(id: "task-2")?.toMutable() {
        task.setBool(true, forKey: "done")
        try await tasks.save(document: &task)
        say("updated task-2 done=true, now revision \(task.revisionID ?? "-")")
    }

    // Delete one (a tombstone that would replicate).
    if let task = try await tasks.document(id: "task-3") {
        _ = try await tasks.delete(document: task)
        say("deleted task-3")
    }

    // A conflict: two editors start from the same revision of task-1.
    guard let base = try await tasks.document(id: "task-1") else { throw PeerSyncError(.notFound, "task-1 vanished") }
    var phone = base.toMutable()
    var laptop = base.toMutable()
    phone.setString("Buy oat milk", forKey: "title")
    try await tasks.save(document: &phone)
    say("phone   saved task-1 title \"Buy oat milk\" (revision \(phone.revisionID ?? "-"))")
    laptop.setBool(true, forKey: "done")
    let plain = try await tasks.save(document: &laptop, concurrencyControl: .failOnConflict)
    say("laptop  save with failOnConflict: \(plain ? "saved" : "refused, task-1 changed since it was read")")
    let merged = try await tasks.save(document: &laptop) { mine, current in
        // Keep the other editor's title and our done flag.
        if let title = current?.string(forKey: "title") { mine.setString(title, forKey: "title") }
        return true
    }
    let final = try await tasks.document(id: "task-1")
    say("laptop  save with a conflict handler: \(merged ? "merged" : "gave up") -> \(final?.toJSON() ?? "-") (revision \(final?.revisionID ?? "-"))")

    say("documents now: \(try await tasks.documentIDs().joined(separator: ", "))")
    try await followOpenTasks(db: db, tasks: tasks)
    try await db.close()
} catch {
    FileHandle.standardError.write(Data("example-tasklist: \(error)\n".utf8))
    exit(1)
}

/// The live query: open tasks, ordered by date. Its first report is the current result; later
/// ones come only when a commit changes the result — here a local save, a save by another
/// process, and documents a syncing peer pushes.
func followOpenTasks(db: Database, tasks: PeerSync.Collection) async throws {
    // A second run on the same folder starts this part from the same state.
    for id in ["task-4", "task-5", "task-6"] where try await tasks.document(id: id) != nil {
        try await tasks.purge(id: id)
    }
    let openTasks = try db.createQuery(
        "SELECT meta().id AS id, title, date FROM app.tasks WHERE done = false ORDER BY date, meta().id")
    let shown = Shown()
    let changes = openTasks.changes()
    let follower = Task {
        for await change in changes {
            let rows = change.results?.allResults() ?? []
            let ids = rows.compactMap { $0.string(forKey: "id") }
            say("live:   open tasks by date: " + (rows.isEmpty ? "none" : rows.map {
                "\($0.string(forKey: "id") ?? "?") \($0.string(forKey: "date") ?? "?") \"\($0.string(forKey: "title") ?? "?")\""
            }.joined(separator: ", ")))
            shown.ids.withLock { $0 = ids }
        }
    }
    func waitForOpenTasks(_ ids: [String], after what: String) async throws {
        try await waitUntil("the live query showing \(ids) after \(what)") { shown.ids.withLock { $0 } == ids }
    }
    try await waitForOpenTasks([], after: "it started")

    // 1. A local save.
    try await tasks.save(document: MutableDocument(id: "task-4", data: ["title": "Pay rent", "done": false, "date": "2026-12-04"]))
    say("local:  saved task-4 (open, 2026-12-04)")
    try await waitForOpenTasks(["task-4"], after: "a local save")

    // 2. Another process: this program again, saving into the same database.
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.arguments = [db.path, "--add", "task-5", "Water the plants", "2026-12-02"]
    try child.run()
    child.waitUntilExit()
    guard child.terminationStatus == 0 else { throw PeerSyncError(.internalError, "the second process exited with \(child.terminationStatus)") }
    say("other process: saved task-5 (open, 2026-12-02)")
    try await waitForOpenTasks(["task-5", "task-4"], after: "another process's save")

    // 3. A syncing peer: a phone replicating continuously with this database's listener.
    let phoneFolder = try makeTemporaryDirectory(prefix: "tasklist-phone")
    defer { try? FileManager.default.removeItem(atPath: phoneFolder) }
    let phone = try await Database(name: "phone", config: DatabaseConfiguration(directory: phoneFolder))
    let phoneTasks = try await phone.createCollection(name: "tasks", scope: "app")
    var listenerConfig = URLEndpointListenerConfiguration(collections: [tasks])
    listenerConfig.networkInterface = "127.0.0.1"
    listenerConfig.disableTLS = true
    let listener = try URLEndpointListener(config: listenerConfig)
    try await listener.start()
    guard let url = listener.urls.first else { throw PeerSyncError(.internalError, "the listener has no URL") }
    var config = ReplicatorConfiguration(target: try URLEndpoint(url: url))
    config.addCollection(phoneTasks)
    config.continuous = true
    let replicator = try Replicator(config: config)
    replicator.start()
    try await phoneTasks.save(document: MutableDocument(id: "task-6", data: ["title": "Renew passport", "done": false, "date": "2026-12-01"]))
    say("phone:  saved task-6 (open, 2026-12-01), syncing with \(url)")
    try await waitForOpenTasks(["task-6", "task-5", "task-4"], after: "the phone's push")
    try await waitUntil("task-4 reaching the phone") { try await phoneTasks.document(id: "task-4") != nil }
    if var rent = try await phoneTasks.document(id: "task-4")?.toMutable() {
        rent.setBool(true, forKey: "done")
        try await phoneTasks.save(document: &rent)
        say("phone:  marked task-4 done")
    }
    try await waitForOpenTasks(["task-6", "task-5"], after: "the phone marked task-4 done")

    replicator.stop()
    await replicator.waitUntilStopped()
    await listener.stop()
    try await phone.close()
    follower.cancel()
    say("TaskList: the live query followed a local save, another process and a syncing peer: open tasks task-6, task-5")
}

/// The IDs the live query reported last, shared by the task that follows it and the waits.
final class Shown: Sendable {
    let ids = Mutex<[String]>([])
}
