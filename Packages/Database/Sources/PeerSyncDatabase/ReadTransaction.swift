import Foundation
import PeerSyncCore
import PeerSyncStorage

/// The stored body of one revision exactly as the storage holds it: canonical JSON (sorted
/// keys, no whitespace; ``JSONValue/canonicalData`` of the body), read without parsing.
/// A replicator sends these bytes as they are.
@_spi(Replication)
public struct RevisionBodyData: Sendable, Hashable {
    /// The revision the body belongs to.
    public let revID: RevisionID
    /// Whether the revision is a deletion.
    public let isDeleted: Bool
    /// The canonical JSON of the body (`{}` for an empty body). Never parsed by the read.
    public let data: [UInt8]
    /// False only when the body certainly references no blob: the revision is not flagged
    /// as having attachments AND the bytes contain no `"digest"` key (every blob reference,
    /// `@type: blob` or legacy `_attachments` entry, has one). True means "parse and look".
    public let mayReferenceBlobs: Bool

    init(revID: RevisionID, isDeleted: Bool, data: [UInt8], flaggedAttachments: Bool) {
        self.revID = revID
        self.isDeleted = isDeleted
        self.data = data.isEmpty ? Array("{}".utf8) : data
        self.mayReferenceBlobs = flaggedAttachments || RevisionBodyData.containsDigestKey(self.data)
    }

    /// The body parsed (throws `.corrupt` if the stored bytes are not a JSON object).
    public func properties() throws -> [String: JSONValue] {
        let value: JSONValue
        do { value = try JSONValue(parsing: data) } catch {
            throw PeerSyncError(.corrupt, "stored document body is not valid JSON: \(error.message)")
        }
        guard let object = value.objectValue else {
            throw PeerSyncError(.corrupt, "stored document body is not a JSON object")
        }
        return object
    }

    private static let digestKey = Array("\"digest\"".utf8)

    /// Whether `bytes` contain `"digest"` (a plain byte search; canonical JSON never
    /// escapes plain ASCII letters, so a `digest` key always appears literally).
    static func containsDigestKey(_ bytes: [UInt8]) -> Bool {
        let needle = digestKey
        let n = needle.count
        guard bytes.count >= n else { return false }
        return bytes.withUnsafeBufferPointer { hay -> Bool in
            var i = 0
            let last = hay.count - n
            while i <= last {
                // `"digest"`: look for the `d` after a quote, then compare the rest.
                if hay[i] == 0x22, hay[i + 1] == 0x64 {
                    var j = 2
                    while j < n, hay[i + j] == needle[j] { j += 1 }
                    if j == n { return true }
                }
                i += 1
            }
            return false
        }
    }
}

extension DocumentEngine {
    /// False only when canonical JSON `bytes` certainly reference no blob (no `"digest"`
    /// key anywhere): the full tree walk of ``referencesBlobs(_:)`` can be skipped.
    static func mayReferenceBlobs(_ canonical: [UInt8]) -> Bool {
        RevisionBodyData.containsDigestKey(canonical)
    }

    /// The tree and the raw stored body of `revisionID` (the current revision when nil) in
    /// one record read; nil when the document does not exist. The body is nil when the
    /// revision is unknown or its body was dropped.
    func revisionsAndBody(of id: String, revisionID: RevisionID?, _ reader: any StorageReader) throws
        -> (DocumentRevisions, RevisionBodyData?)? {
        guard let record = try documentRecord(id, reader) else { return nil }
        let tree = try loadTree(record)
        guard let revisions = DocumentEngine.documentRevisions(tree, docID: id, sequence: record.sequence) else { return nil }
        var body: RevisionBodyData?
        let index: Int?
        if let revisionID { index = tree.index(of: revisionID) } else { index = tree.winnerIndex }
        if let index, let bytes = tree[index].body {
            let node = tree[index]
            body = RevisionBodyData(revID: node.revID, isDeleted: node.isDeleted, data: bytes,
                                    flaggedAttachments: node.flags.contains(.hasAttachments))
        }
        return (revisions, body)
    }

    func revisionBodyData(id: String, revisionID: RevisionID, _ reader: any StorageReader) throws -> RevisionBodyData? {
        try revisionsAndBody(of: id, revisionID: revisionID, reader)?.1
    }
}

/// The synchronous read operations available inside ``Database/inReadBatch(_:)``: they all
/// run in ONE storage read transaction (a consistent snapshot; nothing can be written).
/// Use it to read many documents with one trip to a reader thread.
///
/// Valid only during the closure it is passed to; afterwards every method throws `.closed`.
/// Not `Sendable`: use it only on the thread that runs the closure (a reader thread).
public final class DatabaseReadTransaction {
    let reader: any StorageReader
    private let database: Database
    private var isValid = true
    /// Collections found to exist in this transaction (checked once, not per read).
    private var checked = CheckedCollections()

    init(reader: any StorageReader, database: Database) {
        self.reader = reader
        self.database = database
    }

    func invalidate() { isValid = false }

    func engine(_ collection: Collection) throws -> DocumentEngine {
        try checked.engine(try uncheckedEngine(collection), reader)
    }

    /// `collection`'s engine without the check that it exists (the caller makes it, see
    /// ``collectionFound(_:)``); the batch's and the database's checks are made.
    func uncheckedEngine(_ collection: Collection) throws -> DocumentEngine {
        guard isValid else { throw PeerSyncError(.closed, "the read batch has ended") }
        guard collection.database === database else {
            throw PeerSyncError(.invalidArgument, "collection belongs to another database",
                                context: ["collection": collection.fullName])
        }
        return collection.engine
    }

    /// Records that the collection of `engine` exists in this snapshot: a record that only an
    /// existing collection has was read (deleting a collection drops its keyspaces in the same
    /// transaction), so the next operations skip the metadata lookup.
    func collectionFound(_ engine: DocumentEngine) { checked.found(engine.spec) }

    /// Whether the collection of `engine` was already found to exist in this transaction.
    func isCollectionFound(_ engine: DocumentEngine) -> Bool { checked.contains(engine.spec) }

    /// The current revision of a document, or nil if missing or deleted.
    public func document(id: String, in collection: Collection) throws -> Document? {
        try engine(collection).document(id: id, reader)
    }

    /// Calls `body` with every document of `collection`, in document-ID order (UTF-8 byte
    /// order), until it returns `false`. Deleted documents (tombstones) are included only when
    /// `includeDeleted` is true (default false). Bodies are parsed lazily, when `body` reads
    /// ``Document/properties``. This is the scan a query runs (PeerSyncQuery).
    ///
    /// Errors: `.notFound` if the collection does not exist, `.corrupt` for a stored body that
    /// is not a JSON object, `.closed` after the batch ended; errors `body` throws are rethrown.
    public func forEachDocument(in collection: Collection, includeDeleted: Bool = false,
                                _ body: (Document) throws -> Bool) throws {
        let engine = try engine(collection)
        try reader.enumerate(in: engine.spec.documentsKeyspace) { record in
            if !includeDeleted && record.flags.contains(.deleted) { return true }
            return try body(try engine.makeDocument(record))
        }
    }

    /// The expiration time of document `id`, nil if none is set (see
    /// ``Collection/getDocumentExpiration(id:)``). Errors: `.notFound` for a missing
    /// collection, `.invalidDocumentID` for an invalid ID, `.closed` after the batch ended.
    public func expiration(ofDocument id: String, in collection: Collection) throws -> Date? {
        try engine(collection).expiration(id: id, reader)
    }

    /// Like ``Collection/revisions(of:)``.
    @_spi(Replication)
    public func revisions(of docID: String, in collection: Collection) throws -> DocumentRevisions? {
        try engine(collection).revisions(of: docID, reader)
    }

    /// Like ``Collection/revisionBody(docID:revID:)``.
    @_spi(Replication)
    public func revisionBody(docID: String, revID: RevisionID, in collection: Collection) throws -> [String: JSONValue]? {
        try engine(collection).revisionBody(id: docID, revisionID: revID, reader)
    }

    /// Like ``Collection/revisionBodyData(docID:revID:)``: the stored bytes, not parsed.
    @_spi(Replication)
    public func revisionBodyData(docID: String, revID: RevisionID, in collection: Collection) throws -> RevisionBodyData? {
        try engine(collection).revisionBodyData(id: docID, revisionID: revID, reader)
    }

    /// The document's revision tree and the stored (unparsed) body of `revID` — of the current
    /// revision, tombstones included, when `revID` is nil — from one record read. Nil when the
    /// document does not exist; the body is nil when that revision is unknown or its body
    /// was dropped.
    @_spi(Replication)
    public func revisionsAndBody(of docID: String, revID: RevisionID? = nil, in collection: Collection) throws
        -> (revisions: DocumentRevisions, body: RevisionBodyData?)? {
        guard let (revs, body) = try engine(collection).revisionsAndBody(of: docID, revisionID: revID, reader) else {
            return nil
        }
        return (revs, body)
    }
}

extension Database {
    /// Runs `body` in one storage READ transaction (a snapshot; unlike ``inBatch(_:)`` no
    /// write transaction is opened, nothing is committed and listeners are not polled).
    /// Errors it throws are rethrown.
    ///
    /// Isolation: a read — `body` runs on one of the database's reader threads, concurrently
    /// with other reads and with the writer, against a snapshot that includes every write
    /// that returned before this call. It holds a reader thread (and, on LMDB, an old
    /// snapshot's pages) while it runs: keep it short and do not await in it.
    public func inReadBatch<R: Sendable>(_ body: sending @escaping (DatabaseReadTransaction) throws -> R) async throws -> R {
        let box = UncheckedBox(body)
        return try await read { reader in
            let transaction = DatabaseReadTransaction(reader: reader, database: self)
            defer { transaction.invalidate() }
            return try box.value(transaction)
        }
    }
}

extension Database {
    /// ``inReadBatch(_:)`` for a SHORT read (a query's run): `body` runs on the calling
    /// thread when the storage can begin the read transaction without waiting
    /// (``Storage/readWithoutWaiting(_:)``: LMDB and in-memory snapshots never wait; SQLite
    /// only on an idle reader connection and while no lock is in the way), else on a reader
    /// thread exactly as ``inReadBatch(_:)`` does. Either way `body` runs once, against a
    /// snapshot that includes every write that returned before this call and no write in
    /// progress. After a read on the calling thread the task yields (`Task.yield()`) when no
    /// such yield happened on this thread for 1 ms (`InlineReadYield`), so a loop of such reads
    /// lets the other tasks of its executor run at least once per millisecond and read, as a
    /// loop of hops does — without a yield, and its hand-over to another thread of the pool,
    /// after every read of a few microseconds.
    ///
    /// Isolation: a read. `body` must be short, synchronous CPU work over the transaction
    /// (it may run on Swift's cooperative pool): it must not block, wait for another thread,
    /// or call back into the database's async API. Errors `body` throws are rethrown.
    @_spi(Indexing)
    public func inShortReadBatch<R: Sendable>(_ body: sending @escaping (DatabaseReadTransaction) throws -> R) async throws -> R {
        let box = UncheckedBox(body)
        let inline = Result {
            try readWithoutWaiting { reader in
                let transaction = DatabaseReadTransaction(reader: reader, database: self)
                defer { transaction.invalidate() }
                return try box.value(transaction)
            }
        }
        switch inline {
        case .success(let value?):
            // It ran here: let the executor's other tasks run (at least once a millisecond),
            // as they would while a reader thread did this read.
            if InlineReadYield.isDue() { await Task.yield() }
            return value
        case .failure(let error):
            if InlineReadYield.isDue() { await Task.yield() }
            throw error
        case .success(nil):
            break   // the storage would have had to wait: hop
        }
        return try await read { reader in
            let transaction = DatabaseReadTransaction(reader: reader, database: self)
            defer { transaction.invalidate() }
            return try box.value(transaction)
        }
    }
}

extension Collection {
    /// The stored body of one revision as canonical JSON bytes, not parsed (nil if the
    /// revision is unknown or its body was dropped). See ``RevisionBodyData``.
    ///
    /// Isolation: a read (see "Isolation" on ``Database``).
    @_spi(Replication)
    public func revisionBodyData(docID: String, revID: RevisionID) async throws -> RevisionBodyData? {
        let engine = self.engine
        return try await database.read { try engine.revisionBodyData(id: docID, revisionID: revID, $0) }
    }
}

/// The collections a batch has already found in its transaction: their engines skip the
/// per-operation existence check (collections are not created or deleted inside a batch).
struct CheckedCollections {
    private var specs: Set<CollectionSpec> = []
    /// The collection checked last: a batch mostly reads one, and comparing its two names is
    /// cheaper than hashing them into `specs` on every operation.
    private var last: CollectionSpec?

    mutating func engine(_ engine: DocumentEngine, _ reader: any StorageReader) throws -> DocumentEngine {
        var engine = engine
        let key = engine.spec
        if last != key {
            if !specs.contains(key) {
                try engine.requireCollection(reader)
                specs.insert(key)
            }
            last = key
        }
        engine.collectionChecked = true
        return engine
    }

    /// Records that `spec`'s collection exists in this transaction, found without a lookup of
    /// its own (a record that only an existing collection has was read).
    mutating func found(_ spec: CollectionSpec) {
        specs.insert(spec)
        last = spec
    }

    /// Whether `spec`'s collection was already found in this transaction.
    func contains(_ spec: CollectionSpec) -> Bool { last == spec || specs.contains(spec) }
}
