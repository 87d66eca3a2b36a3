import Foundation
import PeerSyncCore
import PeerSyncStorage

/// A named group of documents in a scope (Couchbase Lite's `Collection`).
///
/// Obtain collections from a ``Database``; a `Collection` is a lightweight handle, safe to
/// share between tasks. Each method says whether it is a read (run on one of the database's
/// reader threads, against a snapshot that includes every write that returned before the
/// call) or a write (run on the database's writer queue, committed when it returns); see
/// "Isolation" on ``Database``. Either suspends the caller until done. Operations on a
/// collection that was deleted throw `.notFound`; on a closed database, `.closed`.
public final class Collection: Sendable, Hashable, CustomStringConvertible {
    let spec: CollectionSpec
    /// The database the collection belongs to.
    public let database: Database

    init(spec: CollectionSpec, database: Database) {
        self.spec = spec
        self.database = database
    }

    /// The collection name.
    public var name: String { spec.name }
    /// The collection's scope.
    public var scope: Scope { Scope(name: spec.scope, database: database) }
    /// `<scope>.<collection>`.
    public var fullName: String { spec.fullName }

    var engine: DocumentEngine { database.engine(spec) }

    /// The number of documents, not counting deleted ones.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public var count: Int {
        get async throws {
            let engine = self.engine
            return try await database.read { reader in
                try engine.requireCollection(reader)
                return try reader.count(in: engine.spec.documentsKeyspace, includeDeleted: false)
            }
        }
    }

    /// The highest sequence assigned in this collection so far (0 if none).
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public var lastSequence: UInt64 {
        get async throws {
            let engine = self.engine
            return try await database.read { reader in
                try engine.requireCollection(reader)
                return try reader.lastSequence(in: engine.spec.documentsKeyspace)
            }
        }
    }

    // MARK: Documents

    /// The current revision of the document, or nil if it does not exist or is deleted.
    /// Throws `.invalidDocumentID` for an ID that `DocumentID.validate(_:)` refuses (empty,
    /// over 255 bytes, or holding a control character such as NUL).
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func document(id: String) async throws -> Document? {
        let engine = self.engine
        return try await database.read { try engine.document(id: id, $0) }
    }

    /// Saves a document as a new revision, child of the revision it was read at.
    ///
    /// If the stored document changed since `document` was read, `.lastWriteWins` (default)
    /// saves anyway, as a child of the current revision, and `.failOnConflict` changes nothing
    /// and returns `false`. A new document may replace a deleted one. Blobs set on the
    /// document are stored first. On success `document` gets its new revision ID and sequence.
    ///
    /// Throws `.invalidDocumentID`, `.invalidArgument` (reserved `_` key, other collection's
    /// document), `.tooLarge` — and then nothing is changed.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func save(document: inout MutableDocument,
                     concurrencyControl: ConcurrencyControl = .lastWriteWins) async throws -> Bool {
        let engine = self.engine
        let input = document
        let (saved, output) = try await database.write { writer in
            var doc = input
            let saved = try engine.save(&doc, concurrencyControl: concurrencyControl, deleting: false, writer)
            return (saved, doc)
        }
        document = output
        return saved
    }

    /// Saves a document given by value and returns it as saved: the form for code that cannot
    /// pass a variable `inout` to an `async` call, such as a top-level variable in
    /// `main.swift` (Swift 6 refuses `&doc` there):
    ///
    /// ```swift
    /// let saved = try await tasks.save(document: MutableDocument(id: "t1", data: ["title": "pid \(pid)"]))
    /// ```
    ///
    /// The same save as ``save(document:concurrencyControl:)->Bool`` with `.lastWriteWins`, which
    /// never refuses: the returned document has the new ``MutableDocument/revisionID`` and
    /// sequence, so editing and saving it again makes a child revision. Errors as there.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func save(document: MutableDocument) async throws -> MutableDocument {
        var saved = document
        try await save(document: &saved, concurrencyControl: .lastWriteWins)
        return saved
    }

    /// Saves a document given by value with the given concurrency control, and returns it as
    /// saved — or nil when `.failOnConflict` refused the save because the stored document
    /// changed since `document` was read (then nothing is changed). Errors as in
    /// ``save(document:concurrencyControl:)``.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    public func save(document: MutableDocument, concurrencyControl: ConcurrencyControl) async throws -> MutableDocument? {
        var saved = document
        return try await save(document: &saved, concurrencyControl: concurrencyControl) ? saved : nil
    }

    /// Saves a document, calling `conflictHandler` if the stored document changed since
    /// `document` was read. The handler gets the document being saved (to edit) and the
    /// current stored revision (nil if it is deleted); returning `true` saves the edited
    /// document on top of the current revision, `false` gives up (the method returns false).
    /// The handler runs on the writer queue inside the write transaction: keep it quick.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func save(document: inout MutableDocument,
                     conflictHandler: @escaping @Sendable (inout MutableDocument, Document?) throws -> Bool) async throws -> Bool {
        let engine = self.engine
        let input = document
        let (saved, output) = try await database.write { writer in
            var doc = input
            let saved = try engine.save(&doc, conflictHandler: conflictHandler, writer)
            return (saved, doc)
        }
        document = output
        return saved
    }

    /// Deletes a document: its new current revision is a tombstone, which replicates.
    /// Concurrency control as in ``save(document:concurrencyControl:)->Bool``; deleting an already
    /// deleted document does nothing. Throws `.notFound` if the document does not exist.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func delete(document: Document, concurrencyControl: ConcurrencyControl = .lastWriteWins) async throws -> Bool {
        try await delete(document: document.toMutable(), concurrencyControl: concurrencyControl)
    }

    /// Deletes the document a mutable document was read from or saved as.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @discardableResult
    public func delete(document: MutableDocument, concurrencyControl: ConcurrencyControl = .lastWriteWins) async throws -> Bool {
        let engine = self.engine
        return try await database.write { writer in
            var doc = document
            return try engine.save(&doc, concurrencyControl: concurrencyControl, deleting: true, writer)
        }
    }

    /// Removes a document and its whole history, without a tombstone (nothing replicates).
    /// Listeners are notified. Throws `.notFound` if it does not exist, `.invalidDocumentID`
    /// for an ID that `DocumentID.validate(_:)` refuses.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    public func purge(id: String) async throws {
        let engine = self.engine
        try await database.write { try engine.purge(id: id, $0) }
    }

    /// Purges the document (see ``purge(id:)``).
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    public func purge(document: Document) async throws {
        try await purge(id: document.id)
    }

    /// Sets (or with nil, clears) the time at which the document is purged automatically.
    /// Expired documents are purged by a timer while the database is open and when it opens;
    /// listeners are notified. Throws `.notFound` if the document does not exist.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    public func setDocumentExpiration(id: String, expiration: Date?) async throws {
        let engine = self.engine
        let database = self.database
        try await database.write { writer in
            try engine.setExpiration(id: id, date: expiration, writer)
            database.noteExpiration(expiration)
        }
    }

    /// The document's expiration time, or nil if none is set.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func getDocumentExpiration(id: String) async throws -> Date? {
        let engine = self.engine
        return try await database.read { try engine.expiration(id: id, $0) }
    }

    /// Live (not deleted) documents in document-ID order (UTF-8 byte order), skipping
    /// `offset` of them and returning at most `limit`.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func allDocuments(limit: Int? = nil, offset: Int = 0) async throws -> [Document] {
        let engine = self.engine
        return try await database.read { try engine.allDocuments(limit: limit, offset: max(0, offset), $0) }
    }

    /// IDs of all live documents, in order.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func documentIDs() async throws -> [String] {
        let engine = self.engine
        return try await database.read { try engine.documentIDs($0) }
    }

    /// The changes feed: every document changed after sequence `since`, once each at its
    /// latest sequence, in sequence order, at most `limit` of them. Tombstones are included;
    /// purged documents are not.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func changes(since: UInt64, limit: Int? = nil) async throws -> [ChangeEntry] {
        let engine = self.engine
        return try await database.read { try engine.changes(since: since, limit: limit, $0) }
    }

    /// The IDs of the documents in conflict: another live leaf beside the current revision
    /// (a pulled branch whose resolution did not finish — the session ended, or the resolver
    /// threw). The replicator resolves them when it starts pulling (LiteCore's
    /// `findExistingConflicts`). A scan of the collection's documents.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func conflictedDocumentIDs() async throws -> [String] {
        let engine = self.engine
        return try await database.read { try engine.conflictedDocumentIDs($0) }
    }

    public var description: String { "Collection(\(fullName))" }

    public static func == (lhs: Collection, rhs: Collection) -> Bool {
        lhs.spec == rhs.spec && lhs.database === rhs.database
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(spec)
        hasher.combine(ObjectIdentifier(database))
    }
}

// MARK: - Replicator support

extension Collection {
    /// The document's whole revision tree, or nil if the document does not exist.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func revisions(of docID: String) async throws -> DocumentRevisions? {
        let engine = self.engine
        return try await database.read { try engine.revisions(of: docID, $0) }
    }

    /// The body of one revision, or nil if the revision is unknown or its body was dropped.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func revisionBody(docID: String, revID: RevisionID) async throws -> [String: JSONValue]? {
        let engine = self.engine
        return try await database.read { try engine.revisionBody(id: docID, revisionID: revID, $0) }
    }

    /// The current revision including tombstones (nil only if the document does not exist).
    /// Throws `.invalidDocumentID` like ``document(id:)``.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func documentIncludingDeleted(id: String) async throws -> Document? {
        let engine = self.engine
        return try await database.read { try engine.documentIncludingDeleted(id: id, $0) }
    }

    /// Inserts a revision received from a peer together with its history (CouchDB
    /// `new_edits=false`): `history` lists its ancestors parent first, each one generation
    /// older. Unknown ancestors are added without bodies. A revision that does not extend a
    /// leaf becomes a branch flagged `conflict` (the local revision stays current and the
    /// document is flagged conflicted) — or, with `allowConflict: false`, throws `.conflict`
    /// (a push in no-conflicts mode). Inserting a known revision changes nothing.
    /// The body may keep a legacy `_attachments` key; other `_` keys throw `.invalidArgument`.
    /// Blobs the body references must already be stored.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @_spi(Replication)
    @discardableResult
    public func insertRevision(docID: String, revID: RevisionID, history: [RevisionID],
                               body: [String: JSONValue], deleted: Bool,
                               allowConflict: Bool = true) async throws -> InsertResult {
        let engine = self.engine
        return try await database.write { writer in
            try engine.insertRevision(id: docID, revisionID: revID, history: history, body: body,
                                      deleted: deleted, allowConflict: allowConflict, writer)
        }
    }

    /// Resolves a conflict between two leaf revisions (LiteCore's `resolveConflict`): the
    /// losing branch is removed up to the common ancestor, and the winning branch stops being
    /// a conflict. With `mergedBody`, a new revision with that body (a tombstone if
    /// `mergedDeleted`) is added as a child of the winning revision. Returns the document's
    /// new current revision. Throws `.invalidArgument` unless both are distinct leaves.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @_spi(Replication)
    @discardableResult
    public func resolveConflict(docID: String, winningRevID: RevisionID, losingRevID: RevisionID,
                                mergedBody: [String: JSONValue]? = nil, mergedDeleted: Bool = false) async throws -> RevisionID {
        let engine = self.engine
        return try await database.write { writer in
            try engine.resolveConflict(id: docID, winning: winningRevID, losing: losingRevID,
                                       mergedBody: mergedBody, mergedDeleted: mergedDeleted, writer)
        }
    }

    /// A ``Document`` value for a revision that is not (or not yet) current: a pulled
    /// revision shown to a pull filter, or either side of a conflict shown to a resolver.
    /// Nothing is read or saved; its blobs resolve against this database.
    ///
    /// Isolation: no storage access; returns at once.
    @_spi(Replication)
    public func makeDocument(id: String, revisionID: RevisionID, properties: [String: JSONValue],
                             isDeleted: Bool) -> Document {
        Document(id: id, revisionID: revisionID.description, sequence: 0, isDeleted: isDeleted,
                 collectionName: spec.name, scopeName: spec.scope, properties: properties,
                 blobStore: database.blobStore)
    }

    /// Closes a conflict without purging anything (the replicator's resolution, Couchbase
    /// Lite's rule): the losing leaf, if given, is closed — a live one gets a tombstone child
    /// flagged ``RevisionFlags/closed``, a deleted one is flagged closed itself — so it never
    /// becomes the current revision again and is never replicated; both branches stop being
    /// flagged as conflicts; and with `mergedBody` a new revision (a tombstone if
    /// `mergedDeleted`) is added as a child of the winning revision. The replicator always
    /// passes the *remote* revision as the winner, so what it pushes afterwards is a plain
    /// fast-forward for the peer. A winning revision that was closed here earlier (a peer
    /// still has it as its current revision) is reopened first: every branch under it that
    /// ends only in closed leaves (which never left this database) is removed. With `losing` nil, only the
    /// conflict flag of the winning branch is cleared. Returns the new current revision.
    /// Throws `.invalidArgument` unless the losing revision is another leaf and the winning
    /// one is a leaf (after reopening) or gets `mergedBody` as a child.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @_spi(Replication)
    @discardableResult
    public func closeConflict(docID: String, winningRevisionID: RevisionID, losingRevisionID: RevisionID?,
                              mergedBody: [String: JSONValue]? = nil, mergedDeleted: Bool = false) async throws -> RevisionID {
        let engine = self.engine
        let closed = try await database.write { writer in
            try engine.closeConflict(id: docID, winning: winningRevisionID, losing: losingRevisionID,
                                     mergedBody: mergedBody, mergedDeleted: mergedDeleted, writer)
        }
        database.closedConflicts.withLock { $0 += 1 }
        return closed
    }

    /// A local (non-replicated) document of this collection (e.g. a checkpoint), or nil.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func getLocal(id: String) async throws -> LocalDocument? {
        let keyspace = spec.localKeyspace
        let engine = self.engine
        return try await database.read { reader in
            try engine.requireCollection(reader)
            return try LocalStore(keyspace: keyspace).get(id: id, reader)
        }
    }

    /// Creates or replaces a local document. With `ifRevision`, throws `.conflict` unless the
    /// stored revision is `ifRevision` (`""` = must not exist yet).
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @_spi(Replication)
    @discardableResult
    public func putLocal(id: String, json: [String: JSONValue], ifRevision: String? = nil) async throws -> LocalDocument {
        let keyspace = spec.localKeyspace
        let engine = self.engine
        let max = database.config.maxBodySize
        return try await database.write { writer in
            try engine.requireCollection(writer)
            return try LocalStore(keyspace: keyspace).put(id: id, properties: json, ifRevision: ifRevision,
                                                          maxBodySize: max, writer)
        }
    }

    /// Deletes a local document; `.notFound` if missing, `.conflict` if `ifRevision` differs.
    ///
    /// Isolation: a write (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func deleteLocal(id: String, ifRevision: String? = nil) async throws {
        let keyspace = spec.localKeyspace
        let engine = self.engine
        try await database.write { writer in
            try engine.requireCollection(writer)
            try LocalStore(keyspace: keyspace).delete(id: id, ifRevision: ifRevision, writer)
        }
    }
}

/// A namespace of collections (Couchbase Lite's `Scope`).
public final class Scope: Sendable, Hashable, CustomStringConvertible {
    /// The scope name.
    public let name: String
    /// The database the scope belongs to.
    public let database: Database

    init(name: String, database: Database) {
        self.name = name
        self.database = database
    }

    /// The collections of this scope, sorted by name.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func collections() async throws -> [Collection] {
        try await database.collections(scope: name)
    }

    /// The collection `name` of this scope, or nil.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    public func collection(name: String) async throws -> Collection? {
        try await database.collection(name: name, scope: self.name)
    }

    public var description: String { "Scope(\(name))" }

    public static func == (lhs: Scope, rhs: Scope) -> Bool { lhs.name == rhs.name && lhs.database === rhs.database }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(ObjectIdentifier(database))
    }
}
