import PeerSyncCore
import PeerSyncStorage

// Value indexes, the database's half (the query package, PeerSyncQuery, holds the other: the
// index API with Couchbase Lite's names, the key encoding and the planner).
//
// Storage layout, per collection:
// - `idxdef:<scope>.<collection>`: one record per index, key = index name, body = the
//   definition as canonical JSON (`{"entries":"keyset","expressions":[…SQL++ text…],
//   "kind":"value","stale":false}`);
// - the ordered key set (`OrderedKeySets`: no sequences) `idx:<scope>.<collection>:<name>`: the
//   entries of one index: one entry per live document, key = what the ``DocumentIndexer``
//   computes (an order-preserving encoding of the indexed values, then the document ID),
//   value = the length of the document ID in bytes (one byte: the key ends with the ID).
//
// Before 3 December 2026 the entries were records of the *keyspace* `idx:<scope>.<collection>:
// <name>` (a sequence each), and the stored definition had no `"entries"`. Such a definition
// reads as stale (``IndexDefinition/init(name:record:)``), so its index is not used or kept up to
// date, and the query package rebuilds it — into the key set, dropping the old keyspace —
// before it is first used; a write keeps working meanwhile.
//
// Every change of a document's current revision (save, delete, purge, expiry, replicated
// insert, conflict resolution) goes through `DocumentEngine.writeTree` or a purge, and both
// call ``IndexMaintenance`` in the same storage write transaction: an index is never out of
// step with its documents, in any process, on any backend, and rolls back with them.
//
// The database cannot evaluate query expressions itself (the query package depends on it, not
// the reverse), so the query package installs a ``DocumentIndexer`` (process-wide, on first use
// of any query or index API). A write made in a process that never installed one cannot compute
// entries: it marks the collection's indexes *stale* in the same transaction instead, and the
// query package rebuilds a stale index before it uses it. So results stay right either way.

/// The stored definition of one index of a collection (what the query package's
/// `ValueIndexConfiguration` becomes).
@_spi(Indexing)
public struct IndexDefinition: Sendable, Hashable {
    /// The index name, unique within its collection.
    public var name: String
    /// `"value"` (the only kind for now; array and full-text indexes would add kinds).
    public var kind: String
    /// The indexed expressions, as SQL++ text, in index order.
    public var expressions: [String]
    /// Whether the entries are out of date (a process without a ``DocumentIndexer`` changed a
    /// document): the index must be rebuilt before it is used.
    public var isStale: Bool

    /// A definition with these values (not stale by default).
    public init(name: String, kind: String = "value", expressions: [String], isStale: Bool = false) {
        self.name = name
        self.kind = kind
        self.expressions = expressions
        self.isStale = isStale
    }

    var json: JSONValue {
        ["kind": .string(kind), "expressions": .array(expressions.map { .string($0) }), "stale": .bool(isStale),
         "entries": .string(IndexDefinition.entriesInKeySet)]
    }

    /// The stored definition's `"entries"` when its entries are in an ordered key set (see the
    /// file comment); a definition without it has its entries in the old keyspace layout.
    static let entriesInKeySet = "keyset"

    init(name: String, record: Record) throws(PeerSyncError) {
        // Every document write reads the definitions (see `IndexMaintenance.load`): the parsed
        // form of a stored body is kept, by its exact bytes, so a definition changed by any
        // handle or process is simply a new entry.
        if let known = IndexDefinition.parsed.withLock({ $0[record.body] }) {
            self.init(name: name, kind: known.kind, expressions: known.expressions, isStale: known.isStale)
            return
        }
        let value = try JSONValue(parsing: record.body)
        guard let kind = value["kind"]?.stringValue, let list = value["expressions"]?.arrayValue else {
            throw PeerSyncError(.corrupt, "stored index definition is invalid", context: ["index": name])
        }
        // Entries in the old layout (a keyspace) are rebuilt into a key set before use: stale.
        let inKeySet = value["entries"]?.stringValue == IndexDefinition.entriesInKeySet
        self.init(name: name, kind: kind, expressions: list.compactMap(\.stringValue),
                  isStale: !inKeySet || (value["stale"]?.boolValue ?? false))
        let parsed = self
        IndexDefinition.parsed.withLock { cache in
            if cache.count >= 256 { cache.removeAll() }   // bounded: definitions are few
            cache[record.body] = parsed
        }
    }

    /// Stored definition bodies already parsed (the name in them is not used).
    private static let parsed = LockedValue<[[UInt8]: IndexDefinition]>([:])
}

/// Computes the entries of documents in indexes: implemented by the query package, which
/// parses and evaluates the expressions. Called inside storage write transactions, on the
/// database's writer queue, so it must not block on anything but the CPU.
@_spi(Indexing)
public protocol DocumentIndexer: Sendable {
    /// `definitions` made ready for many documents (expressions parsed, the properties they
    /// read found once): the database prepares a collection's definitions once per write
    /// transaction, not once per document. Errors: any (e.g. an expression that does not
    /// parse); the write that needed it fails and rolls back.
    func prepare(_ definitions: [IndexDefinition]) throws -> any PreparedDocumentIndexer
}

/// A ``DocumentIndexer`` ready for one list of index definitions
/// (``DocumentIndexer/prepare(_:)``); used inside one write transaction.
@_spi(Indexing)
public protocol PreparedDocumentIndexer: Sendable {
    /// The storage keys of the entries of the live document `documentID`, whose current body
    /// is `body` (canonical JSON of an object), in each prepared index (one array per
    /// definition, in order). Keys sort in the index's order under the storage's byte order
    /// and end with the document ID, so they are unique.
    /// Errors: any; the write that needed the keys fails and rolls back.
    func entryKeys(documentID: String, body: [UInt8]) throws -> [[String]]

    /// The same keys as ``entryKeys(documentID:body:)`` for `body` =
    /// `JSONValue.object(properties).canonicalData`, computed from `properties` themselves (a
    /// save holds them: no parse of the bytes it just encoded). An implementation must give
    /// exactly those keys: the stored body is the canonical form (integral doubles are integers,
    /// non-finite numbers `null`, see `JSONValue.canonicalized`), so it evaluates over the
    /// canonical form of what it reads. The default encodes and calls
    /// ``entryKeys(documentID:body:)``. Errors: as that.
    func entryKeys(documentID: String, properties: [String: JSONValue]) throws -> [[String]]

    /// Calls `visit` with each key of ``entryKeys(documentID:properties:)`` and the position
    /// of its definition, in order, without building the arrays: the upkeep of a document
    /// that had no entries (an insert) needs nothing else. An implementation must pass exactly
    /// those keys. The default calls ``entryKeys(documentID:properties:)``. Errors: as that,
    /// and whatever `visit` throws (then no further key is visited).
    func forEachEntryKey(documentID: String, properties: [String: JSONValue],
                         _ visit: (_ definition: Int, _ key: String) throws -> Void) throws
}

extension PreparedDocumentIndexer {
    public func entryKeys(documentID: String, properties: [String: JSONValue]) throws -> [[String]] {
        try entryKeys(documentID: documentID, body: JSONValue.object(properties).canonicalData)
    }

    public func forEachEntryKey(documentID: String, properties: [String: JSONValue],
                                _ visit: (_ definition: Int, _ key: String) throws -> Void) throws {
        try forEachEntryKeyOfArrays(documentID: documentID, properties: properties, visit)
    }

    /// ``forEachEntryKey(documentID:properties:_:)`` over the arrays of
    /// ``entryKeys(documentID:properties:)``: the default, and an implementation's fallback
    /// for the definitions its own walk does not cover.
    public func forEachEntryKeyOfArrays(documentID: String, properties: [String: JSONValue],
                                        _ visit: (_ definition: Int, _ key: String) throws -> Void) throws {
        for (definition, keys) in try entryKeys(documentID: documentID, properties: properties).enumerated() {
            for key in keys { try visit(definition, key) }
        }
    }
}

/// The process-wide indexer (see the file comment).
@_spi(Indexing)
public enum DocumentIndexing {
    private static let installed = LockedValue<(any DocumentIndexer)?>(nil)

    /// Installs the indexer every database of this process uses from now on. Idempotent; the
    /// last one installed wins.
    public static func install(_ indexer: any DocumentIndexer) {
        installed.withLock { $0 = indexer }
    }

    /// The installed indexer, if any.
    public static var indexer: (any DocumentIndexer)? { installed.withLock { $0 } }
}

extension CollectionSpec {
    /// Index definitions: key = index name.
    var indexDefinitionsKeyspace: String { "idxdef:" + fullName }
    /// The ordered key set of the entries of index `name`.
    func indexKeySet(_ name: String) -> String { "idx:" + fullName + ":" + name }
    /// The keyspace that held the entries of index `name` before they moved to
    /// ``indexKeySet(_:)`` (see the file comment): dropped when the index is rebuilt or removed.
    func legacyIndexKeyspace(_ name: String) -> String { "idx:" + fullName + ":" + name }
}

/// Index upkeep for one document change, inside the write transaction that makes it.
struct IndexMaintenance: Sendable {
    let spec: CollectionSpec
    let definitions: [IndexDefinition]
    /// The key set of each definition's entries, in order.
    let keySets: [String]
    /// The positions in ``definitions`` of the indexes that are not stale.
    let live: [Int]
    /// The installed indexer prepared for the ``live`` definitions (nil: none installed, or
    /// every index stale).
    let indexer: (any PreparedDocumentIndexer)?
    /// Whether an indexer was installed (without one, a write marks the indexes stale).
    let hasIndexer: Bool

    /// The collection's index definitions, or nil when it has none (the common case: one
    /// enumeration of an empty keyspace).
    static func load(_ spec: CollectionSpec, _ reader: any StorageReader) throws -> IndexMaintenance? {
        let definitions = try readDefinitions(spec, reader)
        if definitions.isEmpty { return nil }
        let live = definitions.indices.filter { !definitions[$0].isStale }
        let installed = DocumentIndexing.indexer
        return IndexMaintenance(
            spec: spec, definitions: definitions, keySets: definitions.map { spec.indexKeySet($0.name) }, live: live,
            indexer: live.isEmpty ? nil : try installed?.prepare(live.map { definitions[$0] }),
            hasIndexer: installed != nil)
    }

    static func readDefinitions(_ spec: CollectionSpec, _ reader: any StorageReader) throws -> [IndexDefinition] {
        var out: [IndexDefinition] = []
        try reader.enumerate(in: spec.indexDefinitionsKeyspace) { record in
            do {
                out.append(try IndexDefinition(name: record.key, record: record))
            } catch let error as PeerSyncError {
                throw error.with(spec)
            }
            return true
        }
        return out
    }

    /// Replaces the entries of document `id` (whose record was `old` and is now `new`; nil:
    /// absent or purged) in every index. `newProperties`: the properties whose canonical JSON
    /// is `new`'s body, when the caller holds them (a save), so the keys are computed without
    /// parsing that body (``PreparedDocumentIndexer/entryKeys(documentID:properties:)``).
    func documentChanged(id: String, old: Record?, new: Record?, newProperties: [String: JSONValue]? = nil,
                         _ writer: any StorageWriter) throws {
        let oldLive = old.flatMap { $0.flags.contains(.deleted) ? nil : $0.body }
        let newLive = new.flatMap { $0.flags.contains(.deleted) ? nil : $0.body }
        if oldLive == newLive { return }
        guard hasIndexer else {
            try markStale(writer)
            return
        }
        guard let indexer else { return }   // every index is stale: rebuilt before it is used
        let value = IndexMaintenance.entryValue(documentID: id)
        if oldLive == nil, newLive != nil, let newProperties {
            // A saved document that had no entries: its keys go straight in.
            try indexer.forEachEntryKey(documentID: id, properties: newProperties) { definition, key in
                try writer.putEntry(key, value: value, inKeySet: keySets[live[definition]])
            }
            return
        }
        let allBefore = try oldLive.map { try indexer.entryKeys(documentID: id, body: $0) }
        let allAfter = try newLive.map { body in
            try newProperties.map { try indexer.entryKeys(documentID: id, properties: $0) }
                ?? indexer.entryKeys(documentID: id, body: body)
        }
        for (i, position) in live.enumerated() {
            let keySet = keySets[position]
            let before = allBefore?[i] ?? [], after = allAfter?[i] ?? []
            if before == after { continue }
            // A value index has one key per document: compared directly, no sets.
            if before.count <= 1 && after.count <= 1 {
                if let key = before.first { try writer.removeEntry(key, inKeySet: keySet) }
                if let key = after.first { try writer.putEntry(key, value: value, inKeySet: keySet) }
                continue
            }
            let keep = before.isEmpty || after.isEmpty ? [] : Set(before).intersection(after)
            for key in before where !keep.contains(key) { try writer.removeEntry(key, inKeySet: keySet) }
            for key in after where !keep.contains(key) { try writer.putEntry(key, value: value, inKeySet: keySet) }
        }
    }

    /// The value stored with an entry of document `id`: the length of its UTF-8 (one byte; an
    /// entry key ends with the document ID, see ``PreparedDocumentIndexer``), so entries stay
    /// small (fewer pages to write). An ID longer than 255 bytes (none: IDs are at most 255)
    /// would be stored whole.
    static func entryValue(documentID id: String) -> [UInt8] {
        let count = id.utf8.count
        return count <= 255 ? oneByteValues[count] : Array(id.utf8)
    }

    /// Every one-byte entry value, made once: an upkeep takes one instead of allocating it.
    private static let oneByteValues: [[UInt8]] = (0...255).map { [UInt8($0)] }

    /// The document ID of the entry `key` whose value is `value` (see ``entryValue(documentID:)``).
    static func documentID(key: String, value: [UInt8]) throws -> String {
        guard value.count == 1 else { return String(decoding: value, as: UTF8.self) }
        let count = Int(value[0]), bytes = key.utf8
        guard count > 0, count <= bytes.count else {
            throw PeerSyncError(.corrupt, "an index entry's document ID length does not fit its key",
                                context: ["length": String(count)])
        }
        return String(decoding: bytes.suffix(count), as: UTF8.self)
    }

    private func markStale(_ writer: any StorageWriter) throws {
        for var definition in definitions where !definition.isStale {
            definition.isStale = true
            try IndexMaintenance.putDefinition(definition, spec, writer)
        }
    }

    static func putDefinition(_ definition: IndexDefinition, _ spec: CollectionSpec, _ writer: any StorageWriter) throws {
        try writer.put(Record(key: definition.name, body: definition.json.canonicalData), in: spec.indexDefinitionsKeyspace)
    }

    /// (Re)builds index `definition` from every live document of the collection and stores
    /// its definition as not stale.
    static func build(_ definition: IndexDefinition, _ spec: CollectionSpec, indexer: any DocumentIndexer,
                      _ writer: any StorageWriter) throws {
        let keySet = spec.indexKeySet(definition.name)
        try writer.dropKeySet(keySet)
        try writer.dropKeyspace(spec.legacyIndexKeyspace(definition.name))
        var entries: [(String, String)] = []
        let prepared = try indexer.prepare([definition])
        try writer.enumerate(in: spec.documentsKeyspace) { record in
            if record.flags.contains(.deleted) { return true }
            for key in try prepared.entryKeys(documentID: record.key, body: record.body)[0] {
                entries.append((key, record.key))
            }
            return true
        }
        // In key order: B-trees fill fastest that way.
        entries.sort { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
        for (key, id) in entries { try writer.putEntry(key, value: entryValue(documentID: id), inKeySet: keySet) }
        var fresh = definition
        fresh.isStale = false
        try putDefinition(fresh, spec, writer)
    }

    /// Drops every index of the collection (the collection is being deleted).
    static func dropAll(_ spec: CollectionSpec, _ writer: any StorageWriter) throws {
        for definition in try readDefinitions(spec, writer) {
            try writer.dropKeySet(spec.indexKeySet(definition.name))
            try writer.dropKeyspace(spec.legacyIndexKeyspace(definition.name))
        }
        try writer.dropKeyspace(spec.indexDefinitionsKeyspace)
    }
}

/// Each collection's ``IndexMaintenance`` for the length of one storage write transaction of a
/// database, so a batch of writes reads and prepares the index definitions once, not once per
/// document. Only a write run through ``transaction(_:)`` caches (elsewhere every lookup reads
/// the definitions), and the cache is emptied when that transaction ends, committed or not:
/// another process can change the definitions only between our transactions (it needs the
/// write lock). Code that changes definitions inside a transaction calls
/// ``definitionsChanged()``. All of it runs on the database's writer queue.
final class IndexUpkeepCache: Sendable {
    private struct State {
        var active = false
        var entries: [CollectionSpec: IndexMaintenance?] = [:]
    }
    private let state = LockedValue(State())

    /// Runs `body` (the body of one storage write transaction) with caching on.
    func transaction<R>(_ body: () throws -> R) rethrows -> R {
        state.withLock { $0.active = true; $0.entries.removeAll() }
        defer { state.withLock { $0.active = false; $0.entries.removeAll() } }
        return try body()
    }

    /// The upkeep of `spec`'s indexes in this transaction (nil: it has none).
    func maintenance(_ spec: CollectionSpec, _ reader: any StorageReader) throws -> IndexMaintenance? {
        if let cached = state.withLock({ $0.active ? $0.entries[spec] : nil }) { return cached }
        let loaded = try IndexMaintenance.load(spec, reader)
        // Without an indexer a write marks the definitions stale (it changes them): that is
        // not kept, so the next write reads what it wrote.
        if loaded?.hasIndexer != false {
            state.withLock { if $0.active { $0.entries[spec] = .some(loaded) } }
        }
        return loaded
    }

    /// Forgets what was prepared (a definition was stored, marked stale or dropped).
    func definitionsChanged() {
        state.withLock { $0.entries.removeAll() }
    }
}

// MARK: The API the query package builds on

extension Collection {
    /// The collection's index definitions, sorted by name.
    ///
    /// Isolation: a read. Errors: `.notFound` for a deleted collection; storage errors.
    @_spi(Indexing)
    public func indexDefinitions() async throws -> [IndexDefinition] {
        let engine = self.engine
        return try await database.read { reader in
            try engine.requireCollection(reader)
            return try IndexMaintenance.readDefinitions(engine.spec, reader)
        }
    }

    /// Creates index `definition.name`, or replaces an index of that name whose expressions or
    /// kind differ, building its entries from every document in the same write transaction.
    /// An existing index with the same kind and expressions is left as it is (unless stale:
    /// then it is rebuilt). Returns whether anything was built.
    ///
    /// Isolation: a write. Errors: `.invalidArgument` for an empty name or no expressions,
    /// `.notFound` for a deleted collection; the indexer's errors; storage errors.
    @_spi(Indexing)
    @discardableResult
    public func storeIndex(_ definition: IndexDefinition, indexer: any DocumentIndexer) async throws -> Bool {
        guard !definition.name.isEmpty else { throw PeerSyncError(.invalidArgument, "an index name must not be empty") }
        guard !definition.expressions.isEmpty else {
            throw PeerSyncError(.invalidArgument, "an index needs at least one expression", context: ["index": definition.name])
        }
        let engine = self.engine
        return try await database.write { writer in
            try engine.requireCollection(writer)
            let spec = engine.spec
            if let record = try writer.get(definition.name, in: spec.indexDefinitionsKeyspace) {
                let existing = try IndexDefinition(name: definition.name, record: record)
                if existing.kind == definition.kind && existing.expressions == definition.expressions && !existing.isStale {
                    return false
                }
            }
            try IndexMaintenance.build(definition, spec, indexer: indexer, writer)
            engine.indexUpkeep.definitionsChanged()
            return true
        }
    }

    /// Rebuilds every stale index of the collection (see ``IndexDefinition/isStale``); returns
    /// the names rebuilt. Isolation: a write (none when nothing is stale: a read decides).
    @_spi(Indexing)
    @discardableResult
    public func rebuildStaleIndexes(indexer: any DocumentIndexer) async throws -> [String] {
        let engine = self.engine
        guard try await indexDefinitions().contains(where: \.isStale) else { return [] }
        return try await database.write { writer in
            var rebuilt: [String] = []
            for definition in try IndexMaintenance.readDefinitions(engine.spec, writer) where definition.isStale {
                try IndexMaintenance.build(definition, engine.spec, indexer: indexer, writer)
                engine.indexUpkeep.definitionsChanged()
                rebuilt.append(definition.name)
            }
            return rebuilt
        }
    }

    /// Deletes index `name` with its entries; returns whether it existed.
    ///
    /// Isolation: a write. Errors: `.notFound` for a deleted collection; storage errors.
    @_spi(Indexing)
    @discardableResult
    public func removeIndex(named name: String) async throws -> Bool {
        let engine = self.engine
        return try await database.write { writer in
            try engine.requireCollection(writer)
            guard try writer.purge(name, in: engine.spec.indexDefinitionsKeyspace) else { return false }
            try writer.dropKeySet(engine.spec.indexKeySet(name))
            try writer.dropKeyspace(engine.spec.legacyIndexKeyspace(name))
            engine.indexUpkeep.definitionsChanged()
            return true
        }
    }
}

extension Database {
    /// A handle on collection `name` of `scope` (default `_default`) without a storage read:
    /// whether it exists is for the caller to check in its own read transaction
    /// (``DatabaseReadTransaction/contains(_:)``), so a query makes one trip to a reader, not two.
    /// Errors: `.invalidArgument` for an invalid name, as ``collection(name:scope:)``.
    @_spi(Indexing)
    public func uncheckedCollection(name: String, scope: String?) throws -> Collection {
        makeCollection(try Database.spec(name: name, scope: scope))
    }
}

extension DatabaseReadTransaction {
    /// Whether `collection` exists in this snapshot. Errors: `.closed` after the batch ended,
    /// `.invalidArgument` for a collection of another database; storage errors.
    @_spi(Indexing)
    public func contains(_ collection: Collection) throws -> Bool {
        do {
            _ = try engine(collection)
            return true
        } catch let error as PeerSyncError where error.code == .notFound {
            return false
        }
    }
}

extension Document {
    /// The document's properties for a reader that reads only the top-level properties named
    /// in `keys` (a query that knows which ones its expressions use): a document read from the
    /// database and not parsed yet parses only those (the others are skipped over in the stored
    /// bytes); otherwise all of ``properties``. Either way the values of `keys` are those of
    /// ``properties``; other keys may or may not be there.
    @_spi(Indexing)
    public func properties(readingOnly keys: Set<String>) -> [String: JSONValue] {
        guard let body = storedBody else { return properties }
        return body.properties(readingOnly: keys)
    }
}

extension DatabaseReadTransaction {
    /// The index definitions of `collection` in this snapshot, sorted by name.
    /// Errors: `.notFound` for a missing collection, `.closed` after the batch ended.
    @_spi(Indexing)
    public func indexDefinitions(of collection: Collection) throws -> [IndexDefinition] {
        let engine = try engine(collection)
        return try IndexMaintenance.readDefinitions(engine.spec, reader)
    }

    /// As ``forEachDocument(in:includeDeleted:_:)``, starting after document `id` (nil: at the
    /// first): the documents whose IDs sort after it (UTF-8 byte order). A query reading
    /// its results in pages resumes this way, one read transaction per page.
    @_spi(Indexing)
    public func forEachDocument(in collection: Collection, after id: String?, includeDeleted: Bool = false,
                                _ body: (Document) throws -> Bool) throws {
        let engine = try engine(collection)
        // The smallest key after `id` in byte order is `id` followed by a NUL byte.
        let range = id.map { KeyRange(from: $0 + "\u{0}") } ?? .all
        try reader.enumerate(in: engine.spec.documentsKeyspace, range: range, descending: false) { record in
            if !includeDeleted && record.flags.contains(.deleted) { return true }
            return try body(try engine.makeDocument(record))
        }
    }

    /// Calls `body` with the key and document ID of each entry of index `name` of
    /// `collection` whose key lies in `range`, in key order (reversed when `descending`),
    /// until it returns false. Errors: `.notFound` for a missing collection, `.closed` after
    /// the batch ended; errors `body` throws.
    @_spi(Indexing)
    public func forEachIndexEntry(index name: String, in collection: Collection, range: KeyRange, descending: Bool,
                                  _ body: (_ key: String, _ documentID: String) throws -> Bool) throws {
        let engine = try engine(collection)
        try reader.enumerateEntries(inKeySet: engine.spec.indexKeySet(name), range: range, descending: descending) { key, id in
            try body(key, try IndexMaintenance.documentID(key: key, value: id))
        }
    }
}
