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
    /// The current revision ID.
    public var revisionID: String
    /// The top-level properties asked for (see
    /// ``DatabaseReadTransaction/queriedDocument(id:in:readingOnly:)``).
    public var properties: [String: JSONValue]
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
    /// there is none or it is deleted (as ``document(id:in:)``): with `keys`, only those
    /// top-level properties are parsed (``JSONValue/objectProperties(parsing:keys:)``; other
    /// keys may or may not be there), without, all of them. A stored body that does not parse
    /// reads as no properties (logged), as ``Document/properties`` does.
    ///
    /// Cheaper than ``document(id:in:)`` for a query reading documents through an index: no
    /// ``Document`` (and its lazily parsed body) is built, and `id` is not validated again —
    /// pass only IDs read from the collection's index entries or documents.
    ///
    /// Errors: `.notFound` for a missing collection, `.corrupt` for a stored body that is not a
    /// JSON object, `.closed` after the batch ended; storage errors.
    @_spi(Indexing)
    public func queriedDocument(id: String, in collection: Collection, readingOnly keys: Set<String>?) throws -> QueriedDocument? {
        let engine = try engine(collection)
        return try queriedDocument(id, engine, engine.spec.documentsKeyspace, readingOnly: keys)
    }

    /// ``queriedDocument(id:in:readingOnly:)`` for each of `ids` in turn, calling `body` with
    /// those there are (not deleted) until it returns false: the collection is looked up once.
    /// (An array, not any sequence: this module's generic code called from another module is
    /// not specialized, and a lazy sequence's metadata was looked up for every document.)
    @_spi(Indexing)
    public func forEachQueriedDocument(ids: [String], in collection: Collection, readingOnly keys: Set<String>?,
                                       _ body: (QueriedDocument) throws -> Bool) throws {
        let engine = try engine(collection)
        let keyspace = engine.spec.documentsKeyspace
        for id in ids {
            guard let document = try queriedDocument(id, engine, keyspace, readingOnly: keys) else { continue }
            if !(try body(document)) { return }
        }
    }

    private func queriedDocument(_ id: String, _ engine: DocumentEngine, _ keyspace: String,
                                 readingOnly keys: Set<String>?) throws -> QueriedDocument? {
        guard let record = try engine.documentRecord(id, in: keyspace, reader), !record.flags.contains(.deleted) else {
            return nil
        }
        return try QueriedDocument(record, engine, readingOnly: keys)
    }
}

extension QueriedDocument {
    init(_ record: Record, _ engine: DocumentEngine, readingOnly keys: Set<String>?) throws {
        try engine.checkStoredBody(record)
        self.init(id: record.key, sequence: record.sequence, revisionID: String(decoding: record.version, as: UTF8.self),
                  properties: StoredBody.properties(of: record.body, readingOnly: keys, docID: record.key,
                                                    collection: engine.spec.fullName))
    }
}
