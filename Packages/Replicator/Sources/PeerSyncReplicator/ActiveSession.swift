import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase

/// The active side of one replication connection. The role is which workers exist: per
/// configured collection a ``Pusher`` when pushing and a ``Puller`` when pulling — in
/// push-and-pull both, running concurrently — and no ``Responder`` (the active side asks for
/// checkpoints, it does not serve them). Only the workers' requests are answered (the peer's
/// `changes`/`rev`/`norev` when pulling, `getAttachment`/`proveAttachment` when pushing);
/// anything else gets `BLIP`/404.
///
/// It opens the session (``open(checkpointIDs:)``), routes each request to the worker of its
/// collection and saves checkpoints on the peer; ``ActiveReplication`` runs it.
///
/// Thread-safety: immutable after `init`; the workers are actors, the context is locked.
final class ActiveSession: Sendable {
    let context: SessionContext
    /// The configured collections, in protocol-index order.
    let collections: [SessionCollection]
    /// Per collection index: its pusher (nil when not pushing).
    let pushers: [Pusher?]
    /// Per collection index: its puller (nil when not pulling).
    let pullers: [Puller?]

    init(blip: BLIPConnection, database: Database, collections: [SessionCollection], push: Bool, pull: Bool,
         enableAutoPurge: Bool = true, replyTimeout: Duration = .seconds(60), events: SessionEvents = SessionEvents()) {
        let context = SessionContext(blip: blip, database: database, table: .collectionAware(collections),
                                     replyTimeout: replyTimeout, events: events)
        let inserter = RevisionInserter(database: database)
        self.context = context
        self.collections = collections
        // The active side always offers and sends deltas.
        pushers = collections.enumerated().map { i, sc in
            push ? Pusher(context: context, index: i, collection: sc, sendsDeltas: true, collectionIsPulled: pull) : nil
        }
        pullers = collections.enumerated().map { i, sc in
            pull ? Puller(context: context, index: i, collection: sc, inserter: inserter, acceptsDeltas: true,
                          enableAutoPurge: enableAutoPurge) : nil
        }
        for puller in pullers.compactMap({ $0 }) { context.onStop { [weak puller] in await puller?.stop() } }
    }

    /// Why the session failed on its own side, if it did (see ``SessionContext/fail(_:)``).
    var failure: PeerSyncError? { context.failure }

    /// Registers the workers' handlers and starts the connection.
    func start() async {
        let blip = context.blip
        if pullers.contains(where: { $0 != nil }) {
            await blip.setHandler(profile: "changes", owner: self) { s, request in
                try await s.worker(s.pullers, request).handleChanges(request)
            }
            await blip.setHandler(profile: "rev", concurrent: true, owner: self) { s, request in
                try await s.pullerForRev(request).handleRev(request)
            }
            await blip.setHandler(profile: "norev", owner: self) { s, request in
                try await s.worker(s.pullers, request).handleNoRev(request)
            }
            await blip.setHandler(profile: RevisionBatch.profile, concurrent: true, owner: self) { s, request in
                try await s.pullerForRev(request).handleRevs(request, pushed: false)
            }
        }
        if pushers.contains(where: { $0 != nil }) {
            await blip.setStreamingHandler(profile: "getAttachment", concurrent: true, owner: self) { s, request in
                try await s.worker(s.pushers, request).handleGetAttachment(request)
            }
            await blip.setHandler(profile: "proveAttachment", concurrent: true, owner: self) { s, request in
                try await s.worker(s.pushers, request).handleProveAttachment(request)
            }
        }
        await blip.setHandler(profile: "proposeChanges", owner: self) { s, request in
            _ = try s.context.collection(of: request)
            throw PeerSyncError.reply(.http(403, "the active peer does not accept proposed changes"))
        }
        await blip.start()
    }

    /// Stops every worker and closes the connection.
    func stop() async {
        await context.stop()
    }

    /// The worker of the collection `request` is about (`HTTP`/400 for a bad `collection`
    /// property; `BLIP`/404 when that collection has no such worker).
    private func worker<Worker>(_ workers: [Worker?], _ request: BLIPRequest) throws -> Worker {
        let (index, _) = try context.collection(of: request)
        guard let worker = workers[index] else { throw PeerSyncError.reply(.blip(404, "no handler for message")) }
        return worker
    }

    /// The puller a `rev` goes to. A `rev` naming no collection this side pulls can never
    /// complete the pull that asked for it: the session fails (``SessionContext/fail(_:)``)
    /// rather than wait for it forever, unless its document ID is one no database can hold
    /// (a per-document error).
    private func pullerForRev(_ request: BLIPRequest) throws -> Puller {
        do {
            return try worker(pullers, request)
        } catch let error as PeerSyncError where context.failure == nil {
            let docID = request.properties["id"] ?? "-"
            let docError: PeerSyncError
            do {
                try DocumentID.validate(docID)
                docError = PeerSyncError(.corrupt, "the peer sent a revision of \(docID) that cannot be stored: \(error.message)",
                                         context: ["docID": docID])
                context.fail(docError)
            } catch {
                docError = error
            }
            context.events.documents(DocumentReplication(isPush: false, documents: [
                ReplicatedDocument(id: docID, collection: "-", flags: [], error: docError),
            ]))
            throw error
        }
    }

    // MARK: - Opening and checkpoints

    /// A collection's checkpoint as the peer stores it: its body (nil when none) and MVCC `rev`.
    typealias RemoteCheckpoint = (body: [String: JSONValue]?, rev: String?)

    /// Opens the session: `getCollections` with the collections' paths and `checkpointIDs`;
    /// on `BLIP`/404 (a legacy peer) legacy mode with the default collection only, reading its
    /// checkpoint with `getCheckpoint`. Returns the peer's checkpoint per collection. Throws
    /// `.collectionNotServed` when the peer does not serve a collection (or is legacy and more
    /// than the default collection is configured), `.protocolError` for a malformed reply.
    func open(checkpointIDs: [String]) async throws -> [RemoteCheckpoint] {
        let body: JSONValue = .object(["checkpoint_ids": .array(checkpointIDs.map { .string($0) }),
                                       "collections": .array(collections.map { .string($0.path) })])
        let reply = try await context.send(.request("getCollections", body: body.json), "getCollections")
        if let refusal = reply.blipError, refusal.domain == "BLIP", refusal.code == 404 {
            // Legacy peer: only the default collection, no `collection` property.
            guard collections.count == 1, collections[0].path == "_default" else {
                throw PeerSyncError(.collectionNotServed, "the peer does not support collections; only the default collection can be replicated")
            }
            context.useLegacyMode(collections[0])
            let cp = try await context.send(.request("getCheckpoint", properties: [("client", checkpointIDs[0])]), "getCheckpoint")
            if let refusal = cp.blipError {
                if refusal.code == 404 { return [(nil, nil)] }
                _ = try cp.checked("getCheckpoint")
            }
            return [(try JSONValue.parse(cp.body, "checkpoint").objectValue, cp.properties["rev"])]
        }
        let checked = try reply.checked("getCollections")
        guard let array = try JSONValue.parse(checked.body, "getCollections reply").arrayValue,
              array.count == collections.count else {
            throw PeerSyncError(.protocolError, "getCollections reply does not list every collection")
        }
        var out: [RemoteCheckpoint] = []
        for (i, entry) in array.enumerated() {
            guard var object = entry.objectValue else {
                throw PeerSyncError(.collectionNotServed, "the peer does not serve collection \(collections[i].path)")
            }
            let rev = object.removeValue(forKey: "rev")?.stringValue
            out.append((object.isEmpty ? nil : object, rev))
        }
        return out
    }

    /// Saves a checkpoint on the peer (`setCheckpoint`); returns its new MVCC revision. On
    /// `HTTP`/409 (someone else moved it) the revision is read again and the save retried once.
    func saveRemoteCheckpoint(index: Int, client: String, body: JSONValue, rev: String?) async throws -> String? {
        var props: BLIPProperties = [("client", client)]
        if let rev { props["rev"] = rev }
        for (k, v) in context.collectionProperty(index) { props[k] = v }
        var reply = try await context.send(.request("setCheckpoint", properties: props, body: body.json), "setCheckpoint")
        if reply.blipError?.code == 409 {
            var getProps: BLIPProperties = [("client", client)]
            for (k, v) in context.collectionProperty(index) { getProps[k] = v }
            let current = try await context.send(.request("getCheckpoint", properties: getProps), "getCheckpoint")
            props["rev"] = current.isError ? nil : current.properties["rev"]
            reply = try await context.send(.request("setCheckpoint", properties: props, body: body.json), "setCheckpoint")
        }
        return try reply.checked("setCheckpoint").properties["rev"]
    }
}
