import PeerSyncCore
import PeerSyncDatabase

/// A conflict found while pulling: the local and the remote revision of one document are
/// both leaves and neither descends from the other. A nil document means that side deleted it.
public struct Conflict: Sendable {
    /// The ID of the document in conflict.
    public let documentID: String
    /// The local revision, nil if it is a deletion.
    public let localDocument: Document?
    /// The remote (pulled) revision, nil if it is a deletion.
    public let remoteDocument: Document?
    /// The local revision's ID.
    public let localRevisionID: RevisionID
    /// The remote revision's ID.
    public let remoteRevisionID: RevisionID
}

/// Decides how a conflict is resolved (Couchbase Lite's `ConflictResolverProtocol`).
///
/// `resolve` returns the document to keep: the local or the remote `Document`, a merged
/// `MutableDocument` (any `DocumentProperties`), or nil to delete. It runs on a replicator task (never the main actor) and may
/// be called concurrently for different documents. Throwing leaves the conflict unresolved
/// and reports the error for that document.
///
/// How a result is saved (Couchbase Lite's rule): always on the *remote* branch. A result
/// with the remote revision's content (or a deletion when the remote revision is one) keeps
/// the remote revision as the current one; anything else — the local document, a merge, nil
/// for a deletion — becomes a new revision, child of the remote one. The local branch is
/// closed by a tombstone that stays local (never replicated). Pushing the result is then a
/// fast-forward for the peer, which never accepts anything else.
///
/// Not asked: a conflict between two revisions with the same content (two deletions, or equal
/// bodies) — the higher revision ID wins on both sides, without a new revision (Replicator
/// README, "Conflicts").
public protocol ConflictResolver: Sendable {
    /// The document to keep for `conflict`: its local or remote document, a merge, or nil to
    /// delete.
    func resolve(_ conflict: Conflict) async throws -> (any DocumentProperties)?
}

/// Built-in resolvers.
public enum ConflictResolvers {
    /// The default, deterministic rule (Couchbase Lite 3.x): a deletion wins over an edit;
    /// otherwise the revision with the higher revision ID wins — the higher generation, then
    /// the higher digest. The rule does not depend on which side is local, so every peer
    /// picks the same winner, and concurrent edits on three or more peers converge without
    /// ping-pong.
    public static let `default`: any ConflictResolver = DefaultConflictResolver()
    /// Keeps the local revision (a local deletion stays deleted).
    public static let localWins: any ConflictResolver = ClosureConflictResolver { $0.localDocument }
    /// Keeps the remote revision (a remote deletion wins).
    public static let remoteWins: any ConflictResolver = ClosureConflictResolver { $0.remoteDocument }

    /// A resolver that merges the two sides with `merge` (called only when both are live;
    /// otherwise the deletion wins, as in the default rule).
    public static func merge(_ merge: @escaping @Sendable (_ local: Document, _ remote: Document) -> [String: JSONValue])
        -> any ConflictResolver {
        ClosureConflictResolver { conflict in
            guard let local = conflict.localDocument, let remote = conflict.remoteDocument else { return nil }
            return MutableDocument(id: conflict.documentID, data: merge(local, remote))
        }
    }

    /// A resolver made from a closure.
    public static func custom(_ resolve: @escaping @Sendable (Conflict) async throws -> (any DocumentProperties)?) -> any ConflictResolver {
        ClosureConflictResolver(body: resolve)
    }
}

struct DefaultConflictResolver: ConflictResolver {
    func resolve(_ conflict: Conflict) async throws -> (any DocumentProperties)? {
        guard let local = conflict.localDocument, let remote = conflict.remoteDocument else { return nil }
        return conflict.remoteRevisionID > conflict.localRevisionID ? remote : local
    }
}

struct ClosureConflictResolver: ConflictResolver {
    let body: @Sendable (Conflict) async throws -> (any DocumentProperties)?
    init(body: @escaping @Sendable (Conflict) async throws -> (any DocumentProperties)?) { self.body = body }
    func resolve(_ conflict: Conflict) async throws -> (any DocumentProperties)? { try await body(conflict) }
}
