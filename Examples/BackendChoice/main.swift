// BackendChoice: one app, three storage backends chosen by configuration — SQLite, LMDB, or a
// toy in-memory backend written in this example (ToyStorage.swift) — with the same behaviour
// on each: the `result:` line it prints is identical whatever the backend.
//
//   example-backendchoice --backend sqlite|lmdb|toy [DIR]   the app (DIR: default a new temp dir, removed)
//   example-backendchoice --conformance                     the storage conformance suite over the toy backend
//
// `Examples/BackendChoice/run` runs the app on every backend, compares the results and runs
// the conformance suite. Exit 0 on success, 1 with one clear line otherwise.

import ExampleSupport
import Foundation
import PeerSync
import PeerSyncStorageTesting
import Synchronization

/// The backend named on the command line. SQLite and LMDB come from the umbrella
/// (`StorageBackends`, by package trait: LMDB needs the `LMDB` trait); "toy" is this example's.
func backend(named name: String) throws -> any StorageBackend {
    if name == "toy" { return ToyStorageBackend() }
    guard ["sqlite", "lmdb"].contains(name), let backend = StorageBackends.named(name) else {
        throw PeerSyncError(.invalidArgument, "unknown or not compiled-in backend '\(name)' (sqlite, lmdb with the LMDB trait, toy)")
    }
    return backend
}

/// Bytes of the files under `path` (their apparent sizes).
func diskUsage(_ path: String) -> Int {
    guard let files = FileManager.default.enumerator(atPath: path) else { return 0 }
    var total = 0
    for case let file as String in files {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path + "/" + file)
        if attributes?[.type] as? FileAttributeType == .typeRegular { total += (attributes?[.size] as? Int) ?? 0 }
    }
    return total
}

/// The app: a task list that writes, updates, deletes, reads back, watches its own changes,
/// and reopens the database to find everything still there.
func runApp(backendName: String, folder: String) async throws {
    // A folder holds one backend's store: asking for another backend than the one already
    // there throws `.invalidArgument` instead of creating a second database beside it.
    let chosen = try StorageBackends.backend(forDatabaseAt: folder + "/tasks.peersync", requested: try backend(named: backendName))
    let config = DatabaseConfiguration(directory: folder, backend: chosen)
    let started = ContinuousClock.now
    var database = try await Database(name: "tasks", config: config)
    say("opened \(database.path) on backend \(database.config.backend.name)")
    let tasks = try await database.createCollection(name: "tasks", scope: "app")

    // A change listener sees every document the app writes.
    let seen = Mutex(Set<String>())
    let token = tasks.addChangeListener { change in seen.withLock { $0.formUnion(change.documentIDs) } }

    for index in 0..<100 {
        let id = "task-" + String(index + 1000).dropFirst()   // task-000 … task-099
        try await tasks.save(document: MutableDocument(id: id, data: ["title": "Task \(index)", "priority": .int(Int64(index % 5)), "done": false]))
    }
    for index in stride(from: 0, to: 100, by: 3) {
        let id = "task-" + String(index + 1000).dropFirst()
        guard var task = try await tasks.document(id: id)?.toMutable() else { throw PeerSyncError(.notFound, "\(id) vanished") }
        task.setBool(true, forKey: "done")
        try await tasks.save(document: &task)
    }
    for index in 90..<100 {
        let id = "task-0\(index)"
        if let task = try await tasks.document(id: id) { _ = try await tasks.delete(document: task) }
    }
    let writing = ContinuousClock.now - started
    try await waitUntil("the change listener seeing all 100 documents") { seen.withLock { $0.count } == 100 }
    token.remove()
    say("change listener: saw changes of all 100 documents")
    try await database.close()

    // Reopen: the same documents, the same bodies.
    database = try await Database(name: "tasks", config: config)
    guard let reopened = try await database.collection(name: "tasks", scope: "app") else {
        throw PeerSyncError(.notFound, "the collection app.tasks is gone after reopening")
    }
    let documents = try await reopened.allDocuments()
    let done = documents.filter { $0.bool(forKey: "done") }.count
    let urgent = documents.filter { $0.int(forKey: "priority") == 0 }.map(\.id).sorted()
    let digest = documents.map { "\($0.id) \($0.toJSON()) \($0.revisionID ?? "")" }.sorted().joined(separator: "\n")
    try await database.close()
    say("result: \(documents.count) documents, \(done) done, priority 0: \(urgent.count) (first \(urgent.first ?? "-")), "
        + "content hash \(String(UInt64(bitPattern: Int64(stableHash(digest))), radix: 16))")
    say("figures: \(backendName): writes took \(writing), \(diskUsage(database.path)) bytes on disk")
}

/// FNV-1a over the UTF-8 bytes: the same text gives the same value in every process (Swift's
/// `hashValue` is seeded per process).
func stableHash(_ text: String) -> UInt64 {
    text.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
}

/// The storage conformance suite over the toy backend (the multi-process cases do not apply to it).
func conformance() async throws {
    let toy = ToyStorageBackend()
    let capabilities = StorageConformanceSuite.Capabilities(multiProcess: false)
    let suite = StorageConformanceSuite(backend: toy, capabilities: capabilities, removeStore: { toy.removeStore(in: $0) })
    let names = StorageConformanceSuite.caseNames(for: capabilities)
    var failures = 0
    for name in names {
        do {
            try await suite.run(name)
            say("pass  \(name)")
        } catch {
            failures += 1
            say("FAIL  \(name): \(error)")
        }
    }
    guard failures == 0 else { fail("\(failures) of \(names.count) storage conformance cases failed on the toy backend") }
    say("BackendChoice: the toy backend passed all \(names.count) storage conformance cases that apply to it "
        + "(\(StorageConformanceSuite.caseNames.count - names.count) multi-process cases do not)")
}

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch (arguments.first, arguments.count) {
    case ("--conformance", 1):
        try await conformance()
    case ("--backend", 2), ("--backend", 3):
        let folder = try arguments.count == 3 ? arguments[2] : makeTemporaryDirectory(prefix: "peersync-backendchoice")
        defer { if arguments.count == 2 { try? FileManager.default.removeItem(atPath: folder) } }
        try await runApp(backendName: arguments[1], folder: folder)
    default:
        say("usage: example-backendchoice --backend sqlite|lmdb|toy [DIR] | --conformance")
        exit(2)
    }
} catch {
    fail("\(error)")
}
