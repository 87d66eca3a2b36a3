import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncStorage
import Synchronization
import Testing

/// A replicator stopped (or cut off) while a pulled revision is being stored: the revision's
/// document event still reaches the listeners, before `.stopped`, also when nobody holds the
/// replicator any more — the mesh drops a link's replicator as soon as it reports `.stopped`,
/// which is how a document came to be stored with no event after a link cut (Mesh README,
/// "Known issues", 2026-12-02).
@Suite struct StoppedWhileStoringTests {
    @Test
    func aRevisionBeingStoredWhenTheReplicatorStopsIsReportedBeforeStopped() async throws {
        let network = LoopbackNetwork()
        let server = try await Peer("server", network: network)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-held-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let backend = WriteGatedBackend(inner: MemoryStorageBackend())
        let client = try await Database(name: "client", config: DatabaseConfiguration(directory: directory, backend: backend, durable: false))
        defer {
            try? FileManager.default.removeItem(atPath: directory)
            MemoryStorageBackend().removeStore(in: directory)
        }
        try server.listen()
        try await save(server.defaultCollection, "held", ["v": 1])
        let gate = backend.arm("held")

        var cfg = ReplicatorConfiguration(target: server.endpoint)
        cfg.replicatorType = .pull
        cfg.continuous = true
        cfg.addCollections([try client.defaultCollection()])
        let log = Mutex<[String]>([])
        var replicator: Replicator? = try Replicator(config: cfg, connector: server.connector())
        let tokens = [
            replicator!.addDocumentReplicationListener { event in
                log.withLock { $0 += event.documents.map { "document \($0.id)" + ($0.error == nil ? "" : " failed") } }
            },
            replicator!.addChangeListener { change in
                if change.status.activity == .stopped { log.withLock { $0.append("stopped") } }
            },
        ]
        replicator!.start()
        let reached = await gate.waitUntilReached()
        #expect(reached, "the pulled revision never reached the storage")
        replicator!.stop()
        // While the revision is being stored the replicator must not say it stopped. (A wait
        // that can only let a broken build pass, never fail a correct one.)
        try await Task.sleep(for: .milliseconds(300))
        #expect(!log.withLock { $0 }.contains("stopped"), "stopped while a revision was being stored")
        // Nobody holds the replicator now (the listener tokens hold it weakly).
        replicator = nil
        gate.open()
        #expect(try await eventually(.seconds(30)) { log.withLock { $0 }.contains("stopped") })
        #expect(log.withLock { $0 } == ["document held", "stopped"])
        #expect(try await client.defaultCollection().document(id: "held") != nil)
        withExtendedLifetime(tokens) {}
        try await client.close()
        await server.close()
    }
}

/// A memory backend whose write transactions stop, once per armed key, before putting a record
/// with that key (in any keyspace), until the test opens the gate: holds a revision "being
/// stored" for as long as a test likes, with no timing involved. A key armed with an error
/// instead makes that put throw it once (the transaction then rolls back).
final class WriteGatedBackend: StorageBackend {
    let inner: any StorageBackend
    private let armed = Mutex<[String: WriteGate]>([:])
    private let failures = Mutex<[String: PeerSyncError]>([:])

    init(inner: any StorageBackend) { self.inner = inner }

    /// The next put of `key` stops at the returned gate.
    func arm(_ key: String) -> WriteGate {
        let gate = WriteGate()
        armed.withLock { $0[key] = gate }
        return gate
    }

    /// The next put of `key` throws `error`.
    func armFailure(_ key: String, _ error: PeerSyncError) {
        failures.withLock { $0[key] = error }
    }

    fileprivate func take(_ key: String) -> WriteGate? { armed.withLock { $0.removeValue(forKey: key) } }
    fileprivate func takeFailure(_ key: String) -> PeerSyncError? { failures.withLock { $0.removeValue(forKey: key) } }

    var name: String { inner.name }
    func open(directory: String, options: StorageOptions) throws -> any Storage {
        WriteGatedStorage(inner: try inner.open(directory: directory, options: options), backend: self)
    }
    func hasStore(in directory: String) -> Bool { inner.hasStore(in: directory) }
}

/// A one-shot gate on the storage's writer thread (see ``WriteGatedBackend``).
final class WriteGate: Sendable {
    private let reached = Mutex(false)
    private let opened = DispatchSemaphore(value: 0)

    /// On the storage thread: announce, then wait for ``open()`` (120 s deadlock guard).
    fileprivate func stopHere() {
        reached.withLock { $0 = true }
        _ = opened.wait(timeout: .now() + 120)
    }

    /// Waits (polling; 60 s guard) until a write reached the gate; whether one did.
    func waitUntilReached() async -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while !reached.withLock({ $0 }) && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(2)) }
        return reached.withLock { $0 }
    }

    func open() { opened.signal() }
}

private final class WriteGatedStorage: Storage {
    let inner: any Storage
    let backend: WriteGatedBackend

    init(inner: any Storage, backend: WriteGatedBackend) {
        self.inner = inner
        self.backend = backend
    }

    var backendName: String { inner.backendName }
    var directory: String { inner.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R { try inner.read(body) }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R {
        try inner.write { writer in try body(WriteGatedWriter(inner: writer, backend: backend)) }
    }
    func close() throws { try inner.close() }
}

private struct WriteGatedWriter: StorageWriter {
    let inner: any StorageWriter
    let backend: WriteGatedBackend

    func keyspaces() throws -> [String] { try inner.keyspaces() }
    func get(_ key: String, in keyspace: String) throws -> Record? { try inner.get(key, in: keyspace) }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int { try inner.count(in: keyspace, includeDeleted: includeDeleted) }
    func lastSequence(in keyspace: String) throws -> UInt64 { try inner.lastSequence(in: keyspace) }
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        backend.take(record.key)?.stopHere()
        if let error = backend.takeFailure(record.key) { throw error }
        return try inner.put(record, in: keyspace)
    }
    func delete(_ key: String, in keyspace: String) throws -> UInt64? { try inner.delete(key, in: keyspace) }
    func purge(_ key: String, in keyspace: String) throws -> Bool { try inner.purge(key, in: keyspace) }
    func dropKeyspace(_ keyspace: String) throws { try inner.dropKeyspace(keyspace) }
}
