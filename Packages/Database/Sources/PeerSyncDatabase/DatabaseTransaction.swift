import Foundation
import PeerSyncCore
import PeerSyncStorage

/// The synchronous operations available inside ``Database/inBatch(_:)``: they all run in one
/// storage write transaction, committed together when the batch closure returns and rolled
/// back when it throws. Reads see the batch's own changes.
///
/// Valid only during the closure it is passed to; afterwards every method throws `.closed`.
/// Not `Sendable`: use it only on the thread that runs the closure (the writer queue's).
public final class DatabaseTransaction {
    private let writer: any StorageWriter
    private let database: Database
    private var isValid = true
    /// Collections found to exist in this transaction (checked once, not per operation).
    private var checked = CheckedCollections()

    init(writer: any StorageWriter, database: Database) {
        self.writer = writer
        self.database = database
    }

    func invalidate() { isValid = false }

    private func engine(_ collection: Collection) throws -> DocumentEngine {
        guard isValid else { throw PeerSyncError(.closed, "the batch has ended") }
        guard collection.database === database else {
            throw PeerSyncError(.invalidArgument, "collection belongs to another database",
                                context: ["collection": collection.fullName])
        }
        return try checked.engine(collection.engine, writer)
    }

    /// The current revision of a document, or nil if missing or deleted.
    public func document(id: String, in collection: Collection) throws -> Document? {
        try engine(collection).document(id: id, writer)
    }

    /// Like ``Collection/save(document:concurrencyControl:)->Bool``.
    @discardableResult
    public func save(document: inout MutableDocument, in collection: Collection,
                     concurrencyControl: ConcurrencyControl = .lastWriteWins) throws -> Bool {
        try engine(collection).save(&document, concurrencyControl: concurrencyControl, deleting: false, writer)
    }

    /// Like ``Collection/save(document:conflictHandler:)``.
    @discardableResult
    public func save(document: inout MutableDocument, in collection: Collection,
                     conflictHandler: (inout MutableDocument, Document?) throws -> Bool) throws -> Bool {
        try engine(collection).save(&document, conflictHandler: conflictHandler, writer)
    }

    /// Like ``Collection/delete(document:concurrencyControl:)-(Document,_)``.
    @discardableResult
    public func delete(document: Document, in collection: Collection,
                       concurrencyControl: ConcurrencyControl = .lastWriteWins) throws -> Bool {
        var doc = document.toMutable()
        return try engine(collection).save(&doc, concurrencyControl: concurrencyControl, deleting: true, writer)
    }

    /// Like ``Collection/purge(id:)``.
    public func purge(id: String, in collection: Collection) throws {
        try engine(collection).purge(id: id, writer)
    }

    /// Like ``Collection/insertRevision(docID:revID:history:body:deleted:allowConflict:)``:
    /// a replicator inserts a batch of pulled revisions in one transaction.
    @_spi(Replication)
    @discardableResult
    public func insertRevision(docID: String, revID: RevisionID, history: [RevisionID],
                               body: [String: JSONValue], deleted: Bool, in collection: Collection,
                               allowConflict: Bool = true) throws -> InsertResult {
        try engine(collection).insertRevision(id: docID, revisionID: revID, history: history, body: body,
                                               deleted: deleted, allowConflict: allowConflict, writer)
    }

    /// Like ``insertRevision(docID:revID:history:body:deleted:in:allowConflict:)``, also
    /// returning the document's revision tree as written (what ``revisions(of:in:)`` would
    /// read next) without reading it again; the tree is nil when nothing was added.
    @_spi(Replication)
    public func insertRevisionReturningRevisions(docID: String, revID: RevisionID, history: [RevisionID],
                                                 body: [String: JSONValue], deleted: Bool, in collection: Collection,
                                                 allowConflict: Bool = true) throws
        -> (result: InsertResult, revisions: DocumentRevisions?) {
        let (result, revisions) = try engine(collection).insertRevision(
            id: docID, revisionID: revID, history: history, body: body, deleted: deleted,
            allowConflict: allowConflict, readBack: true, writer)
        return (result, revisions)
    }

    /// Like ``Collection/revisions(of:)``.
    @_spi(Replication)
    public func revisions(of docID: String, in collection: Collection) throws -> DocumentRevisions? {
        try engine(collection).revisions(of: docID, writer)
    }
}
