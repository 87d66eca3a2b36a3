import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
@testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization

/// One active session over a fresh connection to a ``ScriptedPeer``, for driving its workers
/// one at a time — no `Replicator`, no `ActiveReplication`, no opening exchange: `collection`
/// is at protocol index 0 (collection-aware), document events go to `log`.
struct ActiveWorkers {
    let session: ActiveSession
    let log: EventLog
    var context: SessionContext { session.context }

    static func connect(to peer: ScriptedPeer, collection: PeerSyncDatabase.Collection, push: Bool, pull: Bool,
                        config: CollectionConfiguration = .init()) async throws -> ActiveWorkers {
        let connection = try await peer.connector()(ReplicatorConfiguration(target: peer.endpoint))
        let log = EventLog()
        let events = SessionEvents(documents: { e in log.events.withLock { $0.append(e) } })
        let session = ActiveSession(blip: try BLIPConnection(connection: connection), database: collection.database,
                                    collections: [SessionCollection(collection: collection, config: config)],
                                    push: push, pull: pull, replyTimeout: slow(.seconds(10)), events: events)
        await session.start()
        return ActiveWorkers(session: session, log: log)
    }

    func pusher() throws -> Pusher {
        guard let pusher = session.pushers[0] else { throw PeerSyncError(.invalidArgument, "the session does not push") }
        return pusher
    }

    func puller() throws -> Puller {
        guard let puller = session.pullers[0] else { throw PeerSyncError(.invalidArgument, "the session does not pull") }
        return puller
    }
}

/// Serves passive session contexts on a loopback listener with only the handlers `register`
/// sets (one worker's), for a raw BLIP client to talk to.
final class PassiveWorkerHost: Sendable {
    let endpoint: Endpoint
    let network: LoopbackNetwork
    private let listener: LoopbackListener
    private let acceptTask = Mutex<Task<Void, Never>?>(nil)

    init(network: LoopbackNetwork, database: Database, collections: [PeerSyncDatabase.Collection],
         register: @escaping @Sendable (SessionContext, BLIPConnection) async -> Void) throws {
        self.network = network
        endpoint = try Endpoint(url: "loopback://worker-\(UUID().uuidString.prefix(8))/db")
        let l = try LoopbackTransport(network: network, host: endpoint.host).listenLoopback(on: endpoint.with(port: nil))
        listener = l
        let served = collections.map { SessionCollection(collection: $0, config: CollectionConfiguration()) }
        let task = Task {
            await withTaskGroup(of: Void.self) { group in
                while let conn = try? await l.accept() {
                    guard let blip = try? BLIPConnection(connection: conn) else { continue }
                    let context = SessionContext(blip: blip, database: database, table: .awaitingFirstMessage(served: served),
                                                 replyTimeout: slow(.seconds(10)))
                    await register(context, blip)
                    group.addTask {
                        await blip.start()
                        _ = await blip.waitUntilClosed()
                        await context.stop()
                    }
                }
                group.cancelAll()
            }
        }
        acceptTask.withLock { $0 = task }
    }

    /// A started raw BLIP client of this host.
    func client() async throws -> BLIPConnection {
        let conn = try await LoopbackTransport(network: network, host: "raw-\(UUID().uuidString.prefix(6))")
            .connect(to: endpoint, options: LoopbackConnectOptions())
        let blip = try BLIPConnection(connection: conn)
        await blip.start()
        return blip
    }

    func close() async {
        await listener.close()
        if let t = acceptTask.withLock({ $0 }) { await t.value }
    }
}

/// What a scripted peer received, in order.
final class Received: Sendable {
    let messages = Mutex<[BLIPMessage]>([])
    func append(_ m: BLIPMessage) { messages.withLock { $0.append(m) } }
    var all: [BLIPMessage] { messages.withLock { $0 } }
}

/// The body of a `changes`/`proposeChanges` request as JSON.
func entries(_ message: BLIPMessage) throws -> [JSONValue] {
    try JSONValue(parsing: message.body).arrayValue ?? []
}
