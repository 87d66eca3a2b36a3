import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// The passive side's answers about the session itself rather than documents: `getCollections`
/// (which collections the peer replicates, with their checkpoints) and the peer's checkpoints
/// (`getCheckpoint`, `setCheckpoint`), stored as local documents `checkpoint/<client>` with
/// MVCC revisions. The active side has no responder: it asks, it does not serve.
///
/// Thread-safety: a value; its one piece of state, the collection table chosen by
/// `getCollections`, lives in the ``SessionContext``. Handlers may run concurrently.
struct Responder: Sendable {
    let context: SessionContext

    /// `getCollections` (body `collections`: paths, `checkpoint_ids`: the peer's checkpoint
    /// IDs, same length): chooses the collection table (must be the first message, else
    /// `BLIP`/400) and answers per collection its stored checkpoint with `rev` (`{}` when none,
    /// `null` when the collection is not served).
    func handleGetCollections(_ request: BLIPRequest) async throws -> BLIPMessage? {
        let served = try context.beginCollectionAwareMode()
        guard let body = try JSONValue.parse(request.body, "getCollections").objectValue,
              let names = body["collections"]?.arrayValue, let ids = body["checkpoint_ids"]?.arrayValue,
              names.count == ids.count, !names.isEmpty else {
            throw PeerSyncError.reply(.blip(400, "getCollections needs collections and checkpoint_ids of the same length"))
        }
        let paths = names.compactMap(\.stringValue)
        guard paths.count == names.count, Set(paths).count == paths.count else {
            throw PeerSyncError.reply(.blip(400, "collection names must be distinct strings"))
        }
        let indexed = paths.map { path in served.first { $0.path == path } }
        context.setCollections(indexed)
        var reply: [JSONValue] = []
        for (i, c) in indexed.enumerated() {
            guard c != nil else { reply.append(.null); continue }
            guard let client = ids[i].stringValue else { reply.append(.object([:])); continue }
            if let stored = try await context.database.getLocal(id: Self.checkpointKey(client)),
               var object = stored.properties["body"]?.objectValue {
                object["rev"] = .string(stored.revisionID)
                reply.append(.object(object))
            } else {
                reply.append(.object([:]))
            }
        }
        return BLIPMessage(type: .response, body: JSONValue.array(reply).json)
    }

    /// The local document holding client `client`'s checkpoint (IDs cut to 200 bytes).
    static func checkpointKey(_ client: String) -> String {
        "checkpoint/" + String(decoding: client.utf8.prefix(200), as: UTF8.self)
    }

    /// `getCheckpoint` (property `client`; `collection` checked like any request's): the
    /// stored body with its `rev`; `HTTP`/404 when none, `BLIP`/400 without `client`.
    func handleGetCheckpoint(_ request: BLIPRequest) async throws -> BLIPMessage? {
        _ = try context.collection(of: request)
        let client = try Self.client(of: request)
        guard let stored = try await context.database.getLocal(id: Self.checkpointKey(client)),
              let body = stored.properties["body"] else {
            throw PeerSyncError.reply(.http(404, "no checkpoint"))
        }
        return BLIPMessage(type: .response, properties: [("rev", stored.revisionID)], body: body.json)
    }

    /// `setCheckpoint` (properties `client`, `rev` of the checkpoint it replaces, absent for
    /// the first): stores the body and answers its new `rev`; `HTTP`/409 when `rev` is not
    /// the stored one.
    func handleSetCheckpoint(_ request: BLIPRequest) async throws -> BLIPMessage? {
        _ = try context.collection(of: request)
        let client = try Self.client(of: request)
        let body = try JSONValue.parse(request.body, "setCheckpoint")
        do {
            let saved = try await context.database.putLocal(id: Self.checkpointKey(client), json: ["body": body],
                                                            ifRevision: request.properties["rev"] ?? "")
            return BLIPMessage(type: .response, properties: [("rev", saved.revisionID)])
        } catch let error as PeerSyncError where error.code == .conflict {
            throw PeerSyncError.reply(.http(409, "checkpoint revision mismatch"))
        }
    }

    private static func client(of request: BLIPRequest) throws -> String {
        guard let client = request.properties["client"], !client.isEmpty else {
            throw PeerSyncError.reply(.blip(400, "missing client"))
        }
        return client
    }
}
