import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncStorage
import PeerSyncTransport
import Synchronization

// The replicator's test harness: in-process peers on a loopback network and one-shot syncs
// between them. Shared by the replicator's unit tests (PeerSyncReplicatorTests) and the
// multi-peer convergence runs (Tests/PeerSyncConvergenceTests). Test code only, in no product.

/// A peer: a database in a temporary directory, optionally serving passive sessions on a
/// loopback listener.
public final class Peer: Sendable {
    /// The database name (`p0`, `p1`, … from ``withPeers(_:_:)``).
    public let name: String
    /// The temporary directory of the database, removed by ``close()``.
    public let directory: String
    /// The database: in memory, not durable, revision trees kept to depth 50.
    public let db: Database
    /// The loopback network all peers of one ``withPeers(_:_:)`` share.
    public let network: LoopbackNetwork
    /// Where ``listen(collections:options:)`` serves: `loopback://<name>-<random>/db`.
    public let endpoint: Endpoint
    private let listener: Mutex<LoopbackListener?> = Mutex(nil)
    private let acceptTask: Mutex<Task<Void, Never>?> = Mutex(nil)
    /// The passive sessions served so far.
    public let sessions = Mutex<[PassiveReplicationSession]>([])
    /// The BLIP connections of the passive sessions (for their stream statistics).
    public let blips = Mutex<[BLIPConnection]>([])

    /// A peer named `name` on `network`, with a fresh database.
    public init(_ name: String, network: LoopbackNetwork) async throws {
        self.name = name
        self.network = network
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("peersync-repltest-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        db = try await Database(name: name, config: DatabaseConfiguration(
            directory: directory, backend: MemoryStorageBackend(), maxRevTreeDepth: 50, maxBodySize: 80 << 20,
            durable: false, changePollInterval: .milliseconds(20)))
        endpoint = try Endpoint(url: "loopback://\(name)-\(UUID().uuidString.prefix(8))/db")
    }

    /// The database's default collection.
    public var defaultCollection: PeerSyncDatabase.Collection { get throws { try db.defaultCollection() } }

    /// Starts serving passive sessions for `collections` (default: the default collection).
    public func listen(collections: [PeerSyncDatabase.Collection]? = nil, options: PassiveReplicationSession.Options = .init()) throws {
        let l = try LoopbackTransport(network: network, host: endpoint.host).listenLoopback(on: endpoint.with(port: nil))
        listener.withLock { $0 = l }
        let cols = try collections ?? [db.defaultCollection()]
        let db = self.db
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                while let conn = try? await l.accept() {
                    guard let blip = try? BLIPConnection(connection: conn) else { continue }
                    self.blips.withLock { $0.append(blip) }
                    let session = PassiveReplicationSession(connection: blip, database: db, collections: cols, options: options)
                    self.sessions.withLock { $0.append(session) }
                    group.addTask { await session.run() }
                }
                for s in self.sessions.withLock({ $0 }) { await s.stop() }
            }
        }
        acceptTask.withLock { $0 = task }
    }

    /// A connector to this peer's listener from host `from`.
    public func connector(from: String = "client-\(UUID().uuidString.prefix(6))", conditions: LinkConditions? = nil) -> ReplicatorConnector {
        let network = self.network
        let endpoint = self.endpoint
        return { _ in
            let transport = LoopbackTransport(network: network, host: from)
            return try await transport.connect(to: endpoint, options: LoopbackConnectOptions(conditions: conditions))
        }
    }

    /// A raw BLIP client of this peer's listener (a Couchbase Lite stand-in; legacy mode unless
    /// its first message is `getCollections`). Not started: register handlers, then `start()`.
    public func rawClient() async throws -> BLIPConnection {
        let conn = try await LoopbackTransport(network: network, host: "raw-\(UUID().uuidString.prefix(6))")
            .connect(to: endpoint, options: LoopbackConnectOptions())
        return try BLIPConnection(connection: conn)
    }

    /// Stops serving, closes the database and removes its directory.
    public func close() async {
        let l = listener.withLock { $0 }
        await l?.close()
        if let t = acceptTask.withLock({ $0 }) { await t.value }
        try? await db.close()
        try? FileManager.default.removeItem(atPath: directory)
        MemoryStorageBackend().removeStore(in: directory)
    }
}

/// Runs `body` with `count` peers, closing them afterwards.
public func withPeers(_ count: Int, _ body: ([Peer]) async throws -> Void) async throws {
    let network = LoopbackNetwork()
    var peers: [Peer] = []
    for i in 0..<count { peers.append(try await Peer("p\(i)", network: network)) }
    do { try await body(peers) } catch {
        for p in peers { await p.close() }
        throw error
    }
    for p in peers { await p.close() }
}

/// Runs a one-shot replicator from `active` to `passive` (which must be listening) and
/// waits for it to stop; returns its final status.
@discardableResult
public func replicate(_ active: Peer, to passive: Peer, type: ReplicatorType = .pushAndPull,
                      collections: [PeerSyncDatabase.Collection]? = nil, config: CollectionConfiguration = .init(),
                      reset: Bool = false, events: EventLog? = nil,
                      conditions: LinkConditions? = nil, maxAttempts: Int = 0,
                      replyTimeout: Duration = .seconds(10)) async throws -> ReplicatorStatus {
    var cfg = ReplicatorConfiguration(target: passive.endpoint)
    cfg.replicatorType = type
    cfg.maxAttempts = maxAttempts
    cfg.maxAttemptWaitTime = .milliseconds(100)
    cfg.replyTimeout = slow(replyTimeout)
    cfg.addCollections(try collections ?? [active.defaultCollection], config: config)
    let replicator = try Replicator(config: cfg, connector: passive.connector(conditions: conditions))
    if let events { replicator.addDocumentReplicationListener { e in events.events.withLock { $0.append(e) } } }
    replicator.start(reset: reset)
    await replicator.waitUntilStopped()
    return replicator.status
}

/// Saves `data` as the whole body of document `id` (created or updated); returns the saved
/// document.
@discardableResult
public func save(_ c: PeerSyncDatabase.Collection, _ id: String, _ data: [String: JSONValue]) async throws -> MutableDocument {
    var doc = try await c.document(id: id)?.toMutable() ?? MutableDocument(id: id)
    doc.setData(data)
    try await c.save(document: &doc)
    return doc
}

/// Current revision, deletion flag and body of every document (including deleted ones).
public func snapshot(_ c: PeerSyncDatabase.Collection) async throws -> [String: String] {
    var out: [String: String] = [:]
    var since: UInt64 = 0
    while true {
        let batch = try await c.changes(since: since, limit: 500)
        guard let last = batch.last else { break }
        for e in batch {
            let body = try await c.revisionBody(docID: e.docID, revID: e.revID) ?? [:]
            out[e.docID] = "\(e.revID) \(e.deleted) \(JSONValue.object(body).canonicalString)"
        }
        since = last.sequence
    }
    return out
}

/// The seeds of a seeded convergence test: `PEERSYNC_CONVERGENCE_SEEDS=N` runs N, else `count`.
public func convergenceSeeds(default count: Int) -> Range<Int> {
    0..<(ProcessInfo.processInfo.environment["PEERSYNC_CONVERGENCE_SEEDS"].flatMap { Int($0) }.map { max(1, $0) } ?? count)
}

/// Two different indices below `count` (at least 2), drawn from `rng`.
public func randomPair(_ count: Int, using rng: inout SplitMix64) -> (Int, Int) {
    let i = Int.random(in: 0..<count, using: &rng)
    var j = Int.random(in: 0..<count - 1, using: &rng)
    if j >= i { j += 1 }
    return (i, j)
}

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it: 30 under TSan, 3 under ASan), 1 otherwise.
public let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline or timeout that assumes full speed, stretched by ``slowFactor``.
public func slow(_ duration: Duration) -> Duration { duration * slowFactor }

/// Polls `condition` every 20 ms until it holds or `timeout` passes, then returns whether it
/// holds (continuous replication, live queries). `timeout` is what it takes at full speed
/// (generous: 20 s by default); it is stretched by ``slowFactor``.
public func eventually(_ timeout: Duration = .seconds(20), _ condition: () async throws -> Bool) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + slow(timeout)
    while clock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// Collects document replication events.
public final class EventLog: Sendable {
    /// The events, in the order they were reported.
    public let events = Mutex<[DocumentReplication]>([])
    /// An empty log.
    public init() {}
    /// The documents of every event.
    public var documents: [ReplicatedDocument] { events.withLock { $0.flatMap(\.documents) } }
}
