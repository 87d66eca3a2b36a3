import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// How the active side settles a conflict with the peer's revision, the Couchbase Lite way
/// (see the Replicator README, "Conflicts"): the collection's resolver decides the content,
/// and the result is always saved on the *remote* branch — the remote revision itself when
/// the result has its content (or both are deletions), otherwise a new revision, child of the
/// remote one, with the result's body (a tombstone when the result is nil). The local branch
/// is closed (a tombstone flagged ``RevisionFlags/closed``) and stays local, so pushing the
/// new current revision is a fast-forward for the peer.
///
/// Used by the ``Puller`` (a pulled revision conflicts, or the peer's current revision lies
/// on a branch resolved away here) and by the ``Pusher`` (a proposal refused with 409 names
/// such a revision). A passive side never resolves: it refuses every push that is not a
/// fast-forward. Stateless; callers run it as the document's only conflict handling in the
/// session (``SessionContext/handlingConflicts(of:isolation:_:)``), so the resolver is asked
/// once per conflict; other writers (the app, other sessions) may still change the document
/// meanwhile, which is detected and looked at again. Its methods run in the caller's isolation
/// (the worker's actor), as the worker's own methods would.
struct ConflictResolution: Sendable {
    let collection: SessionCollection

    /// After inserting a pulled revision: if it conflicts with the local current revision
    /// (two branches; or a live revision beside a deletion it does not descend from), resolve
    /// it (see the type's description). `tree`: the document's revision tree read right after
    /// the insertion, if known (saves a read in the common case where there is nothing to
    /// resolve). Throws `.conflict` when the document kept changing for 4 attempts, or the
    /// resolver's / the database's error.
    func resolveIfConflicted(docID: String, pulled: RevisionID, tree: DocumentRevisions? = nil,
                             isolation: isolated (any Actor)? = #isolation) async throws {
        let c = collection.collection
        var known = tree
        var lastRefusal: PeerSyncError?
        for _ in 0..<4 {
            let read: DocumentRevisions?
            if let known { read = known } else { read = try await c.revisions(of: docID) }
            known = nil
            guard let revs = read, let remoteInfo = revs.revision(pulled), remoteInfo.isLeaf else { return }
            guard let localInfo = Self.conflictingLocal(revs, pulled: remoteInfo) else {
                if remoteInfo.isConflict {
                    try await c.closeConflict(docID: docID, winningRevisionID: pulled, losingRevisionID: nil)
                }
                return
            }
            do {
                try await resolve(docID: docID, local: localInfo, remote: remoteInfo, in: revs)
                return
            } catch let error as PeerSyncError where error.code == .invalidArgument {
                lastRefusal = error
                continue  // the document changed under us (or the resolution was refused); look again
            }
        }
        // Never silently unresolved: the document's pull event carries this error.
        throw PeerSyncError(.conflict, "the conflict on \(docID) is still unresolved after 4 attempts: "
                            + (lastRefusal?.message ?? "the document kept changing"), context: ["docID": docID])
    }

    /// Resolves a conflict already stored in the database (a pulled branch whose resolution
    /// did not finish: the session ended, or the resolver threw): each open live leaf beside
    /// the current revision is taken as the remote side, as if just pulled. Returns whether
    /// anything was resolved. Throws as ``resolveIfConflicted(docID:pulled:tree:isolation:)``.
    @discardableResult
    func resolveExisting(docID: String, isolation: isolated (any Actor)? = #isolation) async throws -> Bool {
        let c = collection.collection
        var attempted: RevisionID?
        var settled = false
        // Each round settles one branch; a document has few. The branch just attempted still
        // open means no progress (nothing to resolve it against): stop.
        for _ in 0..<16 {
            guard let revs = try await c.revisions(of: docID), revs.isConflicted,
                  let branch = revs.leaves.filter({ $0.revID != revs.currentRevID && !$0.isDeleted && !$0.flags.contains(.closed) })
                      .max(by: { $0.revID < $1.revID }) else { return attempted != nil }
            if branch.revID == attempted { return settled }
            if attempted != nil { settled = true }
            attempted = branch.revID
            try await resolveIfConflicted(docID: docID, pulled: branch.revID, tree: revs)
        }
        return true
    }

    /// Asks the resolver about `local` against `remote` and saves the result on the remote
    /// branch. `remote` may lie on a branch this database closed earlier (the peer still has it
    /// as its current revision): it is reopened. When the remote body is no longer stored, the
    /// local body continues the remote branch (local wins). Throws `.invalidArgument` when the
    /// document changed meanwhile.
    func resolve(docID: String, local localInfo: RevisionInfo, remote remoteInfo: RevisionInfo,
                 in revs: DocumentRevisions, continueRemoteBranch: Bool = false,
                 isolation: isolated (any Actor)? = #isolation) async throws {
        let c = collection.collection
        let localRev = localInfo.revID, remoteRev = remoteInfo.revID
        let remoteIsLeaf = revs.isLeafOnceReopened(remoteRev)
        let localBody = localInfo.isDeleted ? nil : try await c.revisionBody(docID: docID, revID: localRev)
        let remoteBody = remoteInfo.isDeleted ? nil : try await c.revisionBody(docID: docID, revID: remoteRev)
        if !continueRemoteBranch && Self.sameContent(localInfo, localBody, remoteInfo, remoteBody) {
            // The same content under two IDs (see `sameContent(_:_:docID:in:)`): no choice for
            // the resolver; the higher ID wins.
            if localRev > remoteRev {
                // The local one stays; the remote branch is closed here if it is still open,
                // and the push that follows carries the local revision to the peer, which
                // takes it (see `Pusher.proposalSupersedingPeer`).
                if remoteInfo.isLeaf && !remoteInfo.flags.contains(.closed) {
                    try await c.closeConflict(docID: docID, winningRevisionID: localRev, losingRevisionID: remoteRev)
                }
                return
            }
            if remoteIsLeaf && remoteInfo.hasBody {
                try await c.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev)
                return
            }
        }
        if localInfo.isDeleted && remoteInfo.isDeleted {
            // Two deletions: nothing to ask; the remote branch continues — the remote tombstone
            // itself when it is (or, reopened, becomes) a leaf with its body still stored; else a
            // new tombstone on top of it (a tombstone deep in a closed branch lost its body).
            try await c.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev,
                                      mergedBody: remoteIsLeaf && remoteInfo.hasBody ? nil : [:], mergedDeleted: true)
            return
        }
        let resolvedBody: [String: JSONValue]?
        if !remoteInfo.isDeleted && remoteBody == nil {
            resolvedBody = localBody
        } else {
            let local = localBody.map { c.makeDocument(id: docID, revisionID: localRev, properties: $0, isDeleted: false) }
            let remote = remoteBody.map { c.makeDocument(id: docID, revisionID: remoteRev, properties: $0, isDeleted: false) }
            let conflict = Conflict(documentID: docID, localDocument: local, remoteDocument: remote,
                                    localRevisionID: localRev, remoteRevisionID: remoteRev)
            resolvedBody = try await collection.resolver.resolve(conflict)?.properties
        }
        let remoteAsIs = remoteInfo.isDeleted ? resolvedBody == nil : resolvedBody == remoteBody
        if remoteAsIs && remoteIsLeaf && remoteInfo.hasBody {
            // The remote revision as it is (its content, or its deletion).
            try await c.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev)
        } else {
            // Local wins, a merge or a deletion: a new revision continues the remote branch.
            try await c.closeConflict(docID: docID, winningRevisionID: remoteRev, losingRevisionID: localRev,
                                      mergedBody: resolvedBody ?? [:], mergedDeleted: resolvedBody == nil)
        }
    }

    /// Resolves against a peer's current revision that is known here on a branch this
    /// database resolved away (the peer never learnt of that resolution), as if it had just
    /// been pulled, so that this side's next push is a fast-forward. Returns the document's
    /// revisions afterwards, or nil when there was nothing to resolve (or it changed meanwhile).
    @discardableResult
    func resolveAgainstPeer(docID: String, serverRev: RevisionID,
                            isolation: isolated (any Actor)? = #isolation) async throws -> DocumentRevisions? {
        let c = collection.collection
        guard let revs = try await c.revisions(of: docID), let remote = revs.revision(serverRev),
              serverRev != revs.currentRevID, !(revs.history(of: revs.currentRevID) ?? []).contains(serverRev),
              let local = revs.revision(revs.currentRevID) else { return nil }
        do {
            try await resolve(docID: docID, local: local, remote: remote, in: revs)
        } catch let error as PeerSyncError where error.code == .invalidArgument {
            return nil
        }
        return try await c.revisions(of: docID)
    }

    /// Whether two revisions hold the same content: both deletions, or both live with equal
    /// bodies (a body no longer stored counts as different). Such a conflict is settled without
    /// the resolver — there is nothing to choose between — on the higher revision ID, on both
    /// sides: the active side keeps (or adopts) the higher one, and a passive peer accepts a
    /// push of the higher one over its current revision when the content is the same. No new
    /// revision is made, so peers holding one resolution under different IDs (a "local wins"
    /// copies the local body onto the remote branch) agree on the largest ID; around a cycle
    /// of peers, "adopt the remote" rotated the IDs for ever, and "a new child of the remote"
    /// (Couchbase Lite's rule) made ever higher generations.
    static func sameContent(_ a: RevisionInfo, _ b: RevisionInfo, docID: String, in c: PeerSyncDatabase.Collection,
                            isolation: isolated (any Actor)? = #isolation) async throws -> Bool {
        if a.isDeleted || b.isDeleted { return a.isDeleted && b.isDeleted }
        guard a.hasBody, b.hasBody else { return false }
        return sameContent(a, try await c.revisionBody(docID: docID, revID: a.revID),
                           b, try await c.revisionBody(docID: docID, revID: b.revID))
    }

    /// The rule of ``sameContent(_:_:docID:in:)`` over bodies already read (nil: a deletion, or
    /// a body no longer stored).
    static func sameContent(_ a: RevisionInfo, _ aBody: [String: JSONValue]?,
                            _ b: RevisionInfo, _ bBody: [String: JSONValue]?) -> Bool {
        if a.isDeleted || b.isDeleted { return a.isDeleted && b.isDeleted }
        return aBody != nil && aBody == bBody
    }

    /// The local leaf a pulled leaf conflicts with, or nil when there is no conflict: the
    /// current revision when the pulled one did not become current; when it did, another
    /// live leaf, or — for a live pulled revision — an open tombstone leaf it does not
    /// descend from (deletion vs edit). Closed leaves never take part.
    static func conflictingLocal(_ revs: DocumentRevisions, pulled: RevisionInfo) -> RevisionInfo? {
        if revs.currentRevID != pulled.revID { return revs.revision(revs.currentRevID) }
        let open = revs.leaves.filter { $0.revID != pulled.revID && !$0.flags.contains(.closed) }
        if let live = open.first(where: { !$0.isDeleted }) { return live }
        guard !pulled.isDeleted else { return nil }
        return open.filter { deletionConflicts(live: pulled.revID, tombstone: $0, in: revs) }.max { $0.revID < $1.revID }
    }

    /// The deletion-vs-edit rule, the same for both roles (Couchbase Lite: deletion wins):
    /// live revision `live` conflicts with tombstone leaf `tombstone` unless `live`
    /// recreates the document, i.e. unless a deletion is among its ancestors.
    static func deletionConflicts(live: RevisionID, tombstone: RevisionInfo, in revs: DocumentRevisions) -> Bool {
        guard tombstone.isDeleted, tombstone.isLeaf else { return false }
        let ancestors = revs.history(of: live) ?? []
        return !ancestors.contains { revs.revision($0)?.isDeleted == true }
    }
}
