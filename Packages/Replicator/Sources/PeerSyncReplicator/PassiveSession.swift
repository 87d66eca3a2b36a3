import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// The passive side of one replication connection. The role is which workers exist: a
/// ``Responder`` (`getCollections`, checkpoints) and, per collection the peer uses, a
/// ``Pusher`` (serving its `subChanges` with `changes`, and the blobs of what it sent) and a
/// ``Puller`` (receiving its push: `proposeChanges`/`changes`/`rev`, fast-forwards only),
/// created on the first request about that collection. Serves collection-aware clients
/// (first message `getCollections`) and legacy ones (anything else first: default collection
/// only, no `collection` property).
///
/// Thread-safety: the workers are actors; the worker table and the context are each locked
/// (never one inside the other).
final class PassiveSession: Sendable {
    let context: SessionContext
    let responder: Responder
    private let options: PassiveReplicationSession.Options
    /// Inserts received revisions in shared transactions (one per session).
    private let inserter: RevisionInserter

    struct CollectionWorkers: Sendable {
        let pusher: Pusher
        let puller: Puller
    }

    private let workers = LockedValue<[Int: CollectionWorkers]>([:])

    init(blip: BLIPConnection, database: Database, collections: [SessionCollection],
         options: PassiveReplicationSession.Options) {
        var events = SessionEvents()
        if let onDocuments = options.onDocumentReplication { events.documents = onDocuments }
        context = SessionContext(blip: blip, database: database, table: .awaitingFirstMessage(served: collections),
                                 replyTimeout: options.replyTimeout, events: events)
        responder = Responder(context: context)
        inserter = RevisionInserter(database: database)
        self.options = options
    }

    /// Serves the peer until the connection closes (either side), then stops every worker.
    func run() async {
        let blip = context.blip
        await blip.setHandler(profile: "getCollections", owner: self) { s, r in try await s.responder.handleGetCollections(r) }
        await blip.setHandler(profile: "getCheckpoint", owner: self) { s, r in try await s.responder.handleGetCheckpoint(r) }
        await blip.setHandler(profile: "setCheckpoint", owner: self) { s, r in try await s.responder.handleSetCheckpoint(r) }
        await blip.setHandler(profile: "subChanges", owner: self) { s, r in try await s.workers(for: r).pusher.serveSubscription(r) }
        await blip.setHandler(profile: "proposeChanges", owner: self) { s, r in
            try await s.workers(for: r).puller.handleProposedChanges(r)
        }
        await blip.setHandler(profile: "changes", owner: self) { s, r in try await s.workers(for: r).puller.handlePushedChanges(r) }
        await blip.setHandler(profile: "rev", concurrent: true, owner: self) { s, r in
            try await s.workers(for: r).puller.handlePushedRev(r)
        }
        await blip.setHandler(profile: RevisionBatch.profile, concurrent: true, owner: self) { s, r in
            try await s.workers(for: r).puller.handleRevs(r, pushed: true)
        }
        await blip.setHandler(profile: "norev", owner: self) { s, r in
            // The pusher will not send that revision; nothing here waits for it.
            _ = try s.context.collection(of: r)
            return nil
        }
        await blip.setStreamingHandler(profile: "getAttachment", concurrent: true, owner: self) { s, r in
            try await s.workers(for: r).pusher.handleGetAttachment(r)
        }
        await blip.setHandler(profile: "proveAttachment", concurrent: true, owner: self) { s, r in
            try await s.workers(for: r).pusher.handleProveAttachment(r)
        }
        await blip.start()
        _ = await blip.waitUntilClosed()
        await context.stop()
        // What the handlers were storing when the connection ended is reported before run()
        // returns.
        await blip.waitUntilHandlersFinished()
    }

    /// Stops every worker and closes the connection.
    func stop() async {
        await context.stop()
    }

    /// The workers of the collection `request` is about, created on first use (`HTTP`/400 or
    /// 404 for a collection that is not served; see ``SessionContext/collection(of:)``).
    private func workers(for request: BLIPRequest) throws -> CollectionWorkers {
        let (index, collection) = try context.collection(of: request)
        let (workers, created) = self.workers.withLock { table -> (CollectionWorkers, Bool) in
            if let existing = table[index] { return (existing, false) }
            let new = CollectionWorkers(
                pusher: Pusher(context: context, index: index, collection: collection,
                               sendsDeltas: options.enableDeltaSync, collectionIsPulled: false),
                puller: Puller(context: context, index: index, collection: collection, inserter: inserter,
                               readOnly: options.readOnly, acceptsDeltas: options.enableDeltaSync))
            table[index] = new
            return (new, true)
        }
        if created {
            context.onStop { [weak pusher = workers.pusher, weak puller = workers.puller] in
                await pusher?.stop()
                await puller?.stop()
            }
        }
        return workers
    }
}
