import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase

/// Receiving one revision (`rev`): read it (IDs, history, body, a delta applied to its base,
/// legacy attachments), fetch the blobs it references, insert it with the next shared
/// transaction (``RevisionInserter``); the reply — the handler returning — is only sent once
/// that transaction has committed.
extension Puller {
    /// A revision read from a `rev` request, ready to insert.
    struct IncomingRevision: Sendable {
        let docID: String
        let revID: RevisionID
        let history: [RevisionID]
        let deleted: Bool
        var body: [String: JSONValue]

        var flags: DocumentFlags { deleted ? .deleted : [] }
    }

    /// One revision as it arrived: a `rev` request, or one entry of a `revs` batch
    /// (`Puller+Batches.swift`) — the same properties (`id`, `rev`, `sequence`, `history`,
    /// `deleted`, `deltaSrc`) and a body, handled the same way.
    struct ReceivedRevision: Sendable {
        enum Body: Sendable {
            /// A `rev` request's body, parsed when the revision is read.
            case encoded([UInt8])
            /// A `revs` entry's body, parsed with its batch.
            case parsed(JSONValue)
        }
        var properties: BLIPProperties
        var body: Body

        init(_ request: BLIPRequest) {
            properties = request.properties
            body = .encoded(request.body)
        }

        init(properties: BLIPProperties, body: JSONValue) {
            self.properties = properties
            self.body = .parsed(body)
        }

        /// The body as JSON (a protocol error for a `rev` body that does not parse).
        func parsedBody() throws -> JSONValue {
            switch body {
            case .encoded(let bytes): try JSONValue.parse(bytes, "rev")
            case .parsed(let value): value
            }
        }
    }

    // MARK: - Pulled (active)

    /// A pulled `rev`. A revision that is not stored for any reason but a delta to resend in
    /// full (422) or a document ID no database can hold (a per-document error) — a body that
    /// does not parse, an invalid revision ID, a storage failure — is never skipped: its
    /// document event has the error, its change is never checkpointed and the session fails
    /// (``SessionContext/fail(_:)``); a damaged revision is `.corrupt`.
    func handleRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        try await receivePulled(ReceivedRevision(request))
    }

    /// A pulled revision (a `rev`, or an entry of a `revs` batch that needs more than its
    /// insertion); see ``handleRev(_:)``. It is reported (progress, document event) as soon as
    /// it is handled, before the handler returns — so before the replicator can report
    /// `.stopped` (`StoppedWhileStoringTests`).
    func receivePulled(_ request: ReceivedRevision) async throws -> BLIPMessage? {
        ReplicationCounters.add(ReplicationCounters.revsReceived)
        do {
            return try await receivePulledRev(request)
        } catch let error as PeerSyncError {
            notePulledFailure(error, docID: request.properties["id"] ?? "-")
            throw error
        }
    }

    /// A pulled revision that was not stored because of `error` (the reply it gets): unless
    /// the session already failed or the peer resends it in full (422), its document event
    /// carries the error and the session fails with `.corrupt` — or, for an ID no database can
    /// hold (e.g. NUL), only the event (a per-document error; the session goes on).
    func notePulledFailure(_ error: PeerSyncError, docID: String) {
        guard context.failure == nil, error.blipError?.isHTTP(422) != true else { return }
        do { try DocumentID.validate(docID) } catch let idError {
            reportError(docID, idError)
            return
        }
        let e = PeerSyncError(.corrupt, "the peer sent a revision of \(docID) that cannot be stored: \(error.message)",
                              context: ["docID": docID])
        reportError(docID, e)
        context.fail(e)
    }

    private func receivePulledRev(_ request: ReceivedRevision) async throws -> BLIPMessage? {
        let sequence = request.properties["sequence"]
        // True until the revision is stored (or deliberately not: filter, revocation, a delta
        // to be resent in full, an ID no database can hold); the defer then never lets the
        // checkpoint pass it.
        var notStored = true
        defer { finishRev(sequence, failed: notStored) }
        let (docID, revID) = try Self.ids(of: request)
        let claim = holdClaim(docID, revID)
        defer { claim.release() }
        do { try Self.checkDocumentID(docID) } catch {
            notStored = false
            throw error
        }
        var incoming: IncomingRevision
        do { incoming = try await readRevision(request, docID: docID, revID: revID) } catch let error as PeerSyncError
            where error.blipError?.isHTTP(422) == true {
            notStored = false  // the peer resends the full revision with this sequence
            throw error
        }
        if Self.isRemovedBody(incoming.body) {
            context.setPeerRevision(index, docID, nil)
            await applyRevocation(docID: docID)
            context.events.progress(1, 0)
            notStored = false
            return nil
        }
        incoming.body = try Self.decodeAttachments(incoming.body)
        let c = collection.collection
        if let filter = collection.config.pullFilter,
           !filter(c.makeDocument(id: docID, revisionID: revID, properties: incoming.body, isDeleted: incoming.deleted),
                   incoming.flags) {
            context.events.progress(1, 0)
            notStored = false
            return nil
        }
        // Blobs first: the revision is only inserted once every blob it references is stored.
        let pins = try await fetchMissingBlobs(of: incoming)
        // Stored and resolved as the document's only conflict handling meanwhile, so the tree
        // read back by the insertion is still the one to resolve.
        let docError = try await context.handlingConflicts(of: docID) { () async throws -> PeerSyncError? in
            let outcome = await inserter.insert([incoming.insert(into: c, allowConflict: true)])[0]
            return try await storePulled(incoming, sequence: sequence, outcome)
        }
        notStored = false
        withExtendedLifetime(pins) {}
        reportPulled(incoming, docError)
        return nil
    }

    /// What follows a pulled revision's insertion, inside its document's conflict handling:
    /// the peer's revision noted, a conflict it made resolved. Returns the error its document
    /// event carries (a conflict that could not be resolved), nil when all went well; throws
    /// the reply when it was not stored (a storage failure: ``pulledStorageFailure(_:_:sequence:)``;
    /// a refusal: `HTTP`/409 or 400).
    func storePulled(_ incoming: IncomingRevision, sequence: String?,
                     _ outcome: Result<RevisionInsertOutcome, any Error>) async throws -> PeerSyncError? {
        let inserted: RevisionInsertOutcome
        do { inserted = try outcome.get() } catch {
            throw pulledStorageFailure(error, incoming, sequence: sequence)
        }
        let (result, treeAfter) = try Self.inserted(inserted)
        context.setPeerRevision(index, incoming.docID, incoming.revID)
        guard result.inserted else { return nil }
        ReplicationCounters.add(ReplicationCounters.revsInserted)
        do {
            try await ConflictResolution(collection: collection)
                .resolveIfConflicted(docID: incoming.docID, pulled: incoming.revID, tree: treeAfter)
            return nil
        } catch {
            return (error as? PeerSyncError) ?? PeerSyncError(.internalError, "\(error)")
        }
    }

    /// A pulled revision handled (stored, or already there): its progress and document event.
    func reportPulled(_ incoming: IncomingRevision, _ docError: PeerSyncError?) {
        context.events.progress(1, 0)
        context.events.documents(DocumentReplication(isPush: false, documents: [replicatedDocument(incoming, docError)]))
    }

    /// A received revision's entry in a document event.
    func replicatedDocument(_ incoming: IncomingRevision, _ error: PeerSyncError?) -> ReplicatedDocument {
        ReplicatedDocument(id: incoming.docID, collection: collection.collection.fullName, flags: incoming.flags, error: error)
    }

    /// A pulled revision that could not be stored (the transaction failed: disk full, I/O
    /// error): its document event carries the error, its change is never checkpointed, the
    /// session fails (``SessionContext/fail(_:)``) and the peer gets HTTP 507 (disk full) or
    /// 500 — never success, never a per-document refusal that a checkpoint would pass.
    private func pulledStorageFailure(_ error: any Error, _ r: IncomingRevision, sequence: String?) -> PeerSyncError {
        let (e, docError) = Self.storageErrors(error, docID: r.docID)
        finishRev(sequence, failed: true)
        // The session is already ending (another failure, or stopped): nothing new to report.
        guard context.failure == nil, !context.isClosed else { return PeerSyncError.reply(.http(503, e.message)) }
        reportError(r.docID, docError, flags: r.flags)
        context.fail(docError)
        return Self.storageReply(e)
    }

    // MARK: - Pushed (passive)

    /// A pushed `rev`: stored only as a fast-forward of the current revision (`HTTP`/409
    /// otherwise; `HTTP`/403 when read-only). A storage failure is logged and answered
    /// `HTTP`/507 (disk full) or 500, so the pusher never checkpoints past it.
    func handlePushedRev(_ request: BLIPRequest) async throws -> BLIPMessage? {
        try await receivePushed(ReceivedRevision(request))
    }

    /// A pushed revision (a `rev`, or an entry of a `revs` batch); see ``handlePushedRev(_:)``.
    func receivePushed(_ request: ReceivedRevision) async throws -> BLIPMessage? {
        ReplicationCounters.add(ReplicationCounters.revsReceived)
        let (docID, revID) = try Self.ids(of: request)
        let claim = holdClaim(docID, revID)
        defer { claim.release() }
        try Self.checkDocumentID(docID)
        if readOnly { throw PeerSyncError.reply(.http(403, "Attempting to push to a pull-only replicator")) }
        var incoming = try await readRevision(request, docID: docID, revID: revID)
        incoming.body = try Self.decodeAttachments(incoming.body)
        let c = collection.collection
        // The pull filter of the served collection (a mesh peer's): a refused revision is
        // acknowledged and not stored, as a refused pulled one is.
        if let filter = collection.config.pullFilter,
           !filter(c.makeDocument(id: docID, revisionID: revID, properties: incoming.body, isDeleted: incoming.deleted),
                   incoming.flags) {
            return nil
        }
        let pins = try await fetchMissingBlobs(of: incoming)
        let outcome = await inserter.insert([incoming.insert(into: c, allowConflict: false)])[0]
        try storePushed(incoming, outcome)
        withExtendedLifetime(pins) {}
        context.events.documents(DocumentReplication(isPush: false, documents: [replicatedDocument(incoming, nil)]))
        return nil
    }

    /// What follows a pushed revision's insertion: the peer's revision noted (the caller
    /// reports its document event). Throws the reply when it was not stored: `HTTP`/507 or
    /// 500 for a storage failure (logged and reported), 409 or 400 for a refusal.
    func storePushed(_ incoming: IncomingRevision, _ outcome: Result<RevisionInsertOutcome, any Error>) throws {
        let c = collection.collection
        let inserted: RevisionInsertOutcome
        do { inserted = try outcome.get() } catch {
            let (e, docError) = Self.storageErrors(error, docID: incoming.docID)
            guard !context.isClosed else { throw PeerSyncError.reply(.http(503, e.message)) }
            // No local replicator reports it: the listener logs it.
            Logger(.replicator).error("could not store \(incoming.docID) in \(c.fullName): \(e.message)")
            reportError(incoming.docID, docError, flags: incoming.flags)
            throw Self.storageReply(e)
        }
        if try Self.inserted(inserted).0.inserted { ReplicationCounters.add(ReplicationCounters.revsInserted) }
        context.setPeerRevision(index, incoming.docID, incoming.revID)
    }

    // MARK: - Reading a rev

    /// The `id` and `rev` properties (`HTTP`/400 when missing or invalid).
    static func ids(of request: ReceivedRevision) throws -> (String, RevisionID) {
        guard let docID = request.properties["id"], let revText = request.properties["rev"],
              let revID = try? RevisionID(revText) else {
            throw PeerSyncError.reply(.http(400, "invalid document or revision ID"))
        }
        return (docID, revID)
    }

    /// `HTTP`/400 for an ID no database can hold (e.g. NUL): a per-document error.
    private static func checkDocumentID(_ docID: String) throws {
        do { try DocumentID.validate(docID) } catch {
            throw PeerSyncError.reply(.http(400, error.message))
        }
    }

    /// The history, deletion flag and body of a `rev`. A `deltaSrc` body is applied to that
    /// base revision's stored body (its legacy form when the delta touches `_attachments`,
    /// notes §8). Throws `HTTP`/400 for a malformed history or a body that is not a JSON
    /// object, `HTTP`/422 for an unknown delta base or a delta that does not apply (the peer
    /// then resends the revision in full), a protocol error for malformed JSON.
    private func readRevision(_ request: ReceivedRevision, docID: String, revID: RevisionID) async throws -> IncomingRevision {
        let props = request.properties
        let history = try Self.history(of: request)
        let parsed = try request.parsedBody()
        var newBody: JSONValue = parsed
        if let src = props["deltaSrc"] {
            let c = collection.collection
            guard let base = try? RevisionID(src), let revs = try await c.revisions(of: docID),
                  let info = revs.revision(base), !info.isDeleted,
                  var baseBody = try await c.revisionBody(docID: docID, revID: base) else {
                throw PeerSyncError.reply(.http(422, "unknown delta base revision \(src)"))
            }
            // A delta touching `_attachments` is against the base's legacy form (notes §8).
            if parsed[LegacyAttachments.key] != nil {
                baseBody = LegacyAttachments.encode(baseBody, revpos: base.generation)
            }
            do { newBody = try JSONDelta.apply(parsed, to: .object(baseBody)) } catch {
                throw PeerSyncError.reply(.http(422, error.message))
            }
        }
        return try Self.incomingRevision(request, docID: docID, revID: revID, history: history, body: newBody)
    }

    /// The revision `history` property lists (`HTTP`/400 when malformed).
    static func history(of request: ReceivedRevision) throws -> [RevisionID] {
        var history: [RevisionID] = []
        if let text = request.properties["history"], !text.isEmpty {
            for part in text.split(separator: ",") {
                guard let r = try? RevisionID(part.trimmingCharacters(in: .whitespaces)) else {
                    throw PeerSyncError.reply(.http(400, "invalid revision history"))
                }
                history.append(r)
            }
        }
        return history
    }

    /// The revision read, with its full `body` (`HTTP`/400 unless a JSON object).
    static func incomingRevision(_ request: ReceivedRevision, docID: String, revID: RevisionID, history: [RevisionID],
                                 body: JSONValue) throws -> IncomingRevision {
        guard let body = body.objectValue else {
            throw PeerSyncError.reply(.http(400, "revision body must be a JSON object"))
        }
        return IncomingRevision(docID: docID, revID: revID, history: history, deleted: request.properties.bool("deleted"),
                                body: body)
    }

    /// The body without its reserved keys, legacy attachments turned into blobs
    /// (``LegacyAttachments/decode(_:)``; `LiteCore`/7, NotFound, for a blob missing from a
    /// present `_attachments`, as LiteCore answers).
    static func decodeAttachments(_ body: [String: JSONValue]) throws -> [String: JSONValue] {
        do { return try LegacyAttachments.decode(body) } catch {
            throw PeerSyncError.reply(BLIPError(domain: "LiteCore", code: 7, message: error.message))
        }
    }

    /// What the inserter did: the result and the tree after the insertion, or `HTTP`/409 (not
    /// a fast-forward) / `HTTP`/400 (refused for this document).
    private static func inserted(_ outcome: RevisionInsertOutcome) throws -> (InsertResult, DocumentRevisions?) {
        switch outcome {
        case .refused(let error) where error.code == .conflict:
            throw PeerSyncError.reply(.http(409, "conflict: the revision's parent is not the current revision"))
        case .refused(let error):
            throw PeerSyncError.reply(.http(400, error.message))
        case .inserted(let result, let tree):
            return (result, tree)
        }
    }

    /// A storage failure as a typed error, and as the document's error (with its ID).
    private static func storageErrors(_ error: any Error, docID: String) -> (PeerSyncError, PeerSyncError) {
        let e = (error as? PeerSyncError) ?? PeerSyncError(.storage, "\(error)")
        return (e, PeerSyncError(e.code, e.message, context: e.context.merging(["docID": docID]) { a, _ in a }))
    }

    /// The answer to a `rev` that could not be stored: `HTTP`/507 for disk full, 500 otherwise.
    private static func storageReply(_ e: PeerSyncError) -> PeerSyncError {
        e.code == .diskFull ? PeerSyncError.reply(.http(507, e.message)) : PeerSyncError.reply(.http(500, e.message))
    }
}

extension Puller.IncomingRevision {
    /// The insertion of this revision into `collection`. `allowConflict`: a pulled revision may
    /// start a branch (the tree after the insertion is read back for conflict handling); a
    /// pushed one must extend the current revision.
    func insert(into collection: Collection, allowConflict: Bool) -> RevisionInsert {
        RevisionInsert(collection: collection, docID: docID, revID: revID, history: history, body: body,
                       deleted: deleted, allowConflict: allowConflict, readBack: allowConflict)
    }
}
