import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// Loss of access on the pull side (Sync Gateway revocations, as LiteCore handles them).
///
/// A peer signals that this side lost access to a document in one of two ways:
/// - a `changes` entry whose 4th element (the flags) is a revocation: LiteCore treats `0`,
///   `1` (deleted) and `5` (deleted + removed from channel) as normal revisions and every
///   other value (`2` access revoked, `3`, `4` removed from channel, …) as a revocation; the
///   revision is not requested;
/// - a `rev` whose body has `"_removed": true`; the revision is not saved.
///
/// Either way, with ``ReplicatorConfiguration/enableAutoPurge`` (and no `documentIDs`
/// filter and no pull filter refusing the document, as in Couchbase Lite) the local
/// document is purged: no tombstone, so nothing is pushed back. A document replication
/// event with ``DocumentFlags/accessRemoved`` is emitted in every case.
extension Puller {
    /// Whether the flags element of a `changes` entry (`false`/`true` or an integer bit set;
    /// absent = 0) marks a revocation.
    static func isRevocation(_ flags: JSONValue?) -> Bool {
        let value: Int64
        switch flags {
        case nil, .null?: value = 0
        case .bool(let b)?: value = b ? 1 : 0
        case .int(let i)?: value = i
        case .double(let d)?: value = Int64(exactly: d) ?? 0
        default: value = 0
        }
        return value != 0 && value != 1 && value != 5
    }

    /// Whether a pulled revision body says the document was removed from this side's access.
    static func isRemovedBody(_ body: [String: JSONValue]) -> Bool {
        body["_removed"] == .bool(true)
    }

    /// Applies a loss of access to `docID`: purges it when auto-purge applies, then emits
    /// the access-removed event (with the purge's error, if it failed for another reason
    /// than the document being absent).
    func applyRevocation(docID: String) async {
        let sc = collection
        var purge = enableAutoPurge && sc.config.documentIDs == nil
        var docError: PeerSyncError?
        do {
            if purge, let filter = sc.config.pullFilter,
               let doc = try await sc.collection.documentIncludingDeleted(id: docID), !filter(doc, .accessRemoved) {
                purge = false
            }
            if purge { try await sc.collection.purge(id: docID) }
        } catch let error as PeerSyncError where error.code == .notFound {
            // Nothing stored locally: nothing to purge.
        } catch {
            docError = (error as? PeerSyncError) ?? PeerSyncError(.internalError, "\(error)", context: ["docID": docID])
        }
        Logger(.replicator).info("access to \(docID) in \(sc.collection.fullName) removed\(purge ? "; purged" : "")")
        context.events.documents(DocumentReplication(isPush: false, documents: [
            ReplicatedDocument(id: docID, collection: sc.collection.fullName, flags: .accessRemoved, error: docError),
        ]))
    }
}
