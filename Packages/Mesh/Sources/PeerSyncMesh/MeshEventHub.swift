import Foundation
import PeerSyncCore

/// The listeners and streams of one ``MultipeerReplicator``'s four kinds of events.
///
/// Events are handed to listeners on one serial queue (``SerialDelivery``), in the order they were
/// emitted; ``emit(_:to:)`` takes only this hub's lock (a leaf: callers may hold theirs) and
/// never calls a listener itself.
final class MeshEventHub: Sendable {
    struct Tables {
        var status: [UInt64: @Sendable (MultipeerReplicatorStatus) -> Void] = [:]
        var discovery: [UInt64: @Sendable (PeerDiscoveryStatus) -> Void] = [:]
        var replicator: [UInt64: @Sendable (PeerReplicatorStatus) -> Void] = [:]
        var documents: [UInt64: @Sendable (PeerDocumentReplication) -> Void] = [:]
        var nextID: UInt64 = 1
    }

    private let tables = LockedValue(Tables())
    /// Listener calls, in order, one at a time (a burst of events costs one thread wake-up).
    /// The run's link replicators call their listeners (the run's bookkeeping) on it too: the
    /// events those emit are appended to the drain already running, without a wake-up.
    let queue = SerialDelivery(label: "peersync.mesh.listeners")

    /// Registers `listener` in `table`; the token removes it.
    func add<Event: Sendable>(_ listener: @escaping @Sendable (Event) -> Void,
                              to table: WritableKeyPath<Tables, [UInt64: @Sendable (Event) -> Void]> & Sendable) -> MultipeerListenerToken {
        let id = tables.withLock { t in
            let id = t.nextID
            t.nextID += 1
            t[keyPath: table][id] = listener
            return id
        }
        return MultipeerListenerToken { [weak self] in _ = self?.tables.withLock { $0[keyPath: table].removeValue(forKey: id) } }
    }

    /// Queues `event` for every listener of `table`.
    func emit<Event: Sendable>(_ event: Event, to table: KeyPath<Tables, [UInt64: @Sendable (Event) -> Void]> & Sendable) {
        tables.withLock { t in
            let listeners = Array(t[keyPath: table].values)
            guard !listeners.isEmpty else { return }
            // Enqueued under the lock: the queue sees events in the order they were emitted.
            queue.async { for listener in listeners { listener(event) } }
        }
    }

    /// Whether anyone listens to `table` (lets callers skip building events nobody reads).
    func hasListeners<Event>(_ table: KeyPath<Tables, [UInt64: @Sendable (Event) -> Void]> & Sendable) -> Bool {
        tables.withLock { !$0[keyPath: table].isEmpty }
    }

    /// A stream of the events of `table` from now on, first `replay` (if any); it ends when
    /// the consumer stops iterating. Unbounded buffer: a consumer that never reads keeps events.
    func stream<Event: Sendable>(of table: WritableKeyPath<Tables, [UInt64: @Sendable (Event) -> Void]> & Sendable,
                                 replay: [Event] = []) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        for event in replay { continuation.yield(event) }
        let token = add({ continuation.yield($0) }, to: table)
        continuation.onTermination = { _ in token.remove() }
        return stream
    }
}
