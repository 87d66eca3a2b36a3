import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncPosix
import PeerSyncReplicator
import PeerSyncStorage
import PeerSyncTransport
import PeerSyncTransportTesting
import PeerSyncWebSocket
import PeerSyncWebSocketReplication
import Synchronization
import Testing
#if SQLite
import PeerSyncSQLite
#endif

/// A temporary directory removed when `body` returns or throws.
func withTempDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let dir = FileManager.default.temporaryDirectory
        .appendingPathComponent("peersync-listener-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    return try await body(dir)
}

func storageBackend() -> any StorageBackend {
    #if SQLite
    return SQLiteStorageBackend()
    #else
    return MemoryStorageBackend()
    #endif
}

func openDatabase(_ dir: String, _ name: String) async throws -> Database {
    try await Database(name: name, config: DatabaseConfiguration(directory: dir, backend: storageBackend()))
}

/// Saves `count` documents `<prefix>-<i>` with `{"n": i, "from": prefix}`.
func addDocuments(_ collection: PeerSyncDatabase.Collection, prefix: String, count: Int) async throws {
    for i in 0..<count {
        var doc = MutableDocument(id: "\(prefix)-\(i)", data: ["n": .int(Int64(i)), "from": .string(prefix)])
        try await collection.save(document: &doc)
    }
}

/// Polls `condition` until it holds or `timeout` passes — stretched by `PEERSYNC_SLOW` under a
/// sanitizer (`TestTiming.slow`) — and returns whether it held.
func eventually(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + TestTiming.slow(timeout)
    while clock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return try await condition()
}

/// A started TLS listener with password auth on the default collection of a new database;
/// `rest` turns on its REST API.
func makeListener(_ dir: String, name: String = "server", readOnly: Bool = false, password: Bool = true,
                  disableTLS: Bool = false, port: Int = 0, rest: Bool = false) async throws -> (Database, URLEndpointListener) {
    let db = try await openDatabase(dir, name)
    var config = URLEndpointListenerConfiguration(collections: [try db.defaultCollection()])
    config.enableREST = rest
    config.readOnly = readOnly
    config.disableTLS = disableTLS
    config.port = port
    config.networkInterface = "127.0.0.1"
    if password { config.authenticator = ListenerPasswordAuthenticator.matching(username: "alice", password: "secret") }
    let listener = try URLEndpointListener(config: config)
    try await listener.start()
    return (db, listener)
}

/// A replicator configuration to `listener` on 127.0.0.1, trusting its certificate by pin.
func replicatorConfig(_ db: Database, _ listener: URLEndpointListener, type: ReplicatorType = .pushAndPull,
                      continuous: Bool = false, password: String? = "secret", port: Int? = nil) throws -> ReplicatorConfiguration {
    let scheme = listener.config.disableTLS ? "ws" : "wss"
    let p = try #require(port ?? listener.port)
    var config = ReplicatorConfiguration(target: try Endpoint(url: "\(scheme)://127.0.0.1:\(p)/\(listener.config.databaseName ?? "server")"))
    config.addCollection(try db.defaultCollection())
    config.replicatorType = type
    config.continuous = continuous
    if let password { config.authenticator = BasicAuthenticator(username: "alice", password: password) }
    if let identity = listener.tlsIdentity { config.pinnedServerCertificate = identity.certificate }
    return config
}

/// Counts connection attempts of a connector.
final class CountingConnector: Sendable {
    let attempts = Atomic<Int>(0)
    let base: WebSocketReplicatorConnector
    init(_ base: WebSocketReplicatorConnector = WebSocketReplicatorConnector()) { self.base = base }
    var connector: ReplicatorConnector {
        { config in
            self.attempts.add(1, ordering: .relaxed)
            return try await self.base.connect(config)
        }
    }
    var count: Int { attempts.load(ordering: .relaxed) }
}

/// Runs a one-shot replicator to completion (bounded by `timeout`) and returns its final status.
func runToCompletion(_ replicator: Replicator, timeout: Duration = .seconds(60)) async throws -> ReplicatorStatus {
    replicator.start()
    let stopped = await eventually(timeout: timeout) { replicator.status.activity == .stopped }
    if !stopped { replicator.stop() }
    await replicator.waitUntilStopped()
    try #require(stopped, "the replicator did not stop within \(timeout)")
    return replicator.status
}

/// Document IDs and bodies of a collection, for convergence checks.
func snapshot(_ collection: PeerSyncDatabase.Collection) async throws -> [String: [String: JSONValue]] {
    var out: [String: [String: JSONValue]] = [:]
    for doc in try await collection.allDocuments() { out[doc.id] = doc.properties }
    return out
}

/// One plain HTTP/1.1 request over TCP to 127.0.0.1 (the connection is closed after it).
func httpRequest(port: Int, _ method: String, _ target: String, body: String? = nil,
                 headers: [(String, String)] = []) async throws -> HTTPResponse {
    var fields: [(String, String)] = [("Host", "127.0.0.1:\(port)"), ("Connection", "close")]
    fields += headers
    let bytes = body.map { Array($0.utf8) } ?? []
    if body != nil { fields += [("Content-Type", "application/json"), ("Content-Length", String(bytes.count))] }
    let request = HTTPRequest(method: method, target: target, headers: HTTPHeaders(fields), body: bytes)
    return try await httpExchange(port: port, request.serialized())
}

/// Sends raw HTTP/1.1 bytes to 127.0.0.1:`port` and reads one answer (the connection is closed after it).
func httpExchange(port: Int, _ request: [UInt8]) async throws -> HTTPResponse {
    let tcp = try await TCPStream.connect(host: "127.0.0.1", port: port, timeout: .seconds(10))
    try await tcp.write(request)
    var parser = HTTPResponseParser()
    while true {
        if let response = try parser.next() {
            await tcp.close()
            return response
        }
        guard let chunk = try await tcp.read(maxBytes: 65536) else {
            await tcp.close()
            if let response = try parser.finish() { return response }
            throw PeerSyncError(.closed, "the server closed the connection without an answer")
        }
        parser.feed(chunk)
    }
}

extension HTTPResponse {
    var json: [String: JSONValue]? { (try? JSONValue(parsing: body))?.objectValue }
}

func basic(_ user: String, _ password: String) -> (String, String) {
    ("Authorization", BasicAuthorization.headerValue(username: user, password: password))
}
