import Foundation
import PeerSyncCore
import PeerSyncStorage

/// All document logic of one collection, run synchronously inside a storage transaction on
/// the database's queue.
///
/// Record layout (keyspace ``CollectionSpec/documentsKeyspace``, key = document ID):
/// - `version`: the current revision ID as ASCII text;
/// - `body`: the current revision's body, canonical JSON;
/// - `extra`: the revision tree (``RevTree/encode()``);
/// - `flags`: `.deleted` when the current revision is a tombstone, `.conflicted` when another
///   live leaf exists, `.hasAttachments` when the current body references blobs.
struct DocumentEngine {
    let spec: CollectionSpec
    let maxRevTreeDepth: Int
    let maxBodySize: Int
    let blobStore: BlobStore
    /// The database's per-transaction index upkeep (see ``IndexUpkeepCache``).
    let indexUpkeep: IndexUpkeepCache
    /// Set by a batch that already checked, in its own transaction, that the collection
    /// exists: ``requireCollection(_:)`` then skips its metadata read (one per operation).
    var collectionChecked = false

    /// How many generations below each leaf keep their bodies (for delta sync).
    static let ancestorBodyDepth = 1
    /// The largest generation accepted from a peer (2^53).
    static let maxGeneration: UInt64 = 1 << 53

    // MARK: Reading

    func requireCollection(_ reader: any StorageReader) throws {
        if collectionChecked { return }
        guard try reader.get(spec.metaKey, in: Meta.keyspace) != nil else {
            throw PeerSyncError(.notFound, "collection does not exist").with(spec)
        }
    }

    func loadTree(_ record: Record) throws(PeerSyncError) -> RevTree {
        do {
            return try RevTree.decode(record.extra, winnerBody: record.body)
        } catch {
            throw error.with("docID", record.key).with(spec)
        }
    }

    func parseBody(_ bytes: [UInt8], docID: String) throws(PeerSyncError) -> [String: JSONValue] {
        if bytes.isEmpty { return [:] }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            throw PeerSyncError(.corrupt, "stored document body is not valid JSON: \(error.message)",
                                context: ["docID": docID]).with(spec)
        }
        guard let object = value.objectValue else {
            throw PeerSyncError(.corrupt, "stored document body is not a JSON object", context: ["docID": docID]).with(spec)
        }
        return object
    }

    /// Throws `.corrupt` when `record`'s stored body does not even look like a JSON object
    /// (``StoredBody/looksLikeObject(_:)``): the check made instead of a parse on every read.
    func checkStoredBody(_ record: Record) throws(PeerSyncError) {
        guard StoredBody.looksLikeObject(record.body) else {
            throw PeerSyncError(.corrupt, "stored document body is not a JSON object", context: ["docID": record.key]).with(spec)
        }
    }

    /// The document of a record, its body left unparsed (see ``StoredBody``). Throws
    /// `.corrupt` when the stored body does not even look like a JSON object.
    func makeDocument(_ record: Record) throws(PeerSyncError) -> Document {
        try checkStoredBody(record)
        return Document(id: record.key, revisionID: String(decoding: record.version, as: UTF8.self),
                        sequence: record.sequence, isDeleted: record.flags.contains(.deleted),
                        collectionName: spec.name, scopeName: spec.scope,
                        storedBody: StoredBody(data: record.body, docID: record.key, collection: spec.fullName),
                        blobStore: blobStore)
    }

    /// The record of document `id`, or nil; throws `.notFound` if the collection does not
    /// exist. A stored document proves its collection exists (deleting a collection drops its
    /// documents in the same transaction), so the collection is only looked up on a miss, to
    /// tell "no such document" from "no such collection": one storage read per hit.
    func documentRecord(_ id: String, _ reader: any StorageReader) throws -> Record? {
        try documentRecord(id, in: spec.documentsKeyspace, reader)
    }

    /// ``documentRecord(_:_:)`` with the documents keyspace's name given (`spec.documentsKeyspace`,
    /// a string built on every use): a caller reading many documents builds it once.
    /// `withoutExtra`: the record without its revision tree (``Record/extra`` empty; see
    /// `StorageReader.getWithoutExtra`), for a reader of the current revision only.
    func documentRecord(_ id: String, in documentsKeyspace: String, _ reader: any StorageReader,
                        withoutExtra: Bool = false) throws -> Record? {
        let found = withoutExtra ? try reader.getWithoutExtra(id, in: documentsKeyspace) : try reader.get(id, in: documentsKeyspace)
        guard let record = found else {
            try requireCollection(reader)
            return nil
        }
        return record
    }

    /// The current revision, including tombstones.
    func documentIncludingDeleted(id: String, _ reader: any StorageReader) throws -> Document? {
        try validateID(id)
        return try documentRecord(id, reader).map { record throws(PeerSyncError) in try makeDocument(record) }
    }

    /// The current revision, or nil if the document does not exist or is deleted.
    func document(id: String, _ reader: any StorageReader) throws -> Document? {
        guard let doc = try documentIncludingDeleted(id: id, reader), !doc.isDeleted else { return nil }
        return doc
    }

    // MARK: Validation

    /// Checks a body before it is stored; returns its canonical JSON.
    func validatedBody(_ properties: [String: JSONValue], docID: String,
                       allowLegacyAttachments: Bool = false) throws(PeerSyncError) -> [UInt8] {
        for key in properties.keys where key.hasPrefix("_") {
            if allowLegacyAttachments && key == "_attachments" { continue }
            throw PeerSyncError(.invalidArgument, "top-level property names starting with '_' are reserved",
                                context: ["docID": docID, "key": key]).with(spec)
        }
        let body = JSONValue.object(properties).canonicalData
        if body.count > maxBodySize {
            throw PeerSyncError(.tooLarge, "document body is \(body.count) bytes, the maximum is \(maxBodySize)",
                                context: ["docID": docID]).with(spec)
        }
        return body
    }

    /// ``DocumentID/validate(_:)`` with this collection in the error's context: every public
    /// entry point taking a document ID (reads, saves, purges, expirations, replication
    /// inserts) calls it first.
    func validateID(_ id: String) throws(PeerSyncError) {
        do { try DocumentID.validate(id) } catch { throw error.with(spec) }
    }

    // MARK: Writing

    /// Prunes the tree and writes the record; returns the new sequence.
    /// `previous`: the document's record as this transaction read it, when the caller has it
    /// (`.some(nil)`: none), so index upkeep need not read it again; `.none`: read it here.
    /// `saved`: a body the caller encoded (canonical JSON) with the properties it encoded, so
    /// that when it is the current body, index upkeep evaluates those properties instead of
    /// parsing it again.
    @discardableResult
    func writeTree(_ tree: inout RevTree, docID: String, _ writer: any StorageWriter,
                   previous: Record?? = .none,
                   saved: (body: [UInt8], properties: [String: JSONValue])? = nil) throws -> UInt64 {
        tree.prune(maxDepth: maxRevTreeDepth)
        tree.dropOldBodies(ancestorDepth: DocumentEngine.ancestorBodyDepth)
        guard let w = tree.winnerIndex, let body = tree[w].body else {
            throw PeerSyncError(.internalError, "current revision has no body", context: ["docID": docID]).with(spec)
        }
        let winner = tree[w]
        var flags: RecordFlags = []
        if winner.isDeleted { flags.insert(.deleted) }
        if tree.hasConflict { flags.insert(.conflicted) }
        if winner.flags.contains(.hasAttachments) { flags.insert(.hasAttachments) }
        let record = Record(key: docID, flags: flags, version: Array(winner.revID.description.utf8),
                            body: body, extra: tree.encode())
        // Value indexes change in this same transaction (see Indexes.swift).
        guard let indexes = try indexUpkeep.maintenance(spec, writer) else {
            return try writer.put(record, in: spec.documentsKeyspace)
        }
        let old = try previous ?? writer.get(docID, in: spec.documentsKeyspace)
        let sequence = try writer.put(record, in: spec.documentsKeyspace)
        // The winner may be another branch than the one saved (a tombstone loses to a live
        // leaf): the properties stand for the body only when they are its bytes.
        let properties = saved.flatMap { $0.body == body ? $0.properties : nil }
        try indexes.documentChanged(id: docID, old: old, new: record, newProperties: properties, writer)
        return sequence
    }

    /// A local save or delete (see ``Collection/save(document:concurrencyControl:)``).
    /// Returns false on a conflict under `.failOnConflict`.
    func save(_ doc: inout MutableDocument, concurrencyControl: ConcurrencyControl, deleting: Bool,
              _ writer: any StorageWriter) throws -> Bool {
        try requireCollection(writer)
        try validateID(doc.id)
        if let name = doc.collectionName, let scope = doc.scopeName, name != spec.name || scope != spec.scope {
            throw PeerSyncError(.invalidArgument, "document belongs to another collection",
                                context: ["docID": doc.id, "documentCollection": "\(scope).\(name)"]).with(spec)
        }
        let properties = deleting ? [:] : doc.properties
        let body = try validatedBody(properties, docID: doc.id)

        let existing = try writer.get(doc.id, in: spec.documentsKeyspace)
        var tree = try existing.map { record throws(PeerSyncError) in try loadTree(record) } ?? RevTree()
        let current = tree.winnerIndex
        var base = current
        let isConflict: Bool
        if let revText = doc.revisionID {
            isConflict = current.map { (try? RevisionID(revText)) != tree[$0].revID } ?? true
        } else {
            // A new document may replace a deleted one without conflict.
            isConflict = current.map { !tree[$0].isDeleted } ?? false
        }
        if deleting {
            guard let current else {
                throw PeerSyncError(.notFound, "document does not exist", context: ["docID": doc.id]).with(spec)
            }
            if tree[current].isDeleted {
                // Already deleted: nothing to do unless the caller insists on its base.
                return !(isConflict && concurrencyControl == .failOnConflict)
            }
        }
        if isConflict {
            if concurrencyControl == .failOnConflict { return false }
            base = current
        }

        let hasAttachments = DocumentEngine.referencesBlobs(properties, canonical: body)
        if !deleting { try installPendingBlobs(doc) }
        let index = tree.addLocal(parent: base, body: body, deleted: deleting, hasAttachments: hasAttachments)
        let revID = tree[index].revID
        let sequence = try writeTree(&tree, docID: doc.id, writer, previous: .some(existing),
                                     saved: (body, properties))
        doc.revisionID = revID.description
        doc.sequence = sequence
        doc.collectionName = spec.name
        doc.scopeName = spec.scope
        doc.blobStore = blobStore
        doc.pendingBlobs = [:]
        return true
    }

    /// Stores the content of blobs set on `doc` that its properties still reference, and of
    /// referenced blobs that are only in the store of the database `doc` was read from.
    func installPendingBlobs(_ doc: MutableDocument) throws {
        let otherStore = doc.blobStore.flatMap { $0.directory == blobStore.directory ? nil : $0 }
        guard !doc.pendingBlobs.isEmpty || otherStore != nil else { return }
        var digests = Set<String>()
        DocumentEngine.collectBlobDigests(.object(doc.properties), into: &digests)
        for digest in digests {
            if let blob = doc.pendingBlobs[digest] {
                try blobStore.install(blob)
            } else if let otherStore, !blobStore.has(digest: digest), otherStore.has(digest: digest) {
                try blobStore.install(fileURL: otherStore.fileURL(forDigest: digest), expectedDigest: digest)
            }
        }
    }

    /// Save with a conflict handler (see ``Collection/save(document:conflictHandler:)``).
    func save(_ doc: inout MutableDocument,
              conflictHandler: (inout MutableDocument, Document?) throws -> Bool,
              _ writer: any StorageWriter) throws -> Bool {
        // Inside one write transaction nothing else changes the document, so after one
        // handler call the retry is based on the current revision and cannot conflict again.
        for _ in 0..<2 {
            if try save(&doc, concurrencyControl: .failOnConflict, deleting: false, writer) { return true }
            let current = try documentIncludingDeleted(id: doc.id, writer)
            guard try conflictHandler(&doc, current.flatMap { $0.isDeleted ? nil : $0 }) else { return false }
            doc.revisionID = current?.revisionID
            doc.sequence = current?.sequence ?? 0
        }
        return false
    }

    /// Removes a document completely and records the purge for listeners.
    func purge(id: String, _ writer: any StorageWriter) throws {
        try requireCollection(writer)
        try validateID(id)
        guard try purgeRecord(id, writer) else {
            throw PeerSyncError(.notFound, "document does not exist", context: ["docID": id]).with(spec)
        }
        try removeExpiration(id: id, writer)
        try logPurge(id: id, writer)
    }

    /// Purges the record of document `id` and its value-index entries; returns whether it existed.
    func purgeRecord(_ id: String, _ writer: any StorageWriter) throws -> Bool {
        guard let indexes = try indexUpkeep.maintenance(spec, writer) else {
            return try writer.purge(id, in: spec.documentsKeyspace)
        }
        guard let old = try writer.get(id, in: spec.documentsKeyspace) else { return false }
        try writer.purge(id, in: spec.documentsKeyspace)
        try indexes.documentChanged(id: id, old: old, new: nil, writer)
        return true
    }

    func logPurge(id: String, _ writer: any StorageWriter) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try writer.put(Record(key: id, body: Array(String(now).utf8)), in: spec.purgeLogKeyspace)
    }

    /// Purge-log entries older than `age` (other processes had time to see them).
    func stalePurgeLogEntries(olderThan age: TimeInterval, _ reader: any StorageReader) throws -> [String] {
        let limit = Int64((Date().timeIntervalSince1970 - age) * 1000)
        var old: [String] = []
        try reader.enumerate(in: spec.purgeLogKeyspace) { record in
            if let ms = Int64(String(decoding: record.body, as: UTF8.self)), ms < limit { old.append(record.key) }
            return true
        }
        return old
    }

    // MARK: Expiration

    static func expiryIndexKey(ms: Int64, docID: String) -> String {
        let digits = String(max(0, ms))
        return "t:" + String(repeating: "0", count: max(0, 20 - digits.utf8.count)) + digits + ":" + docID
    }

    func expiration(id: String, _ reader: any StorageReader) throws -> Date? {
        try requireCollection(reader)
        try validateID(id)
        guard let record = try reader.get("d:" + id, in: spec.expiryKeyspace),
              let ms = Int64(String(decoding: record.body, as: UTF8.self)) else { return nil }
        return Date(timeIntervalSince1970: Double(ms) / 1000)
    }

    func setExpiration(id: String, date: Date?, _ writer: any StorageWriter) throws {
        try requireCollection(writer)
        try validateID(id)
        guard try writer.get(id, in: spec.documentsKeyspace) != nil else {
            throw PeerSyncError(.notFound, "document does not exist", context: ["docID": id]).with(spec)
        }
        try removeExpiration(id: id, writer)
        guard let date else { return }
        let seconds = date.timeIntervalSince1970
        let ms = seconds.isFinite ? Int64(max(0, min(seconds, 9e12)) * 1000) : 0
        try writer.put(Record(key: "d:" + id, body: Array(String(ms).utf8)), in: spec.expiryKeyspace)
        try writer.put(Record(key: DocumentEngine.expiryIndexKey(ms: ms, docID: id)), in: spec.expiryKeyspace)
    }

    func removeExpiration(id: String, _ writer: any StorageWriter) throws {
        guard let record = try writer.get("d:" + id, in: spec.expiryKeyspace) else { return }
        if let ms = Int64(String(decoding: record.body, as: UTF8.self)) {
            try writer.purge(DocumentEngine.expiryIndexKey(ms: ms, docID: id), in: spec.expiryKeyspace)
        }
        try writer.purge("d:" + id, in: spec.expiryKeyspace)
    }

    /// The earliest expiration time in this collection, if any.
    func nextExpiration(_ reader: any StorageReader) throws -> Date? {
        var result: Date?
        try reader.enumerate(in: spec.expiryKeyspace, range: .prefix("t:"), descending: false) { record in
            let digits = record.key.utf8.dropFirst(2).prefix(20)
            if let ms = Int64(String(decoding: digits, as: UTF8.self)) {
                result = Date(timeIntervalSince1970: Double(ms) / 1000)
            }
            return false
        }
        return result
    }

    /// Purges every document whose expiration time is not after `now`; returns their IDs.
    func purgeExpired(now: Date, _ writer: any StorageWriter) throws -> [String] {
        let nowMs = Int64(now.timeIntervalSince1970 * 1000)
        let upper = DocumentEngine.expiryIndexKey(ms: nowMs + 1, docID: "")
        var expired: [(key: String, docID: String)] = []
        try writer.enumerate(in: spec.expiryKeyspace, range: KeyRange(from: "t:", to: upper), descending: false) { record in
            let parts = record.key.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            if parts.count == 3 { expired.append((record.key, String(parts[2]))) }
            return true
        }
        var purged: [String] = []
        for (key, docID) in expired {
            try writer.purge(key, in: spec.expiryKeyspace)
            try writer.purge("d:" + docID, in: spec.expiryKeyspace)
            if try purgeRecord(docID, writer) {
                try logPurge(id: docID, writer)
                purged.append(docID)
            }
        }
        return purged
    }

    // MARK: Enumeration

    func allDocuments(limit: Int?, offset: Int, _ reader: any StorageReader) throws -> [Document] {
        try requireCollection(reader)
        var out: [Document] = []
        var skipped = 0
        let limit = limit ?? Int.max
        guard limit > 0 else { return [] }
        try reader.enumerate(in: spec.documentsKeyspace) { record in
            if record.flags.contains(.deleted) { return true }
            if skipped < offset { skipped += 1; return true }
            out.append(try makeDocument(record))
            return out.count < limit
        }
        return out
    }

    func documentIDs(_ reader: any StorageReader) throws -> [String] {
        try requireCollection(reader)
        var out: [String] = []
        try reader.enumerate(in: spec.documentsKeyspace) { record in
            if !record.flags.contains(.deleted) { out.append(record.key) }
            return true
        }
        return out
    }

    func conflictedDocumentIDs(_ reader: any StorageReader) throws -> [String] {
        try requireCollection(reader)
        var out: [String] = []
        try reader.enumerate(in: spec.documentsKeyspace) { record in
            if record.flags.contains(.conflicted) { out.append(record.key) }
            return true
        }
        return out
    }

    func changes(since: UInt64, limit: Int?, _ reader: any StorageReader) throws -> [ChangeEntry] {
        try requireCollection(reader)
        var out: [ChangeEntry] = []
        let limit = limit ?? Int.max
        guard limit > 0 else { return [] }
        try reader.enumerate(in: spec.documentsKeyspace, since: since) { record in
            let text = String(decoding: record.version, as: UTF8.self)
            let revID: RevisionID
            do { revID = try RevisionID(text) } catch {
                throw PeerSyncError(.corrupt, "stored revision ID is invalid", context: ["docID": record.key]).with(spec)
            }
            out.append(ChangeEntry(docID: record.key, sequence: record.sequence, revID: revID,
                                   deleted: record.flags.contains(.deleted),
                                   conflicted: record.flags.contains(.conflicted)))
            return out.count < limit
        }
        return out
    }

    // MARK: Blob references

    /// Whether a body about to be stored references blobs: the tree walk of
    /// ``referencesBlobs(_:)`` runs only when a byte search of its canonical JSON finds a
    /// `"digest"` key (see ``mayReferenceBlobs(_:)``), which most bodies have not.
    static func referencesBlobs(_ properties: [String: JSONValue], canonical: [UInt8]) -> Bool {
        mayReferenceBlobs(canonical) && referencesBlobs(.object(properties))
    }

    /// Whether a body references blobs (`@type: blob` dictionaries or legacy `_attachments`).
    static func referencesBlobs(_ value: JSONValue) -> Bool {
        var digests = Set<String>()
        collectBlobDigests(value, into: &digests)
        return !digests.isEmpty
    }

    /// Collects the digests of every blob referenced anywhere in `value`, including legacy
    /// `_attachments` entries.
    static func collectBlobDigests(_ value: JSONValue, into digests: inout Set<String>) {
        switch value {
        case .object(let dict):
            if Blob.isBlob(properties: dict), let digest = dict["digest"]?.stringValue {
                digests.insert(digest)
                return
            }
            if let attachments = dict["_attachments"]?.objectValue {
                for case .object(let entry) in attachments.values {
                    if let digest = entry["digest"]?.stringValue { digests.insert(digest) }
                }
            }
            for (key, child) in dict where key != "_attachments" { collectBlobDigests(child, into: &digests) }
        case .array(let items):
            for item in items { collectBlobDigests(item, into: &digests) }
        default:
            break
        }
    }
}

/// One entry of a collection's changes feed (what the replicator reads).
@_spi(Replication)
public struct ChangeEntry: Sendable, Hashable {
    /// The document ID.
    public let docID: String
    /// The sequence of the document's latest change.
    public let sequence: UInt64
    /// The document's current revision.
    public let revID: RevisionID
    /// Whether the current revision is a deletion.
    public let deleted: Bool
    /// Whether the document has unresolved conflicting branches.
    public let conflicted: Bool

    public init(docID: String, sequence: UInt64, revID: RevisionID, deleted: Bool, conflicted: Bool = false) {
        self.docID = docID
        self.sequence = sequence
        self.revID = revID
        self.deleted = deleted
        self.conflicted = conflicted
    }
}
