// A task list on the default (SQLite) backend: saves, updates and deletes documents and
// resolves a conflicting edit with a conflict handler.
//
//   swift run example-tasklist /tmp/tasks.peersync
//
// Run `peersync --db /tmp/tasks.peersync --collection app.tasks watch` in another terminal to
// see a second process receive every change live.

import Foundation
import PeerSync

let path = CommandLine.arguments.dropFirst().first ?? FileManager.default.temporaryDirectory
    .appendingPathComponent("tasks.peersync").path

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

do {
    let db = try await Database(path: path, config: DatabaseConfiguration(directory: path))
    var tasks = try await db.collection(name: "tasks", scope: "app")
    if tasks == nil { tasks = try await db.createCollection(name: "tasks", scope: "app") }
    guard let tasks else { throw PeerSyncError(.notFound, "no tasks collection") }
    say("opened \(db.path) (backend: \(db.config.backend.name)), collection \(tasks.fullName)")

    // Save three tasks.
    for (id, title) in [("task-1", "Buy milk"), ("task-2", "Call Alice"), ("task-3", "Book flights")] {
        var task = MutableDocument(id: id)
        task.setString(title, forKey: "title")
        task.setBool(false, forKey: "done")
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
    try await db.close()
} catch {
    FileHandle.standardError.write(Data("example-tasklist: \(error)\n".utf8))
    exit(1)
}
