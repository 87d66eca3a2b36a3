import PeerSyncCore
import PeerSyncStorage

// Types and engine operations the replicator uses: revision trees, inserting pulled
// revisions with their history, resolving conflicts, local (non-replicated) documents.
// Apps normally do not need them.

/// One node of a document's revision tree.
@_spi(Replication)
public struct RevisionInfo: Sendable, Hashable {
    public let revID: RevisionID
    /// The parent revision, nil for a root (generation 1, or an ancestor pruned away).
    public let parentRevID: RevisionID?
    public let flags: RevisionFlags
    /// Whether the body of this revision is still stored.
    public let hasBody: Bool

    public var isDeleted: Bool { flags.contains(.deleted) }
    public var isLeaf: Bool { flags.contains(.leaf) }
    public var isConflict: Bool { flags.contains(.conflict) }
}

/// A document's whole revision tree.
@_spi(Replication)
public struct DocumentRevisions: Sendable, Hashable {
    public let docID: String
    /// The sequence of the document's latest change.
    public let sequence: UInt64
    /// The current (winning) revision.
    public let currentRevID: RevisionID
    public let isDeleted: Bool
    /// Whether a live leaf other than the current revision exists.
    public let isConflicted: Bool
    /// Every revision in LiteCore's `compareRevs` order: leaves first (the current revision
    /// first of all), then ancestors, newest first.
    public let revisions: [RevisionInfo]

    /// The leaf revisions, current first.
    public var leaves: [RevisionInfo] { revisions.filter(\.isLeaf) }

    /// The revision with this ID, if known.
    public func revision(_ id: RevisionID) -> RevisionInfo? { revisions.first { $0.revID == id } }

    /// Whether `revID` is a leaf once reopened (what `Collection.closeConflict`
    /// does to its winner; the same rule as the tree's `reopen`): every branch under it ends
    /// only in closed leaves, the local-only record of resolutions that went another way.
    public func isLeafOnceReopened(_ revID: RevisionID) -> Bool {
        var children: [RevisionID: [RevisionInfo]] = [:]
        for r in revisions { if let p = r.parentRevID { children[p, default: []].append(r) } }
        var pending = children[revID] ?? []
        while let r = pending.popLast() {
            if r.isLeaf {
                guard r.flags.contains(.closed) else { return false }
            } else {
                pending += children[r.revID] ?? []
            }
        }
        return true
    }

    /// The known ancestors of `revID`, parent first, at most `maxCount` of them (nil if
    /// the revision is unknown). This is the `history` a `rev` message carries.
    public func history(of revID: RevisionID, maxCount: Int = Int.max) -> [RevisionID]? {
        guard var current = revision(revID) else { return nil }
        var out: [RevisionID] = []
        while out.count < maxCount, let parent = current.parentRevID, let next = revision(parent) {
            out.append(parent)
            current = next
        }
        return out
    }
}

/// The outcome of ``Collection/insertRevision(docID:revID:history:body:deleted:allowConflict:)``.
@_spi(Replication)
public struct InsertResult: Sendable, Hashable {
    /// The revision that was inserted.
    public let revID: RevisionID
    /// How many revisions were added to the tree (the revision and unknown ancestors); 0 when
    /// the revision was already known and nothing changed.
    public let added: Int
    /// The document's new sequence, nil when nothing changed.
    public let sequence: UInt64?
    /// The document's current revision after the insertion (it stays the local one when the
    /// inserted revision started a conflicting branch).
    public let currentRevID: RevisionID
    /// Whether the document now has unresolved conflicting branches.
    public let isConflicted: Bool
    /// Position in `[revID] + history` of the first revision that was already known
    /// (0: the revision itself), nil if none was.
    public let commonAncestorIndex: Int?

    /// Whether anything was added.
    public var inserted: Bool { added > 0 }
}

/// A local (non-replicated) document: replication checkpoints and other private state.
/// Its revision ID is `0-<counter>`, increased by every put (as in LiteCore).
@_spi(Replication)
public struct LocalDocument: Sendable, Hashable {
    public let id: String
    public let revisionID: String
    public let properties: [String: JSONValue]
}

extension DocumentEngine {
    func revisions(of id: String, _ reader: any StorageReader) throws -> DocumentRevisions? {
        guard let record = try documentRecord(id, reader) else { return nil }
        return DocumentEngine.documentRevisions(try loadTree(record), docID: id, sequence: record.sequence)
    }

    /// The public view of a revision tree (nil for an empty tree).
    static func documentRevisions(_ tree: RevTree, docID: String, sequence: UInt64) -> DocumentRevisions? {
        guard let winner = tree.winner else { return nil }
        let order = tree.nodes.indices.sorted { RevTree.sortsBefore(tree[$0], tree[$1]) }
        let infos = order.map { i in
            let node = tree[i]
            return RevisionInfo(revID: node.revID, parentRevID: node.parent.map { tree[$0].revID },
                                flags: node.flags, hasBody: node.body != nil)
        }
        return DocumentRevisions(docID: docID, sequence: sequence, currentRevID: winner.revID,
                                 isDeleted: winner.isDeleted, isConflicted: tree.hasConflict, revisions: infos)
    }

    func revisionBody(id: String, revisionID: RevisionID, _ reader: any StorageReader) throws -> [String: JSONValue]? {
        guard let record = try documentRecord(id, reader) else { return nil }
        let tree = try loadTree(record)
        guard let index = tree.index(of: revisionID), let body = tree[index].body else { return nil }
        return try parseBody(body, docID: id)
    }

    func insertRevision(id: String, revisionID: RevisionID, history: [RevisionID], body: [String: JSONValue],
                        deleted: Bool, allowConflict: Bool, _ writer: any StorageWriter) throws -> InsertResult {
        try insertRevision(id: id, revisionID: revisionID, history: history, body: body, deleted: deleted,
                           allowConflict: allowConflict, readBack: false, writer).0
    }

    /// `readBack`: also return the tree as written (nil when nothing was added).
    func insertRevision(id: String, revisionID: RevisionID, history: [RevisionID], body: [String: JSONValue],
                        deleted: Bool, allowConflict: Bool, readBack: Bool,
                        _ writer: any StorageWriter) throws -> (InsertResult, DocumentRevisions?) {
        try requireCollection(writer)
        try validateID(id)
        // Far beyond any real history; keeps every later generation printable and parseable.
        guard revisionID.generation <= DocumentEngine.maxGeneration else {
            throw PeerSyncError(.invalidArgument, "revision generation is too large",
                                context: ["docID": id, "revID": revisionID.description]).with(spec)
        }
        let canonical = try validatedBody(body, docID: id, allowLegacyAttachments: true)
        let existing = try writer.get(id, in: spec.documentsKeyspace)
        var tree = try existing.map { record throws(PeerSyncError) in try loadTree(record) } ?? RevTree()
        let insertion: RevTree.HistoryInsertion
        let hasAttachments = DocumentEngine.referencesBlobs(body, canonical: canonical)
        do {
            insertion = try tree.insertHistory(revID: revisionID, history: history, body: canonical, deleted: deleted,
                                               hasAttachments: hasAttachments, allowConflict: allowConflict, markConflict: true)
        } catch where error.code == .conflict && !allowConflict && tree.supersedesWithSameContent(revisionID, body: canonical, deleted: deleted) {
            // A push that is not a fast-forward, but carries the current revision's content
            // under a higher revision ID: the pushing peer settled a conflict between two
            // equal-bodied branches on the higher ID (see `RevTree.acceptSameContent`).
            insertion = try tree.acceptSameContent(revID: revisionID, history: history, body: canonical, deleted: deleted,
                                                   hasAttachments: hasAttachments, closingBody: try validatedBody([:], docID: id))
        } catch {
            throw error.with("docID", id).with(spec)
        }
        var sequence: UInt64?
        if insertion.added > 0 {
            sequence = try writeTree(&tree, docID: id, writer)
        }
        guard let winner = tree.winner else {
            throw PeerSyncError(.internalError, "revision tree is empty after an insertion", context: ["docID": id]).with(spec)
        }
        let result = InsertResult(revID: revisionID, added: insertion.added, sequence: sequence,
                                  currentRevID: winner.revID, isConflicted: tree.hasConflict,
                                  commonAncestorIndex: insertion.commonAncestor)
        guard readBack, let sequence else { return (result, nil) }
        return (result, DocumentEngine.documentRevisions(tree, docID: id, sequence: sequence))
    }

    func resolveConflict(id: String, winning: RevisionID, losing: RevisionID, mergedBody: [String: JSONValue]?,
                         mergedDeleted: Bool, _ writer: any StorageWriter) throws -> RevisionID {
        try requireCollection(writer)
        guard let record = try writer.get(id, in: spec.documentsKeyspace) else {
            throw PeerSyncError(.notFound, "document does not exist", context: ["docID": id]).with(spec)
        }
        var tree = try loadTree(record)
        guard winning != losing, let w = tree.index(of: winning), let l = tree.index(of: losing),
              tree[w].isLeaf, tree[l].isLeaf else {
            throw PeerSyncError(.invalidArgument, "conflict resolution needs two different leaf revisions",
                                context: ["docID": id, "winning": winning.description, "losing": losing.description]).with(spec)
        }
        let mergedCanonical = try mergedBody.map { body throws(PeerSyncError) in
            try validatedBody(mergedDeleted ? [:] : body, docID: id)
        }
        tree.purgeBranch(leaf: l)
        guard let winnerIndex = tree.index(of: winning) else {
            throw PeerSyncError(.internalError, "winning revision vanished while purging the losing branch",
                                context: ["docID": id]).with(spec)
        }
        var result = winning
        if let mergedCanonical {
            let hasAttachments = DocumentEngine.referencesBlobs(mergedBody ?? [:], canonical: mergedCanonical)
            let index = tree.addLocal(parent: winnerIndex, body: mergedCanonical, deleted: mergedDeleted,
                                      hasAttachments: hasAttachments)
            result = tree[index].revID
        } else {
            tree.markBranchNotConflict(winnerIndex)
        }
        try writeTree(&tree, docID: id, writer)
        return result
    }
}

extension DocumentEngine {
    func closeConflict(id: String, winning: RevisionID, losing: RevisionID?, mergedBody: [String: JSONValue]?,
                       mergedDeleted: Bool, _ writer: any StorageWriter) throws -> RevisionID {
        try requireCollection(writer)
        guard let record = try writer.get(id, in: spec.documentsKeyspace) else {
            throw PeerSyncError(.notFound, "document does not exist", context: ["docID": id]).with(spec)
        }
        var tree = try loadTree(record)
        // A winner on a branch closed here earlier (the peer still has it as its current
        // revision) is reopened: the local-only tombstone closing it goes.
        guard let w = tree.reopen(winning), (tree[w].isLeaf && tree[w].body != nil) || mergedBody != nil else {
            throw PeerSyncError(.invalidArgument, "the winning revision must be a leaf with its body (or get a merged child)",
                                context: ["docID": id, "winning": winning.description]).with(spec)
        }
        if let losing {
            guard losing != winning, let l = tree.index(of: losing), tree[l].isLeaf else {
                throw PeerSyncError(.invalidArgument, "the losing revision must be another leaf",
                                    context: ["docID": id, "losing": losing.description]).with(spec)
            }
            if tree[l].isDeleted {
                tree.markBranchNotConflict(l)
                tree.markClosed(l)
            } else {
                let empty = try validatedBody([:], docID: id)
                tree.markClosed(tree.addLocal(parent: l, body: empty, deleted: true, hasAttachments: false))
            }
        }
        guard let winnerIndex = tree.index(of: winning) else {
            throw PeerSyncError(.internalError, "winning revision vanished", context: ["docID": id]).with(spec)
        }
        tree.markBranchNotConflict(winnerIndex)
        if let mergedBody {
            let canonical = try validatedBody(mergedDeleted ? [:] : mergedBody, docID: id)
            let hasAttachments = DocumentEngine.referencesBlobs(mergedBody, canonical: canonical)
            tree.addLocal(parent: winnerIndex, body: canonical, deleted: mergedDeleted, hasAttachments: hasAttachments)
        }
        // Never store a tree whose every branch is closed: its closing tombstone would read as
        // a deletion nobody made (and travel as one).
        if tree.winner?.isClosed == true {
            throw PeerSyncError(.internalError, "the resolution would leave every branch of the document closed",
                                context: ["docID": id, "winning": winning.description]).with(spec)
        }
        try writeTree(&tree, docID: id, writer)
        guard let winner = tree.winner else {
            throw PeerSyncError(.internalError, "revision tree is empty", context: ["docID": id]).with(spec)
        }
        return winner.revID
    }
}

/// Local documents in one keyspace.
struct LocalStore {
    let keyspace: String

    static func revisionNumber(_ record: Record) -> UInt64 {
        let text = String(decoding: record.version, as: UTF8.self)
        guard text.hasPrefix("0-") else { return 0 }
        return UInt64(text.dropFirst(2)) ?? 0
    }

    func get(id: String, _ reader: any StorageReader) throws -> LocalDocument? {
        try DocumentID.validate(id)
        guard let record = try reader.get(id, in: keyspace) else { return nil }
        let value: JSONValue
        do { value = try JSONValue(parsing: record.body) } catch {
            throw PeerSyncError(.corrupt, "stored local document is not valid JSON", context: ["docID": id])
        }
        guard let object = value.objectValue else {
            throw PeerSyncError(.corrupt, "stored local document is not a JSON object", context: ["docID": id])
        }
        return LocalDocument(id: id, revisionID: String(decoding: record.version, as: UTF8.self), properties: object)
    }

    func put(id: String, properties: [String: JSONValue], ifRevision: String?, maxBodySize: Int,
             _ writer: any StorageWriter) throws -> LocalDocument {
        try DocumentID.validate(id)
        let existing = try writer.get(id, in: keyspace)
        if let ifRevision {
            let current = existing.map { String(decoding: $0.version, as: UTF8.self) }
            guard current == ifRevision || (current == nil && ifRevision.isEmpty) else {
                throw PeerSyncError(.conflict, "local document changed", context: ["docID": id, "revID": current ?? "-"])
            }
        }
        let body = JSONValue.object(properties).canonicalData
        guard body.count <= maxBodySize else {
            throw PeerSyncError(.tooLarge, "local document body is \(body.count) bytes, the maximum is \(maxBodySize)",
                                context: ["docID": id])
        }
        let revision = "0-\((existing.map(LocalStore.revisionNumber) ?? 0) + 1)"
        try writer.put(Record(key: id, version: Array(revision.utf8), body: body), in: keyspace)
        return LocalDocument(id: id, revisionID: revision, properties: properties)
    }

    func delete(id: String, ifRevision: String?, _ writer: any StorageWriter) throws {
        try DocumentID.validate(id)
        guard let existing = try writer.get(id, in: keyspace) else {
            throw PeerSyncError(.notFound, "local document does not exist", context: ["docID": id])
        }
        if let ifRevision, String(decoding: existing.version, as: UTF8.self) != ifRevision {
            throw PeerSyncError(.conflict, "local document changed", context: ["docID": id])
        }
        try writer.purge(id, in: keyspace)
    }
}
