import Foundation
import PeerSyncAuth
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncLoopback
import PeerSyncMesh
import PeerSyncMeshBluetooth
import PeerSyncReplicator
import PeerSyncStorage
import PeerSyncTransport
import Testing
#if SQLite
import PeerSyncSQLite
#endif

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it: 30 under TSan, 3 under ASan), 1 otherwise.
let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline or timeout that assumes full speed, stretched by ``slowFactor``.
func slow(_ duration: Duration) -> Duration { duration * slowFactor }

/// Whether this run is under a sanitizer (`Tools/test --sanitize` sets `PEERSYNC_SANITIZER`).
let underSanitizer = ProcessInfo.processInfo.environment["PEERSYNC_SANITIZER"] != nil

/// A mesh size for a test: `full` normally, `sanitized` under a sanitizer. A sanitizer run looks
/// for races and memory errors, which every peer of a mesh exercises alike; at TSan's speed a
/// 64-peer mesh would take most of an hour per test, so the large meshes shrink (each size is
/// chosen so the test's claim still holds, e.g. more peers than the degree bound).
func meshSize(_ full: Int, sanitized: Int) -> Int { underSanitizer ? sanitized : full }

/// How many seeds a seeded test runs: the number in the environment variable `variable` (e.g.
/// `PEERSYNC_MESH_SEEDS=1000` once), else `normal`, or `sanitized` under a sanitizer.
func seedCount(_ variable: String, normal: Int, sanitized: Int) -> Int {
    max(1, ProcessInfo.processInfo.environment[variable].flatMap { Int($0) } ?? (underSanitizer ? sanitized : normal))
}

/// Polls `condition` every 50 ms until it holds or `timeout` (stretched by ``slowFactor``)
/// passes; returns whether it held.
func eventually(_ timeout: Duration, _ condition: () async throws -> Bool) async throws -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + slow(timeout)
    while clock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

/// The certificate authority the test peers' identities come from (made once per process).
enum TestCA {
    static let fleet: TLSIdentity = {
        do { return try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Mesh test CA"]) } catch {
            fatalError("cannot create the test CA: \(error)")
        }
    }()
    static let other: TLSIdentity = {
        do { return try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Another CA"]) } catch {
            fatalError("cannot create the second test CA: \(error)")
        }
    }()

    /// A peer identity (client and server usage) issued by `issuer`.
    static func identity(_ name: String, issuer: TLSIdentity = fleet, usages: KeyUsages = [.clientAuth, .serverAuth]) throws -> TLSIdentity {
        try TLSIdentity.createIdentity(for: usages, attributes: [certAttrCommonName: name], issuer: issuer)
    }
}

/// Which storage a test peer uses.
enum TestBackend: Sendable {
    case memory
    case sqlite
}

/// The tunables of test meshes: quick retries and handshakes (stretched by ``slowFactor``).
struct MeshTuning: Sendable {
    var targetDegree = 4
    var maximumDegree = 8
    var retryDelay: Duration = .milliseconds(100)
    var maximumRetryDelay: Duration = .seconds(1)
    var handshakeTimeout: Duration = .seconds(3)
    var transportFallbackFailures = 3
}

/// A mesh peer: its own database, identity, discovery host and links, and its replicator.
final class MeshPeer: Sendable {
    let name: String
    let directory: String
    let database: Database
    let identity: TLSIdentity
    let replicator: MultipeerReplicator
    let discoveries: [any Discovery]

    init(_ name: String, network: InProcessMeshNetwork, group: String = "mesh-test", backend: TestBackend = .memory,
         identity: TLSIdentity? = nil, authenticator: MultipeerCertificateAuthenticator? = nil,
         tuning: MeshTuning = MeshTuning(), collectionSetup: (@Sendable (Collection) -> MultipeerCollectionConfiguration)? = nil,
         wrapLinks: (@Sendable (any MeshLinkTransport) -> any MeshLinkTransport)? = nil,
         wifi: Bool = true, bluetooth: SimulatedBluetoothMeshNetwork? = nil) async throws {
        self.name = name
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshtest-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let storage: any StorageBackend
        switch backend {
        case .memory: storage = MemoryStorageBackend()
        case .sqlite:
            #if SQLite
            storage = SQLiteStorageBackend()
            #else
            storage = MemoryStorageBackend()
            #endif
        }
        database = try await Database(name: name, config: DatabaseConfiguration(
            directory: directory, backend: storage, maxRevTreeDepth: 50, durable: false,
            changePollInterval: .milliseconds(100)))
        self.identity = try identity ?? TestCA.identity(name)
        let collection = try database.defaultCollection()
        var config = try MultipeerReplicatorConfiguration(
            peerGroupID: group, identity: self.identity,
            authenticator: authenticator ?? MultipeerCertificateAuthenticator(rootCerts: [TestCA.fleet.certificate]),
            collections: [collectionSetup?(collection) ?? MultipeerCollectionConfiguration(collection: collection)])
        config.targetDegree = tuning.targetDegree
        config.maximumDegree = tuning.maximumDegree
        config.retryDelay = tuning.retryDelay
        config.maximumRetryDelay = tuning.maximumRetryDelay
        config.handshakeTimeout = slow(tuning.handshakeTimeout)
        config.transportFallbackFailures = tuning.transportFallbackFailures
        // Wi-Fi: the in-process network; Bluetooth: simulated radios and L2CAP channels.
        var networks: [MeshNetwork] = []
        if wifi {
            var mesh = network.network(host: name)
            if let wrapLinks { mesh.links = wrapLinks(mesh.links) }
            networks.append(mesh)
        }
        if let bluetooth { networks.append(try bluetooth.network(host: name)) }
        config.transports = Set(networks.map { $0.links.transport })
        discoveries = networks.map(\.discovery)
        replicator = try MultipeerReplicator(config: config, networks: networks)
    }

    var collection: Collection { get throws { try database.defaultCollection() } }

    /// Saves `data` as document `id` (creating or updating it).
    func save(_ id: String, _ data: [String: JSONValue]) async throws {
        let c = try collection
        var doc = try await c.document(id: id)?.toMutable() ?? MutableDocument(id: id)
        doc.setData(data)
        try await c.save(document: &doc)
    }

    /// Deletes document `id` if it exists.
    func delete(_ id: String) async throws {
        let c = try collection
        if let doc = try await c.document(id: id) { try await c.delete(document: doc) }
    }

    /// Every document's current revision ID and deletion flag (bodies follow from revision IDs).
    func snapshot() async throws -> [String: String] {
        let c = try collection
        var out: [String: String] = [:]
        var since: UInt64 = 0
        while true {
            let batch = try await c.changes(since: since, limit: 1000)
            guard let last = batch.last else { break }
            for entry in batch { out[entry.docID] = "\(entry.revID)\(entry.deleted ? " deleted" : "")" }
            since = last.sequence
        }
        return out
    }

    /// Stops the replicator, closes the database and removes its files.
    func close() async {
        await replicator.stop()
        for discovery in discoveries { await discovery.shutdown() }
        try? await database.close()
        try? FileManager.default.removeItem(atPath: directory)
        MemoryStorageBackend().removeStore(in: directory)
    }
}

/// A set of mesh peers on one test network.
final class TestMesh: Sendable {
    let network: InProcessMeshNetwork
    let peers: [MeshPeer]

    init(_ count: Int, prefix: String = "p", backend: TestBackend = .memory, tuning: MeshTuning = MeshTuning(),
         network: InProcessMeshNetwork? = nil) async throws {
        let network = try network ?? InProcessMeshNetwork()
        self.network = network
        var peers: [MeshPeer] = []
        for i in 0..<count { peers.append(try await MeshPeer("\(prefix)\(i)", network: network, backend: backend, tuning: tuning)) }
        self.peers = peers
    }

    /// A mesh of peers made elsewhere (they are closed by their maker).
    init(wrapping peers: [MeshPeer], network: InProcessMeshNetwork) {
        self.network = network
        self.peers = peers
    }

    func startAll() async throws {
        for peer in peers { try await peer.replicator.start() }
    }

    func close() async {
        await withTaskGroup(of: Void.self) { group in
            for peer in peers { group.addTask { await peer.close() } }
        }
    }

    /// Waits until every peer in `subset` (default all) holds the same documents and revisions
    /// (`count` of them, if given), for as long as replication makes progress, and returns
    /// whether the peers converged. It gives up when no peer's documents changed for
    /// `stallLimit` (stretched by ``slowFactor``) — a stalled replication, which is what these
    /// tests must catch — or after four times `stallLimit` in all (peers that keep changing
    /// without settling, e.g. revision IDs swapping around a cycle of links).
    ///
    /// Why not a fixed deadline: on a loaded machine (the Mesh module beside other heavy work;
    /// Mesh README, "Known issues") every small mesh of this module still converged, but up to
    /// 137 s after the heal where a quiet run takes a few seconds: the process's tasks waited for
    /// the two cores (a handler's return to its connection took up to 30 s). A fixed 60 s
    /// failed those runs without any replication being stuck; this wait fails only when
    /// nothing moves.
    func awaitConvergence(_ subset: [MeshPeer]? = nil, expecting count: Int? = nil, stallLimit: Duration) async throws -> Bool {
        let peers = subset ?? self.peers
        let clock = ContinuousClock()
        let start = clock.now, stall = slow(stallLimit)
        var lastChange = start
        var last: [[String: String]] = []
        while true {
            let began = clock.now
            var snapshots: [[String: String]] = []
            for peer in peers { snapshots.append(try await peer.snapshot()) }
            if let first = snapshots.first, count == nil || first.count == count, snapshots.allSatisfy({ $0 == first }) { return true }
            if snapshots.isEmpty { return true }
            let now = clock.now
            if snapshots != last { last = snapshots; lastChange = now }
            if now - lastChange >= stall || now - start >= stall * 4 { return false }
            // Reading every peer's documents is not free (64 peers × 6,400): poll no more often
            // than that takes.
            try await Task.sleep(for: max(.milliseconds(50), now - began))
        }
    }

    /// ``awaitConvergence(_:expecting:stallLimit:)`` with `timeout` as the stall limit; if the
    /// peers do not converge, records an issue naming `what` and how far apart the peers are.
    /// Returns whether they converged.
    @discardableResult
    func expectConvergence(_ subset: [MeshPeer]? = nil, expecting count: Int? = nil, within timeout: Duration, _ what: String,
                           sourceLocation: SourceLocation = #_sourceLocation) async throws -> Bool {
        if try await awaitConvergence(subset, expecting: count, stallLimit: timeout) { return true }
        Issue.record("\(what) (no change for \(slow(timeout)), or not settled within \(slow(timeout) * 4)):\n\(try await divergence(subset))",
                     sourceLocation: sourceLocation)
        return false
    }

    /// A description of how far apart the peers are, for failure messages: per peer its
    /// document count and links, then the revision trees of the documents that differ.
    func divergence(_ subset: [MeshPeer]? = nil) async throws -> String {
        let peers = subset ?? self.peers
        var lines: [String] = []
        var snapshots: [[String: String]] = []
        for peer in peers {
            let snapshot = try await peer.snapshot()
            snapshots.append(snapshot)
            let links = peer.replicator.peerInfo(for: peer.replicator.peerID)?.neighborPeers.count ?? 0
            lines.append("\(peer.name): \(snapshot.count) docs, \(links) links")
        }
        let ids = Set(snapshots.flatMap(\.keys)).filter { id in Set(snapshots.map { $0[id] }).count > 1 }
        for id in ids.sorted().prefix(5) {
            for peer in peers {
                guard let tree = try await peer.collection.revisions(of: id) else {
                    lines.append("  \(id) @\(peer.name): absent")
                    continue
                }
                let revisions = tree.revisions.map { r in
                    "\(r.revID.description.prefix(10))<\(r.parentRevID?.description.prefix(10) ?? "-")"
                        + "\(r.isDeleted ? "D" : "")\(r.isLeaf ? "L" : "")\(r.isConflict ? "C" : "")\(r.flags.contains(.closed) ? "X" : "")"
                }
                lines.append("  \(id) @\(peer.name): current \(tree.currentRevID.description.prefix(10))\(tree.isDeleted ? " deleted" : "") "
                             + revisions.joined(separator: " "))
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs `body` with a mesh of `count` peers, closing them afterwards (also on failure).
func withMesh(_ count: Int, prefix: String = "p", backend: TestBackend = .memory, tuning: MeshTuning = MeshTuning(),
              _ body: (TestMesh) async throws -> Void) async throws {
    let mesh = try await TestMesh(count, prefix: prefix, backend: backend, tuning: tuning)
    do { try await body(mesh) } catch {
        await mesh.close()
        throw error
    }
    await mesh.close()
}

/// Collects events of one kind.
final class Recorder<Event: Sendable>: Sendable {
    private let events = LockedValue<[Event]>([])
    func append(_ event: Event) { events.withLock { $0.append(event) } }
    var all: [Event] { events.withLock { $0 } }
}

/// A link transport that slows another one down, as a loaded device would: each dial waits
/// `dialDelay` before connecting (and counts itself in `dials`), each accepted link reaches
/// the mesh `acceptDelay` late (the handshake itself is not delayed: the dialling side has its
/// link at once).
final class DelayedLinks: MeshLinkTransport {
    let inner: any MeshLinkTransport
    let dialDelay: Duration
    let acceptDelay: Duration
    let dials: LockedValue<Int>

    init(wrapping inner: any MeshLinkTransport, dialDelay: Duration = .zero, acceptDelay: Duration = .zero,
         dials: LockedValue<Int> = LockedValue(0)) {
        self.inner = inner
        self.dialDelay = dialDelay
        self.acceptDelay = acceptDelay
        self.dials = dials
    }

    var transport: MultipeerTransport { inner.transport }
    func start(_ context: MeshLinkContext) async throws -> MeshListeningAddress { try await inner.start(context) }
    func incomingLinks() -> AsyncStream<any MessageConnection> {
        guard acceptDelay > .zero else { return inner.incomingLinks() }
        let (stream, continuation) = AsyncStream.makeStream(of: (any MessageConnection).self)
        let (inner, delay) = (self.inner, acceptDelay)
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                for await link in inner.incomingLinks() {
                    group.addTask {
                        try? await Task.sleep(for: delay)
                        continuation.yield(link)
                    }
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
    func dial(_ peer: DiscoveredPeer) async throws -> any MessageConnection {
        dials.withLock { $0 += 1 }
        if dialDelay > .zero { try await Task.sleep(for: dialDelay) }
        return try await inner.dial(peer)
    }
    func stop() async { await inner.stop() }
}
