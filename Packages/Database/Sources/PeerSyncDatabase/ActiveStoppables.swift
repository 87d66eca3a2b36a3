import PeerSyncCore

/// Something that uses an open database and must be stopped before the database closes — a
/// replicator or a listener (Couchbase Lite's `CBLStoppable`). Created by
/// ``Database/addActiveStoppable(_:stop:)``; its owner calls ``remove()`` once it no longer
/// uses the database.
///
/// Thread-safe; ``remove()`` is idempotent.
@_spi(Replication)
public final class ActiveStoppable: Sendable, CustomStringConvertible {
    /// What it is, for logs (e.g. "replicator to wss://host/db").
    public let description: String
    let stop: @Sendable () async -> Void
    private let onRemove: @Sendable (ActiveStoppable) -> Void

    init(description: String, stop: @escaping @Sendable () async -> Void, onRemove: @escaping @Sendable (ActiveStoppable) -> Void) {
        self.description = description
        self.stop = stop
        self.onRemove = onRemove
    }

    /// Unregisters it: ``Database/close()`` will no longer stop it.
    public func remove() { onRemove(self) }
}

extension Database {
    /// Registers a user of this database that ``close()`` must stop first, as Couchbase Lite
    /// does with its replicators and listeners: `close()` calls every registered `stop` (all at
    /// once) and waits for them to return before closing the storage.
    ///
    /// Contract for `stop`: it is called from a task of `close()`, possibly more than once (on
    /// concurrent closes) and possibly after the user stopped on its own; it must return only
    /// once the user no longer touches the database, and must not itself call `close()`. The
    /// owner calls ``ActiveStoppable/remove()`` when it stops, whoever stopped it.
    ///
    /// Lock order: the registry's lock is taken inside whatever lock the caller holds and never
    /// held while calling `stop`, so callers may register while holding their own lock.
    ///
    /// Throws `.closed` once ``close()`` has begun: a user cannot start on a closed (or
    /// closing) database.
    @_spi(Replication)
    public func addActiveStoppable(_ description: String,
                                   stop: @escaping @Sendable () async -> Void) throws(PeerSyncError) -> ActiveStoppable {
        let stoppable = ActiveStoppable(description: description, stop: stop) { [weak self] stoppable in
            self?.state.withLock { _ = $0.stoppables.removeValue(forKey: ObjectIdentifier(stoppable)) }
        }
        let added = state.withLock { s -> Bool in
            guard !s.closing else { return false }
            s.stoppables[ObjectIdentifier(stoppable)] = stoppable
            return true
        }
        guard added else {
            throw PeerSyncError(.closed, "the database is closed; cannot start the \(description)", context: ["database": name])
        }
        return stoppable
    }

    /// Marks the database closing (no new stoppables) and stops every registered one, waiting
    /// for all of them.
    func stopActiveStoppables() async {
        let stoppables = state.withLock { s -> [ActiveStoppable] in
            s.closing = true
            return Array(s.stoppables.values)
        }
        guard !stoppables.isEmpty else { return }
        Database.log.info("database \(name): stopping \(stoppables.count) user(s) before closing: "
                          + stoppables.map(\.description).joined(separator: ", "))
        await withTaskGroup(of: Void.self) { group in
            for stoppable in stoppables { group.addTask { await stoppable.stop() } }
        }
    }
}
