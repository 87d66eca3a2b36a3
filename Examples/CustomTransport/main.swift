// CustomTransport: a transport written outside the library — message connections over
// Unix-domain sockets (UnixSocketTransport.swift) — that passes the transport conformance
// suite and carries a full sync between two processes: a replicator in this process, a passive
// replication session (what a listener runs per connection) in a child process.
//
//   example-customtransport               the sync: spawns `serve` as a child, syncs, checks both
//   example-customtransport --conformance the transport conformance suite over the transport
//   example-customtransport serve DIR     the passive side alone (socket unix://tasks:1 in DIR)
//
// Exit 0 when everything converged (or every conformance case passed); 1 with one clear line
// otherwise. Deadlines are generous (60 s per step, × PEERSYNC_SLOW).

import ExampleSupport
import Foundation
import PeerSync
import PeerSyncBLIP
import PeerSyncTransportTesting

enum Demo {
    /// The endpoint the passive side listens on and the replicator connects to.
    static let endpoint = try! Endpoint(url: "unix://tasks:1")
    /// Documents each side writes before syncing; both hold all of them afterwards.
    static let documentsPerSide = 3
}

/// Opens (creating) the database `name` in `directory` with `Demo.documentsPerSide` documents of its own.
func openDatabase(_ name: String, in directory: String) async throws -> (Database, PeerSync.Collection) {
    let database = try await Database(name: name, config: DatabaseConfiguration(directory: directory))
    let tasks = try database.defaultCollection()
    for index in 1...Demo.documentsPerSide {
        try await tasks.save(document: MutableDocument(id: "\(name)-\(index)", data: ["title": "task \(index) of \(name)"]))
    }
    return (database, tasks)
}

/// The passive side: serves replication connections, one after the other, until it holds the
/// documents of both sides and the connection that brought them has closed.
func serve(directory: String) async throws {
    let (database, tasks) = try await openDatabase("server", in: directory)
    let listener = try await UnixSocketTransport(directory: directory).listen(on: Demo.endpoint)
    say("serve: listening on \(listener.endpoint) (\(UnixSocketTransport(directory: directory).socketPath(for: listener.endpoint)))")
    while try await tasks.count < 2 * Demo.documentsPerSide {
        guard let connection = try await listener.accept() else { break }
        say("serve: accepted a connection from \(connection.remoteAddress ?? "?") (\(connection.kind))")
        var options = PassiveReplicationSession.Options()
        options.onDocumentReplication = { event in
            for document in event.documents { say("serve: \(event.isPush ? "sent" : "stored") \(document.id)") }
        }
        let session = PassiveReplicationSession(connection: try BLIPConnection(connection: connection),
                                                database: database, collections: [tasks], options: options)
        await session.run()  // returns when the replicator closes the connection
        say("serve: the connection closed (\(connection.closeInfo.map { "\($0)" } ?? "open")), \(try await tasks.count) documents")
    }
    await listener.close()
    let ids = try await tasks.documentIDs().sorted()
    try await database.close()
    guard ids.count == 2 * Demo.documentsPerSide else { fail("serve: holds \(ids.count) documents: \(ids)") }
    say("serve: holds \(ids.joined(separator: ", "))")
}

/// The active side: starts `serve` in a child process, replicates once (push and pull) over
/// the Unix socket, and checks that both sides hold every document.
func syncWithChild() async throws {
    // Short: a socket path holds at most 107 bytes.
    let directory = try makeTemporaryDirectory(prefix: "peersync-uds")
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let transport = UnixSocketTransport(directory: directory)

    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.arguments = ["serve", directory]
    try child.run()
    say("sync:  started the passive side, pid \(child.processIdentifier)")
    do {
        try await waitUntil("the child's socket \(transport.socketPath(for: Demo.endpoint))") {
            guard child.isRunning else { throw PeerSyncError(.connectionRefused, "the child exited with \(child.terminationStatus)") }
            return FileManager.default.fileExists(atPath: transport.socketPath(for: Demo.endpoint))
        }
        let (database, tasks) = try await openDatabase("client", in: directory)
        var config = ReplicatorConfiguration(target: Demo.endpoint)
        config.addCollection(tasks)
        let replicator = try Replicator(config: config) { _ in try await transport.connect(to: Demo.endpoint) }
        let token = replicator.addDocumentReplicationListener { event in
            for document in event.documents { say("sync:  \(event.isPush ? "pushed" : "pulled") \(document.id)") }
        }
        replicator.start()
        try await waitUntil("the one-shot replication finishing") { replicator.status.activity == .stopped }
        token.remove()
        if let error = replicator.status.error { throw error }
        let ids = try await tasks.documentIDs().sorted()
        try await database.close()
        guard ids.count == 2 * Demo.documentsPerSide else { throw PeerSyncError(.internalError, "the client holds \(ids.count) documents: \(ids)") }
        say("sync:  holds \(ids.joined(separator: ", "))")

        try await waitUntil("the passive side exiting") { !child.isRunning }
        guard child.terminationStatus == 0 else { throw PeerSyncError(.internalError, "the passive side exited with \(child.terminationStatus)") }
        say("CustomTransport: both processes hold the same \(ids.count) documents (synced over Unix-domain sockets)")
    } catch {
        if child.isRunning { child.terminate() }  // by its PID (SIGTERM)
        throw error
    }
}

/// The transport conformance suite over UnixSocketTransport: every case, one after the other.
func conformance() async throws {
    let directory = try makeTemporaryDirectory(prefix: "peersync-uds")
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let suite = TransportConformanceSuite(
        transport: UnixSocketTransport(directory: directory), listenOn: try Endpoint(url: "unix://conformance:0"),
        drop: { ($0 as? UnixSocketConnection)?.abort() })
    var failures = 0
    for result in await suite.runAll() {
        if let failure = result.failure {
            failures += 1
            say("FAIL  \(result.name): \(failure.message)")
        } else {
            say("pass  \(result.name)")
        }
    }
    guard failures == 0 else { fail("\(failures) of \(TransportConformanceSuite.caseNames.count) conformance cases failed") }
    say("CustomTransport: all \(TransportConformanceSuite.caseNames.count) transport conformance cases passed")
}

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch arguments.first {
    case nil: try await syncWithChild()
    case "--conformance" where arguments.count == 1: try await conformance()
    case "serve" where arguments.count == 2:
        // A watchdog: the passive side never outlives a parent that stopped talking to it.
        let limit = Duration.seconds(120) * slowFactor
        Task.detached {
            try await Task.sleep(for: limit)
            fail("serve: nothing completed the sync within \(limit)")
        }
        try await serve(directory: arguments[1])
    default:
        say("usage: example-customtransport [--conformance | serve DIR]")
        exit(2)
    }
} catch {
    fail("\(error)")
}
