import PeerSyncCore
import PeerSyncStorage

/// What a query reads of a document it fetched by ID: the current revision's metadata and the
/// properties it asked for, without a ``Document`` around them.
@_spi(Indexing)
public struct QueriedDocument: Sendable {
    /// The document ID.
    public var id: String
    /// The sequence of its current revision.
    public var sequence: UInt64
    /// The current revision ID, as stored (UTF-8).
    public var version: [UInt8]
    /// The current revision ID (decoded from ``version`` on each use: most queries never read it).
    public var revisionID: String { String(decoding: version, as: UTF8.self) }
    /// Whether the current revision is a deletion (only a scan that asks for deleted
    /// documents yields one: ``DatabaseReadTransaction/forEachQueriedDocument(in:after:includeDeleted:readingOnly:_:)``).
    public var isDeleted: Bool
    /// The top-level properties asked for (see
    /// ``DatabaseReadTransaction/queriedDocument(id:in:readingOnly:)``).
    public var properties: [String: JSONValue]

    /// A document with these values.
    public init(id: String, sequence: UInt64, version: [UInt8], isDeleted: Bool = false, properties: [String: JSONValue]) {
        self.id = id
        self.sequence = sequence
        self.version = version
        self.isDeleted = isDeleted
        self.properties = properties
    }
}

/// One stored index definition as the storage holds it: its name and its stored bytes.
@_spi(Indexing)
public struct StoredIndexDefinition: Sendable, Hashable {
    /// The index name.
    public let name: String
    /// The stored body (JSON: kind, expressions, stale flag), not parsed.
    public let bytes: [UInt8]
}

extension DatabaseReadTransaction {
    /// The index definitions of `collection` in this snapshot as stored, sorted by name, not
    /// parsed: equal lists mean equal definitions, so a reader that planned from one list can
    /// tell whether its plan still holds without parsing them again
    /// (``indexDefinitions(of:)`` parses them, ``indexDefinitions(from:)`` parses these).
    /// Errors: `.notFound` for a missing collection, `.closed` after the batch ended.
    ///
    /// A definition found proves that the collection exists (deleting a collection drops its
    /// definitions in the same transaction): the collection's metadata is then not looked up,
    /// here nor by the transaction's later reads of it.
    @_spi(Indexing)
    public func storedIndexDefinitions(of collection: Collection) throws -> [StoredIndexDefinition] {
        let engine = try uncheckedEngine(collection)
        var out: [StoredIndexDefinition] = []
        try reader.enumerate(in: engine.spec.indexDefinitionsKeyspace) { record in
            out.append(StoredIndexDefinition(name: record.key, bytes: record.body))
            return true
        }
        if out.isEmpty {
            _ = try self.engine(collection)   // `.notFound` unless the collection exists
        } else {
            collectionFound(engine)
        }
        return out
    }

    /// The definitions ``storedIndexDefinitions(of:)`` returned, parsed (as
    /// ``indexDefinitions(of:)`` returns them). Errors: `.corrupt` for a damaged definition.
    @_spi(Indexing)
    public func indexDefinitions(from stored: [StoredIndexDefinition]) throws -> [IndexDefinition] {
        try stored.map { definition throws(PeerSyncError) in
            try IndexDefinition(name: definition.name, record: Record(key: definition.name, body: definition.bytes))
        }
    }

    /// The current revision of document `id` of `collection` as a query reads it, or nil when
    /// there is none or it is deleted (as ``document(id:in:)``): with a `selection`, only its
    /// top-level properties are parsed (``JSONValue/objectProperties(parsing:selecting:)``;
    /// other keys may or may not be there), without, all of them. A stored body that does not parse
    /// reads as no properties (logged), as ``Document/properties`` does.
    ///
    /// Cheaper than ``document(id:in:)`` for a query reading documents through an index: no
    /// ``Document`` (and its lazily parsed body) is built, the revision tree is not read
    /// (`StorageReader.getWithoutExtra`), and `id` is not validated again —
    /// pass only IDs read from the collection's index entries or documents.
    ///
    /// Errors: `.notFound` for a missing collection, `.corrupt` for a stored body that is not a
    /// JSON object, `.closed` after the batch ended; storage errors.
    @_spi(Indexing)
    public func queriedDocument(id: String, in collection: Collection,
                                readingOnly selection: JSONValue.PropertySelection?) throws -> QueriedDocument? {
        let engine = try engine(collection)
        return try queriedDocument(id, engine, engine.spec.documentsKeyspace, readingOnly: selection)
    }

    /// ``queriedDocument(id:in:readingOnly:)`` for each of `ids`, calling `body` with those
    /// there are (not deleted) until it returns false, in ascending UTF-8 byte order of their
    /// IDs and each once, whatever the order of `ids` (the order a caller passing IDs read from
    /// an index sorts them in): the collection is looked up once, the records are read with
    /// `StorageReader.getManyWithoutExtra`. (An array, not any sequence: this module's generic
    /// code called from another module is not specialized, and a lazy sequence's metadata was
    /// looked up for every document.)
    @_spi(Indexing)
    public func forEachQueriedDocument(ids: [String], in collection: Collection,
                                       readingOnly selection: JSONValue.PropertySelection?,
                                       _ body: (QueriedDocument) throws -> Bool) throws {
        let engine = try engine(collection)
        let keyspace = engine.spec.documentsKeyspace
        let collectionName = engine.spec.fullName
        var scratch: [String: JSONValue] = [:]   // one dictionary's storage for every document (see `init`)
        var found = 0
        try reader.getManyWithoutExtra(ids, in: keyspace) { record in
            found += 1
            if record.flags.contains(.deleted) { return true }
            let document = try QueriedDocument(record, engine, isDeleted: false, readingOnly: selection,
                                               collectionName: collectionName, reusing: &scratch)
            return try body(document)
        }
        if found == 0 && !ids.isEmpty { try engine.requireCollection(reader) }   // `.notFound` unless it exists
    }

    /// Every document of `collection` as a query reads it (see
    /// ``queriedDocument(id:in:readingOnly:)``), in document-ID order (UTF-8 byte order),
    /// starting after document `id` (nil: at the first), until `body` returns false. Deleted
    /// documents (tombstones, no properties) are included only when `includeDeleted` is true.
    /// The same documents as ``forEachDocument(in:after:includeDeleted:_:)`` gives, without a
    /// ``Document`` built around each record and without copying the records' revision trees
    /// out of the storage (`StorageReader.enumerateWithoutExtra`): the scan a query runs.
    ///
    /// Errors: `.notFound` for a missing collection, `.corrupt` for a stored body that is not
    /// a JSON object, `.closed` after the batch ended; errors `body` throws are rethrown.
    @_spi(Indexing)
    public func forEachQueriedDocument(in collection: Collection, after id: String?, includeDeleted: Bool,
                                       readingOnly selection: JSONValue.PropertySelection?,
                                       _ body: (QueriedDocument) throws -> Bool) throws {
        let engine = try engine(collection)
        let collectionName = engine.spec.fullName
        // The smallest key after `id` in byte order is `id` followed by a NUL byte.
        let range = id.map { KeyRange(from: $0 + "\u{0}") } ?? .all
        var scratch: [String: JSONValue] = [:]   // one dictionary's storage for every document (see `init`)
        try reader.enumerateWithoutExtra(in: engine.spec.documentsKeyspace, range: range, descending: false) { record in
            let deleted = record.flags.contains(.deleted)
            if deleted && !includeDeleted { return true }
            return try body(try QueriedDocument(record, engine, isDeleted: deleted, readingOnly: selection,
                                                collectionName: collectionName, reusing: &scratch))
        }
    }

    private func queriedDocument(_ id: String, _ engine: DocumentEngine, _ keyspace: String,
                                 readingOnly selection: JSONValue.PropertySelection?) throws -> QueriedDocument? {
        guard let record = try engine.documentRecord(id, in: keyspace, reader, withoutExtra: true),
              !record.flags.contains(.deleted) else {
            return nil
        }
        var properties: [String: JSONValue] = [:]
        return try QueriedDocument(record, engine, isDeleted: false, readingOnly: selection,
                                   collectionName: engine.spec.fullName, reusing: &properties)
    }
}

extension QueriedDocument {
    /// `collectionName`: the collection's full name, for the log line of a damaged body.
    /// The properties are parsed into `scratch` (emptied first), then shared with the
    /// document: a caller passing the same dictionary for every document, and keeping no
    /// document past the next one, parses each into the same storage (a document it keeps
    /// is copied on the next write, as any shared dictionary is).
    init(_ record: borrowing Record, _ engine: borrowing DocumentEngine, isDeleted: Bool, readingOnly selection: JSONValue.PropertySelection?,
         collectionName: String, reusing scratch: inout [String: JSONValue]) throws {
        try engine.checkStoredBody(record)
        StoredBody.properties(of: record.body, selecting: selection, into: &scratch, docID: record.key,
                              collection: collectionName)
        self.init(id: record.key, sequence: record.sequence, version: record.version, isDeleted: isDeleted,
                  properties: scratch)
    }
}
