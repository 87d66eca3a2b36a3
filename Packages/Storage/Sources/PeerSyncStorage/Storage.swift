import PeerSyncCore

/// Per-record flag bits. The storage layer stores them and never interprets them, except
/// ``deleted``: ``StorageReader/count(in:includeDeleted:)`` and tombstones use it.
public struct RecordFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// The record is a tombstone (a deleted document that still replicates).
    public static let deleted = RecordFlags(rawValue: 1 << 0)
    /// The document has unresolved conflicting branches.
    public static let conflicted = RecordFlags(rawValue: 1 << 1)
    /// The document references blobs.
    public static let hasAttachments = RecordFlags(rawValue: 1 << 2)
}

/// One stored record: the shape of LiteCore's `Record`.
public struct Record: Sendable, Hashable {
    /// The key, unique within its keyspace. Keys are ordered by their UTF-8 bytes.
    public var key: String
    /// Assigned by the store on every put/delete: strictly increasing within a keyspace.
    public var sequence: UInt64
    /// Flags the database sets; the store keeps them and reads only ``RecordFlags/deleted``.
    public var flags: RecordFlags
    /// Opaque version metadata (the database keeps the current revision ID here).
    public var version: [UInt8]
    /// Opaque body (the database keeps the current revision's JSON here).
    public var body: [UInt8]
    /// Opaque extra data (the database keeps the revision tree here).
    public var extra: [UInt8]

    /// A record with these values; `sequence` is ignored by ``StorageWriter/put(_:in:)``, which
    /// assigns the next one.
    public init(key: String, sequence: UInt64 = 0, flags: RecordFlags = [], version: [UInt8] = [],
                body: [UInt8] = [], extra: [UInt8] = []) {
        self.key = key
        self.sequence = sequence
        self.flags = flags
        self.version = version
        self.body = body
        self.extra = extra
    }
}

/// A range of keys, compared by UTF-8 bytes. `nil` bounds are open.
public struct KeyRange: Sendable, Hashable {
    /// The first key included; nil: from the first key.
    public var lowerBound: String?
    /// The end of the range (included only with ``includesUpperBound``); nil: to the last key.
    public var upperBound: String?
    /// Whether a record whose key equals `upperBound` is included.
    public var includesUpperBound: Bool

    /// Keys from `lowerBound` to `upperBound` (excluded unless `includesUpperBound`); nil bounds
    /// are open, so the defaults give every key.
    public init(from lowerBound: String? = nil, to upperBound: String? = nil, includesUpperBound: Bool = false) {
        self.lowerBound = lowerBound
        self.upperBound = upperBound
        self.includesUpperBound = includesUpperBound
    }

    /// Every key.
    public static let all = KeyRange()

    /// Every key that starts with `prefix`.
    public static func prefix(_ prefix: String) -> KeyRange {
        // The smallest string greater than every string with this prefix: append U+10FFFF.
        KeyRange(from: prefix, to: prefix + "\u{10FFFF}", includesUpperBound: true)
    }

    /// Whether `key` lies in the range (byte-wise comparison).
    public func contains(_ key: String) -> Bool {
        if let lower = lowerBound, key.utf8.lexicographicallyPrecedes(lower.utf8) { return false }
        if let upper = upperBound {
            if includesUpperBound { return !upper.utf8.lexicographicallyPrecedes(key.utf8) }
            return key.utf8.lexicographicallyPrecedes(upper.utf8)
        }
        return true
    }
}

/// Read operations. A reader passed to ``Storage/read(_:)`` sees one consistent snapshot for
/// its whole lifetime; a reader inside ``Storage/write(_:)`` also sees the transaction's own
/// uncommitted changes. A reader must not escape the closure it was passed to.
///
/// Keyspaces are created implicitly by the first write to them; reading one that does not
/// exist behaves as an empty keyspace. Keyspace names are arbitrary non-empty strings,
/// distinct by their UTF-8 bytes (case-sensitive, no Unicode normalization), like keys.
public protocol StorageReader {
    /// Names of the keyspaces that exist (hold or held records), sorted.
    func keyspaces() throws -> [String]
    /// The record with this key, or nil.
    func get(_ key: String, in keyspace: String) throws -> Record?
    /// Records whose keys lie in `range`, in key order (reversed when `descending`).
    /// `body` returns `false` to stop early. Tombstones are included.
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws
    /// Records with `sequence > since`, in sequence order; `body` returns `false` to stop.
    /// Purged records are absent; a record appears once, at its latest sequence.
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws
    /// The record with this key, or nil, as ``get(_:in:)`` gives it but with ``Record/extra``
    /// empty: for a reader that does not use it (a query reads a document's current body, not
    /// its revision tree), so the backend need not copy it out.
    /// Optional for a backend: the default calls ``get(_:in:)`` and empties `extra`.
    func getWithoutExtra(_ key: String, in keyspace: String) throws -> Record?
    /// The records of ``enumerate(in:range:descending:_:)`` with ``Record/extra`` empty (see
    /// ``getWithoutExtra(_:in:)``). Optional for a backend: the default calls
    /// ``enumerate(in:range:descending:_:)`` and empties `extra`.
    func enumerateWithoutExtra(in keyspace: String, range: KeyRange, descending: Bool,
                               _ body: (Record) throws -> Bool) throws
    /// The records of those of `keys` there are (tombstones included), as
    /// ``getWithoutExtra(_:in:)`` gives each, in ascending UTF-8 byte order of their keys and
    /// each once, whatever the order of `keys` and however often a key is in it; `body`
    /// returns `false` to stop early. For a reader fetching many records whose keys it found
    /// elsewhere (a query through an index): a backend can fetch them in fewer, larger reads.
    /// Optional for a backend: the default calls ``getWithoutExtra(_:in:)`` for each key in turn.
    func getManyWithoutExtra(_ keys: [String], in keyspace: String, _ body: (Record) throws -> Bool) throws
    /// The number of records, counting tombstones only if asked.
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int
    /// The highest sequence ever assigned in the keyspace (0 if none); never decreases,
    /// not even after a purge.
    func lastSequence(in keyspace: String) throws -> UInt64

    /// The value stored under `key` in the ordered key set `keySet`, or nil (see
    /// ``StorageWriter/putEntry(_:value:inKeySet:)``). A missing key set reads as empty.
    /// Optional for a backend: the default reads ``OrderedKeySets/fallbackKeyspace(for:)``.
    func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]?
    /// The entries of the ordered key set `keySet` whose keys lie in `range`, in key order
    /// (reversed when `descending`), as `(key, value)`; `body` returns `false` to stop early.
    /// Optional for a backend: the default enumerates ``OrderedKeySets/fallbackKeyspace(for:)``.
    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws
}

/// Write operations of a write transaction.
public protocol StorageWriter: StorageReader {
    /// Inserts or replaces the record with key `record.key` (its `sequence` is ignored) and
    /// returns the new sequence assigned to it: `lastSequence + 1`.
    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64
    /// Turns the record into a tombstone: sets ``RecordFlags/deleted`` (keeping the other
    /// flags), empties its body, keeps its key, version and extra, and assigns it a new
    /// sequence, which is returned. Returns nil if there is no such record; deleting a
    /// tombstone again gives it a new sequence.
    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64?
    /// Removes the record completely (no tombstone). Returns whether it existed.
    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool
    /// Removes a keyspace with all its records and its sequence counter (a later write starts
    /// again at sequence 1). Dropping a keyspace that does not exist does nothing.
    func dropKeyspace(_ keyspace: String) throws

    /// Stores `value` under `key` in the ordered key set `keySet` (created by its first entry),
    /// replacing the value already there. See ``OrderedKeySets`` for what a key set is.
    /// Optional for a backend: the default puts a record into
    /// ``OrderedKeySets/fallbackKeyspace(for:)``.
    func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) throws
    /// Removes `key` from the ordered key set `keySet`; returns whether it was there.
    /// Optional for a backend: the default purges it from ``OrderedKeySets/fallbackKeyspace(for:)``.
    @discardableResult
    func removeEntry(_ key: String, inKeySet keySet: String) throws -> Bool
    /// Removes the ordered key set `keySet` with all its entries (a missing one: no-op).
    /// Optional for a backend: the default drops ``OrderedKeySets/fallbackKeyspace(for:)``.
    func dropKeySet(_ keySet: String) throws
}

/// An open store. See DESIGN.md, "Contracts": a transactional, ordered key-value record store
/// with named keyspaces and a per-keyspace sequence index.
///
/// Threading: every method blocks the calling thread (disk I/O, locks held by other
/// processes), so call them from a thread you own, not from Swift's cooperative pool — except
/// ``readWithoutWaiting(_:)``, which never waits and gives up (nil) where ``read(_:)`` would.
/// Instances are thread-safe, and ``read(_:)`` may run on several threads at once, each
/// transaction on its own snapshot, none waiting for another: `PeerSyncDatabase` runs its
/// writes on one queue and its reads on a pool of threads, several at once.
///
/// Transactions: ``read(_:)`` runs the closure against a snapshot; ``write(_:)`` runs it in a
/// write transaction that is serialized against every other writer, in this process and in
/// others that opened the same directory. When the closure throws, every change it made is
/// rolled back and the error is rethrown; when it returns, the transaction commits (durably,
/// unless ``StorageOptions/durable`` is false) before `write` returns. A rolled-back
/// transaction consumes no sequence numbers. Readers never block writers and an open write
/// transaction never blocks readers. Transactions do not nest.
///
/// `PeerSyncStorageTesting.StorageConformanceSuite` checks all of this for any backend.
///
/// Errors: `PeerSyncError` with codes `.storage`, `.io`, `.busy` (a lock held past
/// ``StorageOptions/busyTimeout``), `.corrupt`, `.tooLarge`, `.closed`.
public protocol Storage: AnyObject, Sendable {
    /// The backend that opened this store, e.g. `"sqlite"`.
    var backendName: String { get }
    /// The directory the store lives in.
    var directory: String { get }
    /// Runs `body` against a snapshot of the committed data and returns its result; rethrows its
    /// error. Never waits for a writer; may run on several threads at once.
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R
    /// Runs `body` in a write transaction, serialized against every other writer (also in other
    /// processes), and commits when it returns (durably unless ``StorageOptions/durable`` is
    /// false); when it throws, rolls everything back and rethrows. Throws `.busy` when the lock is
    /// not had within ``StorageOptions/busyTimeout``.
    @discardableResult
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R
    /// Closes the store. Later calls throw `PeerSyncError.Code.closed`. Idempotent.
    func close() throws

    /// ``read(_:)`` on the calling thread, but only if it can run without waiting: returns
    /// nil, without calling `body`, when the read would have to wait for anything — a lock
    /// held by another thread or process (SQLite's busy handler, a map resize), a free reader
    /// connection, or a reader slot — and the caller then runs ``read(_:)`` on a thread of its
    /// own instead. When it returns a value, `body` ran exactly once, against a snapshot with
    /// the same guarantees as ``read(_:)``'s (every commit that returned before the call,
    /// never an uncommitted change), and its error, if any, is rethrown.
    ///
    /// Threading: this is the one call that a caller may make from Swift's cooperative pool
    /// (`PeerSyncDatabase` does, for short query reads), so an implementation must never
    /// sleep, wait on a condition or lock that another thread may hold for long, or open
    /// files; it may take a mutex that is only ever held for a few instructions. It may still
    /// read pages from disk (a page-cache miss), as any computation may touch memory.
    ///
    /// Optional for a backend: the default returns nil every time (the caller always uses
    /// ``read(_:)``), which is always correct. Errors: as ``read(_:)`` (`.closed` after
    /// ``close()``), never `.busy` for a lock it would have waited for.
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R?
}

extension Storage {
    /// The default: never runs inline (nil), so the caller always uses ``read(_:)``.
    public func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? { nil }
}

/// Options for opening a store.
public struct StorageOptions: Sendable, Hashable {
    /// Create the store if it does not exist (default true).
    public var create: Bool
    /// Whether a commit is flushed to stable storage before `write` returns (default true).
    public var durable: Bool
    /// How long to wait for a lock held by another process or thread (default 10 s).
    public var busyTimeout: Duration
    /// Backend-specific size hint, e.g. LMDB's initial map size in bytes (0 = backend default).
    public var initialSize: Int

    /// Options with these values (defaults: create, durable, 10 s busy timeout, the backend's own
    /// initial size).
    public init(create: Bool = true, durable: Bool = true, busyTimeout: Duration = .seconds(10), initialSize: Int = 0) {
        self.create = create
        self.durable = durable
        self.busyTimeout = busyTimeout
        self.initialSize = initialSize
    }
}

/// A storage engine that can open stores: what an app injects to pick a backend.
public protocol StorageBackend: Sendable {
    /// A short lowercase name, e.g. `"sqlite"`, `"lmdb"`, `"memory"`.
    var name: String { get }
    /// Opens (or creates) the store in `directory`, which is created if needed.
    func open(directory: String, options: StorageOptions) throws -> any Storage
    /// Whether `directory` holds a store of this backend (used to detect an existing
    /// database's backend).
    func hasStore(in directory: String) -> Bool
}

extension StorageReader {
    /// Every record of the keyspace in key order.
    public func enumerate(in keyspace: String, _ body: (Record) throws -> Bool) throws {
        try enumerate(in: keyspace, range: .all, descending: false, body)
    }

    /// The default: ``get(_:in:)`` with `extra` emptied.
    public func getWithoutExtra(_ key: String, in keyspace: String) throws -> Record? {
        guard var record = try get(key, in: keyspace) else { return nil }
        record.extra = []
        return record
    }

    /// The default: ``getWithoutExtra(_:in:)`` for each key, in order (``sortedUniqueKeys(_:)``).
    public func getManyWithoutExtra(_ keys: [String], in keyspace: String, _ body: (Record) throws -> Bool) throws {
        for key in sortedUniqueKeys(keys) {
            if let record = try getWithoutExtra(key, in: keyspace), !(try body(record)) { return }
        }
    }

    /// The default: ``enumerate(in:range:descending:_:)`` with `extra` emptied.
    public func enumerateWithoutExtra(in keyspace: String, range: KeyRange, descending: Bool,
                                      _ body: (Record) throws -> Bool) throws {
        try enumerate(in: keyspace, range: range, descending: descending) { record in
            var record = record
            record.extra = []
            return try body(record)
        }
    }
}

/// Ordered key sets: the sequence-less kind of keyspace, for data that is only ever looked up
/// and range-scanned by key, such as the entries of a database's value indexes.
///
/// A key set maps keys (strings, ordered and compared by their UTF-8 bytes, as record keys)
/// to opaque values (bytes; empty is a value). It has no sequences, no flags, no tombstones,
/// no changes feed and no count: only ``StorageReader/entry(_:inKeySet:)``,
/// ``StorageReader/enumerateEntries(inKeySet:range:descending:_:)``,
/// ``StorageWriter/putEntry(_:value:inKeySet:)``, ``StorageWriter/removeEntry(_:inKeySet:)``
/// and ``StorageWriter/dropKeySet(_:)``. Key sets live in their own namespace, apart from
/// keyspaces: a key set and a keyspace of the same name are unrelated. They take part in
/// transactions exactly as keyspaces do (snapshots, rollback, durability, other processes).
///
/// So a backend can store an entry as one B-tree row keyed by its key (SQLite: a
/// `WITHOUT ROWID` table), where a keyspace record also carries a sequence and its index.
///
/// **A backend need not implement key sets.** The protocols' default implementations store a
/// key set `name` as the ordinary keyspace ``fallbackKeyspace(for:)`` (`"keyset:" + name`):
/// an entry is a record with that key and the value as its body. Such a backend is correct,
/// only not faster; those keyspaces show in ``StorageReader/keyspaces()``, so its users must
/// not name a keyspace of their own `keyset:…`. A backend that implements key sets must
/// implement all five methods, and must not switch between the two for an existing store (the
/// entries written one way are not read the other). `StorageConformanceSuite`'s case
/// `orderedKeySets` checks either.
public enum OrderedKeySets {
    /// The ordinary keyspace that holds key set `keySet` in a backend without native key sets.
    public static func fallbackKeyspace(for keySet: String) -> String { "keyset:" + keySet }
}

extension StorageReader {
    /// The fallback: the body of record `key` of ``OrderedKeySets/fallbackKeyspace(for:)``.
    public func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]? {
        try get(key, in: OrderedKeySets.fallbackKeyspace(for: keySet))?.body
    }

    /// The fallback: the records of ``OrderedKeySets/fallbackKeyspace(for:)`` in `range`, as
    /// `(key, body)`.
    public func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                                 _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws {
        try enumerate(in: OrderedKeySets.fallbackKeyspace(for: keySet), range: range, descending: descending) { record in
            try body(record.key, record.body)
        }
    }
}

extension StorageWriter {
    /// The fallback: a record `key` with body `value` in ``OrderedKeySets/fallbackKeyspace(for:)``.
    public func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) throws {
        try put(Record(key: key, body: value), in: OrderedKeySets.fallbackKeyspace(for: keySet))
    }

    /// The fallback: purges record `key` of ``OrderedKeySets/fallbackKeyspace(for:)``.
    @discardableResult
    public func removeEntry(_ key: String, inKeySet keySet: String) throws -> Bool {
        try purge(key, in: OrderedKeySets.fallbackKeyspace(for: keySet))
    }

    /// The fallback: drops ``OrderedKeySets/fallbackKeyspace(for:)``.
    public func dropKeySet(_ keySet: String) throws {
        try dropKeyspace(OrderedKeySets.fallbackKeyspace(for: keySet))
    }
}


/// `keys` in ascending UTF-8 byte order, each once (keys distinct by their bytes, as storage
/// keys are: no Unicode normalization). Returns `keys` itself when it is already so ordered.
package func sortedUniqueKeys(_ keys: [String]) -> [String] {
    var ordered = true
    for i in keys.indices.dropFirst() where compareUTF8(keys[i - 1], keys[i]) >= 0 {
        ordered = false
        break
    }
    if ordered { return keys }
    var sorted = keys.sorted { compareUTF8($0, $1) < 0 }
    var kept = 0
    for i in sorted.indices where kept == 0 || compareUTF8(sorted[kept - 1], sorted[i]) != 0 {
        sorted.swapAt(kept, i)
        kept += 1
    }
    sorted.removeLast(sorted.count - kept)
    return sorted
}
