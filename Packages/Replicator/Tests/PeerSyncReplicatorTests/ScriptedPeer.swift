import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization

/// A passive stand-in speaking raw BLIP over loopback, for behaviour real listeners never
/// show (e.g. revocations, which only Sync Gateway sends). It answers `getCollections` (the
/// default collection, no checkpoint), `getCheckpoint` (404), `setCheckpoint`,
/// `proposeChanges` (every entry 304, the doc IDs recorded) and, on `subChanges`, runs
/// `script` with the connection (after replying).
final class ScriptedPeer: Sendable {
    let endpoint: Endpoint
    let network: LoopbackNetwork
    final class Record: Sendable {
        /// Doc IDs the client proposed.
        let proposed = Mutex<[String]>([])
        /// Errors thrown by the script (a test expects none).
        let scriptErrors = Mutex<[String]>([])
    }
    let record = Record()
    var proposed: [String] { record.proposed.withLock { $0 } }
    var scriptErrors: [String] { record.scriptErrors.withLock { $0 } }
    private let listener: LoopbackListener
    private let acceptTask = Mutex<Task<Void, Never>?>(nil)

    /// `handlers` runs on each connection after the default handlers are registered (to
    /// replace some of them).
    init(network: LoopbackNetwork, script: @escaping @Sendable (BLIPConnection) async throws -> Void,
         handlers: (@Sendable (BLIPConnection) async -> Void)? = nil) throws {
        self.network = network
        endpoint = try Endpoint(url: "loopback://scripted-\(UUID().uuidString.prefix(8))/db")
        let l = try LoopbackTransport(network: network, host: endpoint.host).listenLoopback(on: endpoint.with(port: nil))
        listener = l
        let task = Task { [record] in
            await withTaskGroup(of: Void.self) { group in
                while let conn = try? await l.accept() {
                    guard let blip = try? BLIPConnection(connection: conn) else { continue }
                    await Self.register(blip, record: record, script: script)
                    await handlers?(blip)
                    group.addTask {
                        await blip.start()
                        _ = await blip.waitUntilClosed()
                    }
                }
                group.cancelAll()
            }
        }
        acceptTask.withLock { $0 = task }
    }

    private static func register(_ blip: BLIPConnection, record: Record,
                                 script: @escaping @Sendable (BLIPConnection) async throws -> Void) async {
        await blip.setHandler(profile: "getCollections") { _ in
            BLIPMessage(type: .response, body: Array("[{}]".utf8))
        }
        await blip.setHandler(profile: "getCheckpoint") { _ in
            BLIPMessage.error(domain: "HTTP", code: 404, message: "no checkpoint")
        }
        await blip.setHandler(profile: "setCheckpoint") { _ in
            BLIPMessage(type: .response, properties: [("rev", "1-cp")])
        }
        await blip.setHandler(profile: "proposeChanges") { request in
            let entries = (try? JSONValue(parsing: request.body))?.arrayValue ?? []
            record.proposed.withLock { $0 += entries.compactMap { $0.arrayValue?.first?.stringValue } }
            return BLIPMessage(type: .response, body: JSONValue.array(entries.map { _ in .int(304) }).canonicalData)
        }
        await blip.setHandler(profile: "subChanges") { _ in
            Task {
                do { try await script(blip) } catch { record.scriptErrors.withLock { $0.append("\(error)") } }
            }
            return nil
        }
    }

    /// A connector to this peer.
    func connector() -> ReplicatorConnector {
        let network = self.network, endpoint = self.endpoint
        return { _ in try await LoopbackTransport(network: network, host: "client").connect(to: endpoint, options: LoopbackConnectOptions()) }
    }

    /// Runs a one-shot pull of `collection` from this peer (one attempt), recording document
    /// events in `log`; `configure` adjusts the configuration first. Returns the final status.
    func pull(into collection: PeerSyncDatabase.Collection, log: EventLog,
              configure: (inout ReplicatorConfiguration) -> Void = { _ in }) async throws -> ReplicatorStatus {
        var cfg = ReplicatorConfiguration(target: endpoint)
        cfg.replicatorType = .pull
        cfg.replyTimeout = slow(.seconds(10))
        cfg.maxAttempts = 1
        cfg.addCollection(collection)
        configure(&cfg)
        let replicator = try Replicator(config: cfg, connector: connector())
        replicator.addDocumentReplicationListener { e in log.events.withLock { $0.append(e) } }
        replicator.start()
        await replicator.waitUntilStopped()
        return replicator.status
    }

    func close() async {
        await listener.close()
        if let t = acceptTask.withLock({ $0 }) { await t.value }
    }
}

/// A rev ID of generation `gen` with a digest made from `seed`.
func fakeRev(_ gen: Int, _ seed: String) -> String {
    "\(gen)-" + SHA1.hash(Array(seed.utf8)).map { String(format: "%02x", $0) }.joined()
}
