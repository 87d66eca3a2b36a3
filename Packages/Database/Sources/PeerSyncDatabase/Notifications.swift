import Dispatch
import PeerSyncCore
import PeerSyncStorage

/// Documents of one collection that changed in one commit (or, for changes made by another
/// process, in the commits seen by one poll). Purged and expired documents are included.
public struct CollectionChange: Sendable {
    /// The collection the documents belong to.
    public let collection: Collection
    /// The IDs of the changed documents, each once, in the order of their changes.
    public let documentIDs: [String]
}

/// One document that changed.
public struct DocumentChange: Sendable {
    /// The collection of the document.
    public let collection: Collection
    /// The ID of the document that changed (also for a purge or an expiry).
    public let documentID: String
}

/// Returned when a listener is added; ``remove()`` stops the notifications.
public final class ListenerToken: Sendable, Hashable {
    let id: UInt64
    private let notifier: ChangeNotifier

    init(id: UInt64, notifier: ChangeNotifier) {
        self.id = id
        self.notifier = notifier
    }

    /// Removes the listener (a stream ends). Idempotent.
    public func remove() { notifier.remove(id) }

    public static func == (lhs: ListenerToken, rhs: ListenerToken) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// The listeners of one database and what they have seen.
///
/// Change detection is uniform for this process and others: after each local commit and on
/// each timer tick, ``poll(_:database:)`` reads the `lastSequence` of every collection's
/// documents and purge-log keyspaces and, for watched collections, enumerates the records
/// above the last sequence it saw. Purges are recorded in the purge log (a keyspace) because a purged record
/// leaves no trace in the sequence index.
final class ChangeNotifier: Sendable {
    struct Listener: Sendable {
        let spec: CollectionSpec
        /// nil: every document of the collection.
        let docID: String?
        let deliver: @Sendable (_ database: Database, _ documentIDs: [String]) -> Void
        let finish: (@Sendable () -> Void)?
    }

    struct Registry {
        var listeners: [UInt64: Listener] = [:]
        var nextID: UInt64 = 1
        /// Set when the database closed: new listeners are finished at once.
        var closed = false
    }

    struct Seen {
        var documents: UInt64
        var purges: UInt64
    }

    private let registry = LockedValue(Registry())
    /// Last sequences delivered per watched collection; only touched on the writer queue.
    private let seen = QueueConfined([CollectionSpec: Seen]())

    /// Registers a listener; on a closed database it is finished at once (a stream ends).
    func add(_ listener: Listener) -> ListenerToken {
        let id = registry.withLock { registry -> UInt64? in
            guard !registry.closed else { return nil }
            let id = registry.nextID
            registry.nextID += 1
            registry.listeners[id] = listener
            return id
        }
        guard let id else {
            listener.finish?()
            return ListenerToken(id: 0, notifier: self)
        }
        return ListenerToken(id: id, notifier: self)
    }

    /// How many listeners are registered.
    var listenerCount: Int { registry.withLock { $0.listeners.count } }

    func remove(_ id: UInt64) {
        let removed = registry.withLock { $0.listeners.removeValue(forKey: id) }
        removed?.finish?()
    }

    /// Removes every listener, ending their streams; later listeners end at once.
    func finishAll() {
        let all = registry.withLock { registry in
            registry.closed = true
            defer { registry.listeners.removeAll() }
            return Array(registry.listeners.values)
        }
        for listener in all { listener.finish?() }
    }

    /// Delivers changes committed since the last poll. Must run on the writer queue.
    ///
    /// Every collection's marks are kept, watched or not: a listener added while a write is
    /// committing (after the caller's own read, before this poll) must still get that write,
    /// so its collection's mark has to predate the write rather than start at this poll.
    func poll(_ storage: any Storage, database: Database) {
        let listeners = registry.withLock { Array($0.listeners.values) }
        let watched = Set(listeners.map(\.spec))
        var batches: [CollectionSpec: [String]] = [:]
        do {
            let previous = seen.value
            var updated: [CollectionSpec: Seen] = [:]
            try storage.read { reader in
                for spec in watched.union(try Database.collectionSpecs(reader)) {
                    let lastDocument = try reader.lastSequence(in: spec.documentsKeyspace)
                    let lastPurge = try reader.lastSequence(in: spec.purgeLogKeyspace)
                    updated[spec] = Seen(documents: lastDocument, purges: lastPurge)
                    // Not seen before (the first poll after opening, or a collection another
                    // process created since the last poll): start from now.
                    guard var mark = previous[spec], watched.contains(spec) else { continue }
                    // A dropped and re-created keyspace restarts its sequences.
                    if lastDocument < mark.documents { mark.documents = 0 }
                    if lastPurge < mark.purges { mark.purges = 0 }
                    var ids: [String] = []
                    var unique = Set<String>()
                    if lastDocument > mark.documents {
                        try reader.enumerate(in: spec.documentsKeyspace, since: mark.documents) { record in
                            if unique.insert(record.key).inserted { ids.append(record.key) }
                            return true
                        }
                    }
                    if lastPurge > mark.purges {
                        try reader.enumerate(in: spec.purgeLogKeyspace, since: mark.purges) { record in
                            if unique.insert(record.key).inserted { ids.append(record.key) }
                            return true
                        }
                    }
                    if !ids.isEmpty { batches[spec] = ids }
                }
            }
            seen.modify { $0 = updated }
        } catch {
            Database.log.warning("database \(database.name): cannot read changes: \(error)")
            return
        }
        guard !batches.isEmpty else { return }
        for listener in listeners {
            guard let ids = batches[listener.spec] else { continue }
            if let docID = listener.docID {
                if ids.contains(docID) { listener.deliver(database, [docID]) }
            } else {
                listener.deliver(database, ids)
            }
        }
    }
}

extension Collection {
    /// Calls `listener` with the IDs of documents changed by each commit to this collection —
    /// by this database, by another `Database` instance or by another process with the same
    /// database open (noticed within ``DatabaseConfiguration/changePollInterval``). Purges and
    /// expirations count as changes. Callbacks run on `queue`, or in order on the database's
    /// notification queue. Changes committed after this call returns are delivered.
    ///
    /// Isolation: registers at once, without storage access. Changes are detected on the
    /// writer queue — right after each write of this database commits (before that write's
    /// method returns), and on each poll for other processes' commits — and the callbacks are
    /// then queued on `queue`, so a callback may run after the write's method returned.
    @discardableResult
    public func addChangeListener(queue: DispatchQueue? = nil,
                                  _ listener: @escaping @Sendable (CollectionChange) -> Void) -> ListenerToken {
        let target = queue ?? database.notificationQueue
        let spec = self.spec
        return addNotifierListener(docID: nil) { database, ids in
            let change = CollectionChange(collection: database.makeCollection(spec), documentIDs: ids)
            target.async { listener(change) }
        }
    }

    /// Calls `listener` whenever the document `id` changes (see ``addChangeListener(queue:_:)``).
    @discardableResult
    public func addDocumentChangeListener(id: String, queue: DispatchQueue? = nil,
                                          _ listener: @escaping @Sendable (DocumentChange) -> Void) -> ListenerToken {
        let target = queue ?? database.notificationQueue
        let spec = self.spec
        return addNotifierListener(docID: id) { database, _ in
            let change = DocumentChange(collection: database.makeCollection(spec), documentID: id)
            target.async { listener(change) }
        }
    }

    /// Registers `deliver` for the changes of this collection (or only of document `docID`)
    /// with the notifier and starts polling for changes; `finish` runs when the database closes.
    private func addNotifierListener(docID: String?, finish: (@Sendable () -> Void)? = nil,
                                     _ deliver: @escaping @Sendable (Database, [String]) -> Void) -> ListenerToken {
        let token = database.notifier.add(.init(spec: spec, docID: docID, deliver: deliver, finish: finish))
        database.schedulePoll()
        return token
    }

    /// The changes of this collection as an async stream (see ``addChangeListener(queue:_:)``).
    /// The stream ends when the consumer stops iterating or the database closes.
    public func changeStream() -> AsyncStream<CollectionChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: CollectionChange.self)
        let spec = self.spec
        let token = addNotifierListener(docID: nil, finish: { continuation.finish() }) { database, ids in
            continuation.yield(CollectionChange(collection: database.makeCollection(spec), documentIDs: ids))
        }
        continuation.onTermination = { _ in token.remove() }
        return stream
    }

    /// A signal for each commit that changed this collection, for a consumer that re-reads
    /// the changes feed itself (the replicator's pusher): it holds at most one pending signal
    /// (`bufferingNewest(1)`), so a consumer busy for a long time does not accumulate a
    /// value per commit. Ends like ``changeStream()``.
    @_spi(Replication)
    public func changeSignals() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let token = addNotifierListener(docID: nil, finish: { continuation.finish() }) { _, _ in
            continuation.yield()
        }
        continuation.onTermination = { _ in token.remove() }
        return stream
    }

    /// Same as ``changeStream()``.
    public var changes: AsyncStream<CollectionChange> { changeStream() }

    /// The changes of one document as an async stream.
    public func documentChangeStream(id: String) -> AsyncStream<DocumentChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: DocumentChange.self)
        let spec = self.spec
        let token = addNotifierListener(docID: id, finish: { continuation.finish() }) { database, _ in
            continuation.yield(DocumentChange(collection: database.makeCollection(spec), documentID: id))
        }
        continuation.onTermination = { _ in token.remove() }
        return stream
    }
}
