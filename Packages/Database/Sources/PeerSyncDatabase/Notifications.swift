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
/// each timer tick, ``poll(_:database:)`` reads the `lastSequence` of every watched
/// collection's documents and purge-log keyspaces and enumerates the records above that
/// collection's mark (the last sequences delivered). Purges are recorded in the purge log (a
/// keyspace) because a purged record leaves no trace in the sequence index. With no listener a
/// poll reads nothing.
///
/// A collection's mark is taken when its first listener registers, by reading the storage
/// then (``add(_:storage:)``): a write that commits after the registration is above it and is
/// delivered, even if the poll that finds it runs later (a listener added while another
/// write commits — the caller's own read did not see it — still gets it). A listener added to a
/// collection already watched shares the existing mark, which is never ahead of the storage.
final class ChangeNotifier: Sendable {
    struct Listener: Sendable {
        let spec: CollectionSpec
        /// nil: every document of the collection.
        let docID: String?
        let deliver: @Sendable (_ database: Database, _ documentIDs: [String]) -> Void
        let finish: (@Sendable () -> Void)?
        /// False for a listener that only needs to know that the collection changed (the
        /// replicator's change signals): a poll whose listeners of a collection are all such
        /// delivers an empty list without reading the changed documents' IDs.
        var needsDocumentIDs = true
    }

    struct Seen: Equatable {
        var documents: UInt64
        var purges: UInt64
    }

    /// The last sequences delivered for one watched collection. `generation` changes when the
    /// mark is dropped (its last listener removed) and taken again, so that a poll that read the
    /// old mark does not overwrite the new one.
    struct Mark {
        var seen: Seen
        var generation: UInt64
    }

    struct Registry {
        var listeners: [UInt64: Listener] = [:]
        var nextID: UInt64 = 1
        /// One mark per collection with listeners. A collection whose mark could not be read
        /// at registration has none; the next poll starts it from then.
        var marks: [CollectionSpec: Mark] = [:]
        var nextGeneration: UInt64 = 1
        /// Set when the database closed: new listeners are finished at once.
        var closed = false
    }

    private let registry = LockedValue(Registry())

    /// Registers a listener; on a closed database it is finished at once (a stream ends).
    /// The first listener of a collection reads the collection's current sequences from
    /// `storage` (one short read transaction, on the caller's thread); later ones do not
    /// touch the storage.
    func add(_ listener: Listener, storage: (any Storage)?) -> ListenerToken {
        let spec = listener.spec
        let needsMark = registry.withLock { !$0.closed && $0.marks[spec] == nil }
        var current: Seen?
        if needsMark, let storage {
            current = try? storage.read { reader in
                Seen(documents: try reader.lastSequence(in: spec.documentsKeyspace),
                     purges: try reader.lastSequence(in: spec.purgeLogKeyspace))
            }
        }
        let id = registry.withLock { registry -> UInt64? in
            guard !registry.closed else { return nil }
            if registry.marks[spec] == nil, let current {
                registry.marks[spec] = Mark(seen: current, generation: registry.nextGeneration)
                registry.nextGeneration += 1
            }
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

    /// How many collections are watched (have a mark), for tests.
    var watchedCollectionCount: Int { registry.withLock { $0.marks.count } }

    func remove(_ id: UInt64) {
        let removed = registry.withLock { registry -> Listener? in
            guard let removed = registry.listeners.removeValue(forKey: id) else { return nil }
            if !registry.listeners.values.contains(where: { $0.spec == removed.spec }) {
                registry.marks[removed.spec] = nil
            }
            return removed
        }
        removed?.finish?()
    }

    /// Removes every listener, ending their streams; later listeners end at once.
    func finishAll() {
        let all = registry.withLock { registry in
            registry.closed = true
            defer {
                registry.listeners.removeAll()
                registry.marks.removeAll()
            }
            return Array(registry.listeners.values)
        }
        for listener in all { listener.finish?() }
    }

    /// Delivers changes committed since the last poll. Must run on the writer queue (polls
    /// never overlap).
    func poll(_ storage: any Storage, database: Database) {
        // The watched collections: those with a mark, and those whose registration could not
        // read one (started from this poll).
        let (marks, unmarked, needIDs) = registry.withLock { registry in
            (registry.marks, Set(registry.listeners.values.map(\.spec)).subtracting(registry.marks.keys),
             Set(registry.listeners.values.lazy.filter(\.needsDocumentIDs).map(\.spec)))
        }
        guard !marks.isEmpty || !unmarked.isEmpty else { return }
        var batches: [CollectionSpec: [String]] = [:]
        var updated: [CollectionSpec: Seen] = [:]
        // Collections changed whose IDs were not read (no listener needed them), with the
        // sequences they changed after.
        var unread: [CollectionSpec: Seen] = [:]
        do {
            try storage.read { reader in
                for spec in unmarked {
                    updated[spec] = Seen(documents: try reader.lastSequence(in: spec.documentsKeyspace),
                                         purges: try reader.lastSequence(in: spec.purgeLogKeyspace))
                }
                for (spec, mark) in marks {
                    let lastDocument = try reader.lastSequence(in: spec.documentsKeyspace)
                    let lastPurge = try reader.lastSequence(in: spec.purgeLogKeyspace)
                    updated[spec] = Seen(documents: lastDocument, purges: lastPurge)
                    var from = mark.seen
                    // A dropped and re-created keyspace restarts its sequences.
                    if lastDocument < from.documents { from.documents = 0 }
                    if lastPurge < from.purges { from.purges = 0 }
                    guard needIDs.contains(spec) else {
                        if lastDocument > from.documents || lastPurge > from.purges {
                            batches[spec] = []
                            unread[spec] = from
                        }
                        continue
                    }
                    guard lastDocument > from.documents || lastPurge > from.purges else { continue }
                    let ids = try Self.changedIDs(spec, since: from, latest: updated[spec], reader)
                    if !ids.isEmpty { batches[spec] = ids }
                }
            }
        } catch {
            Database.log.warning("database \(database.name): cannot read changes: \(error)")
            return
        }
        // The listeners are taken after the read: one registered meanwhile to a collection
        // read here gets this batch (a commit from before its registration at worst, never
        // one missed); one registered later gets what commits after this read.
        let listeners = registry.withLock { registry -> [Listener] in
            for (spec, seen) in updated {
                if let old = marks[spec] {
                    // Not if the mark was dropped and taken again meanwhile (that one is newer).
                    if registry.marks[spec]?.generation == old.generation { registry.marks[spec]?.seen = seen }
                } else if registry.marks[spec] == nil, registry.listeners.values.contains(where: { $0.spec == spec }) {
                    registry.marks[spec] = Mark(seen: seen, generation: registry.nextGeneration)
                    registry.nextGeneration += 1
                }
            }
            return Array(registry.listeners.values)
        }
        guard !batches.isEmpty else { return }
        if listeners.contains(where: { $0.needsDocumentIDs && unread[$0.spec] != nil }) {
            // Registered after the first look, to a collection whose IDs were not read: read
            // them now (what changed since then too, so none is missed).
            for (spec, from) in unread where listeners.contains(where: { $0.needsDocumentIDs && $0.spec == spec }) {
                batches[spec] = (try? storage.read { try Self.changedIDs(spec, since: from, $0) }) ?? []
            }
        }
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

extension ChangeNotifier {
    /// The IDs of the documents of `spec` changed or purged after `from`, each once. `latest`:
    /// the last sequences this reader sees, when known (a keyspace that did not move is not read).
    static func changedIDs(_ spec: CollectionSpec, since from: Seen, latest: Seen? = nil,
                           _ reader: any StorageReader) throws -> [String] {
        var ids: [String] = []
        var unique = Set<String>()
        if latest.map({ $0.documents > from.documents }) ?? true {
            try reader.enumerate(in: spec.documentsKeyspace, since: from.documents) { record in
                if unique.insert(record.key).inserted { ids.append(record.key) }
                return true
            }
        }
        if latest.map({ $0.purges > from.purges }) ?? true {
            try reader.enumerate(in: spec.purgeLogKeyspace, since: from.purges) { record in
                if unique.insert(record.key).inserted { ids.append(record.key) }
                return true
            }
        }
        return ids
    }
}

extension Collection {
    /// Calls `listener` with the IDs of documents changed by each commit to this collection —
    /// by this database, by another `Database` instance or by another process with the same
    /// database open (noticed within ``DatabaseConfiguration/changePollInterval``). Purges and
    /// expirations count as changes. Callbacks run on `queue`, or in order on the database's
    /// notification queue. Changes committed after this call returns are delivered.
    ///
    /// Isolation: the first listener of a collection reads the collection's current sequence
    /// (one short read transaction on the caller's thread); later ones register without
    /// storage access. Changes are detected on the
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
    private func addNotifierListener(docID: String?, needsDocumentIDs: Bool = true, finish: (@Sendable () -> Void)? = nil,
                                     _ deliver: @escaping @Sendable (Database, [String]) -> Void) -> ListenerToken {
        let token = database.notifier.add(.init(spec: spec, docID: docID, deliver: deliver, finish: finish,
                                                needsDocumentIDs: needsDocumentIDs || docID != nil),
                                          storage: try? database.openStorage())
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
        let token = addNotifierListener(docID: nil, needsDocumentIDs: false, finish: { continuation.finish() }) { _, _ in
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
