import Foundation
import PeerSyncCore
import PeerSyncStorage

// MARK: Schema
//
// One table per keyspace, named by an integer id (never by the user's keyspace name, so any
// string is a valid keyspace name and nothing user-supplied is ever spliced into SQL):
//
//   peersync_keyspaces(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, last_seq INTEGER)
//   kv_<id>(seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, flags, version, body, extra)
//
// Why per-keyspace tables rather than one table with a keyspace column:
// - the sequence is the table's rowid (INTEGER PRIMARY KEY), so the sequence index costs
//   nothing: `enumerate(since:)` is a rowid range scan, and a put appends at the right edge of
//   the table b-tree. A shared table would need sequences unique per keyspace, hence a
//   separate (keyspace, seq) index: three b-trees per write instead of two;
// - rows are ~1 KB documents, so a WITHOUT ROWID table keyed by `key` would be a poor fit
//   (SQLite stores whole rows in its interior pages); the rowid table plus the UNIQUE key
//   index is LiteCore's own `kv_<name>` layout;
// - `dropKeyspace` is a DROP TABLE, not a DELETE of every row.
// Keys are TEXT with the default BINARY collation, i.e. memcmp over the UTF-8 bytes of a
// UTF-8 database: exactly the byte order the Storage contract asks for.
//
// The keyspace's last sequence is max(max(seq) of its table, `last_seq` of its metadata row).
// max(seq) is one seek to the right edge of the rowid b-tree, and puts and deletes only ever
// raise it, so they never write the metadata row. Only a purge can lower max(seq) (when it
// removes the newest record), so a transaction that purged writes its final last sequence to
// `last_seq` before COMMIT: the counter never decreases. (Updating the metadata row on every
// commit would also rewrite, at commit time, a page a bulk insert spilled to the WAL long
// before, making SQLite re-checksum every WAL frame written after it.)
//
// Ordered key sets (`OrderedKeySets`: no sequences, small values, e.g. index entries) are
// `WITHOUT ROWID` tables keyed by the key, one B-tree write per entry where a keyspace record
// costs a row, its key's UNIQUE index and the sequence:
//
//   peersync_keysets(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE)
//   ks_<id>(key TEXT NOT NULL PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID
//
// The catalog is created by the first key set (`CREATE TABLE IF NOT EXISTS`), so stores made
// before key sets existed open unchanged (same `user_version`) and gain it when first used.

enum SQLiteSchema {
    /// `PRAGMA application_id` of a PeerSync store: "PSYC".
    static let applicationID: Int64 = 0x5053_5943
    /// `PRAGMA user_version`: the layout described above.
    static let version: Int64 = 1

    static let createMetadata = """
        CREATE TABLE peersync_keyspaces (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE,
            last_seq INTEGER NOT NULL DEFAULT 0
        )
        """

    static func createKeyspaceTable(_ table: String) -> String {
        """
        CREATE TABLE \(table) (
            seq INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            flags INTEGER NOT NULL,
            version BLOB NOT NULL,
            body BLOB NOT NULL,
            extra BLOB NOT NULL
        )
        """
    }

    static let recordColumns = "seq, key, flags, version, body, extra"
    /// ``recordColumns`` without `extra` (a record read without it).
    static let recordColumnsWithoutExtra = "seq, key, flags, version, body"

    static let createKeySetCatalog = """
        CREATE TABLE IF NOT EXISTS peersync_keysets (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE
        )
        """

    static func createKeySetTable(_ table: String) -> String {
        "CREATE TABLE \(table) (key TEXT NOT NULL PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
    }
}

/// A keyspace name compared and hashed by its UTF-8 bytes. Swift's `String ==` uses canonical
/// equivalence ("\u{E9}" == "e\u{301}"), but keyspace names, like keys, are distinct by bytes.
struct KeyspaceName: Hashable {
    let name: String
    init(_ name: String) { self.name = name }

    static func == (a: KeyspaceName, b: KeyspaceName) -> Bool { sameUTF8(a.name, b.name) }

    func hash(into hasher: inout Hasher) {
        var name = name
        name.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}

/// One keyspace's table as seen by one connection, with that connection's prepared
/// statements for it. Owned by ``SQLiteConnection/tables`` (same thread-safety discipline).
/// A table of the store with statements cached for it (a keyspace's or a key set's).
protocol NamedSQLiteTable: AnyObject {
    /// The SQL name of the table.
    var table: String { get }
}

final class KeyspaceTable: NamedSQLiteTable {
    let id: Int64
    let name: String
    let table: String

    /// The keyspace's last sequence, valid when `sequenceSerial` equals the connection's
    /// current transaction serial (reloaded once per transaction otherwise).
    var lastSequence: UInt64
    var sequenceSerial: UInt64
    /// The transaction serial in which a purge ran, so `lastSequence` must be written back.
    var dirtySerial: UInt64 = 0

    var loadLastSequence: SQLiteStatement?
    var get: SQLiteStatement?
    var getWithoutExtra: SQLiteStatement?
    var insert: SQLiteStatement?
    var tombstone: SQLiteStatement?
    var purge: SQLiteStatement?
    var countAll: SQLiteStatement?
    var countLive: SQLiteStatement?
    /// Enumeration statements: 12 key-range shapes (see `rangeShape`) + 1 by-sequence, then
    /// the 12 key-range shapes again without the `extra` column, then the lookup of many keys.
    var enumerations = [SQLiteStatement?](repeating: nil, count: 26)
    static let sinceSlot = 12
    static let withoutExtraSlots = 13
    static let getManySlot = 25

    init(id: Int64, name: String, lastSequence: UInt64, serial: UInt64) {
        self.id = id
        self.name = name
        self.table = "kv_\(id)"
        self.lastSequence = lastSequence
        self.sequenceSerial = serial
    }
}

/// One ordered key set's `WITHOUT ROWID` table as seen by one connection, with that
/// connection's prepared statements for it. Owned by ``SQLiteConnection/keySets``.
final class KeySetTable: NamedSQLiteTable {
    let id: Int64
    let name: String
    let table: String

    var get: SQLiteStatement?
    var put: SQLiteStatement?
    /// The upsert of ``SQLiteTransaction/putsPerStatement`` rows at once.
    var putMany: SQLiteStatement?
    var remove: SQLiteStatement?
    /// Enumeration statements: 12 key-range shapes (see `rangeShape`).
    var enumerations = [SQLiteStatement?](repeating: nil, count: 12)

    init(id: Int64, name: String) {
        self.id = id
        self.name = name
        self.table = "ks_\(id)"
    }
}

/// A transaction on one connection: what ``SQLiteStorage/read(_:)`` and
/// ``SQLiteStorage/write(_:)`` hand to their closures. Invalid (every call throws `.closed`)
/// once its closure has returned, so an escaped reader can never touch a connection that has
/// gone back to the pool.
final class SQLiteTransaction: StorageWriter {
    private let connection: SQLiteConnection
    private let isWritable: Bool
    private var isValid = true
    /// The keyspace used last: a put loop into one keyspace skips the dictionary lookup.
    private var recent: KeyspaceTable?
    /// The key set used last, likewise.
    private var recentKeySet: KeySetTable?
    private var dirtyTables: [KeyspaceTable] = []
    private var changedSchema = false
    /// Key-set puts held back until the commit (see PendingKeySetPuts.swift in PeerSyncStorage).
    private var heldBackPuts = HeldBackKeySetPuts()
    /// The error of a failed write-out of held-back puts: the puts not written are gone, so
    /// this transaction must not commit even if its closure caught the error.
    private var writeOutError: (any Error)?

    init(connection: SQLiteConnection, writable: Bool) {
        self.connection = connection
        self.isWritable = writable
    }

    func invalidate() {
        isValid = false
        recent = nil
        recentKeySet = nil
    }

    /// Writes the sequence counters of keyspaces that had purges back and remembers the schema version the commit
    /// will leave, so the next transaction keeps this connection's caches. Call right before
    /// COMMIT, while the write lock is still held (nobody else can change the schema then).
    func prepareCommit() throws {
        if let writeOutError { throw writeOutError }
        try writePendingEntries()
        if !dirtyTables.isEmpty {
            let update = try connection.cached("UPDATE peersync_keyspaces SET last_seq = ?1 WHERE id = ?2")
            for table in dirtyTables {
                defer { update.reset() }
                try update.bind(1, Int64(clamping: table.lastSequence))
                try update.bind(2, table.id)
                _ = try update.step()
            }
            dirtyTables.removeAll()
        }
        if changedSchema {
            connection.schemaVersion = try connection.queryInteger("PRAGMA schema_version") ?? -1
        }
    }

    // MARK: Checks

    @inline(__always)
    private func checkValid() throws {
        guard isValid else {
            throw PeerSyncError(.closed, "a StorageReader/StorageWriter was used after its transaction ended")
        }
    }

    @inline(__always)
    private func checkWritable() throws {
        try checkValid()
        guard isWritable else {
            throw PeerSyncError(.storage, "write operation on a read-only transaction")
        }
    }

    // MARK: Keyspace tables

    /// The table of `name`, or nil if the keyspace does not exist and `create` is false.
    @inline(__always)
    private func table(_ name: String, create: Bool) throws -> KeyspaceTable? {
        if let recent, sameUTF8(recent.name, name) { return recent }
        return try lookUpTable(name, create: create)
    }

    private func lookUpTable(_ name: String, create: Bool) throws -> KeyspaceTable? {
        if let cached = connection.tables[KeyspaceName(name)] {
            recent = cached
            return cached
        }
        let lookup = try connection.cached("SELECT id FROM peersync_keyspaces WHERE name = ?1")
        var found: KeyspaceTable?
        do {
            defer { lookup.reset() }
            try lookup.bindText(1, name)
            if try lookup.step() {
                // The last sequence is loaded when first needed (serial 0 = not loaded).
                found = KeyspaceTable(id: lookup.int64(0), name: name, lastSequence: 0, serial: 0)
            }
        }
        if found == nil {
            guard create else { return nil }
            let insert = try connection.cached("INSERT INTO peersync_keyspaces (name, last_seq) VALUES (?1, 0)")
            do {
                defer { insert.reset() }
                try insert.bindText(1, name)
                _ = try insert.step()
            }
            let table = KeyspaceTable(id: connection.lastInsertRowID, name: name, lastSequence: 0,
                                      serial: connection.transactionSerial)
            try connection.execute(SQLiteSchema.createKeyspaceTable(table.table))
            changedSchema = true
            found = table
        }
        if connection.tables.count >= Self.maxCachedTables { evictCachedTables() }
        connection.tables[KeyspaceName(name)] = found
        recent = found
        return found
    }

    /// Keyspace tables (each with up to 20 prepared statements) cached per connection: a store
    /// with thousands of keyspaces must not keep thousands of statements on every connection.
    static let maxCachedTables = 64

    /// Forgets the cached tables, except those whose purges this transaction must still write
    /// back at commit (their in-memory last sequence may be ahead of what the database shows).
    /// A table an enumeration is using stays alive through that enumeration's references.
    private func evictCachedTables() {
        let serial = connection.transactionSerial
        connection.tables = connection.tables.filter { $0.value.dirtySerial == serial }
    }

    private func lastSequence(of table: KeyspaceTable) throws -> UInt64 {
        if table.sequenceSerial == connection.transactionSerial { return table.lastSequence }
        let query = try statement(\.loadLastSequence, of: table) {
            "SELECT max(ifnull((SELECT max(seq) FROM \($0)), 0), last_seq) FROM peersync_keyspaces WHERE id = ?1"
        }
        defer { query.reset() }
        try query.bind(1, table.id)
        guard try query.step() else {
            throw PeerSyncError(.corrupt, "keyspace table has no metadata row",
                                context: ["keyspace": table.name, "table": table.table])
        }
        table.lastSequence = query.uint64(0)
        table.sequenceSerial = connection.transactionSerial
        return table.lastSequence
    }

    @inline(__always)
    private func nextSequence(of table: KeyspaceTable) throws -> UInt64 {
        let last = try lastSequence(of: table)
        guard last < UInt64(Int64.max) else {
            throw PeerSyncError(.storage, "sequence numbers exhausted", context: ["keyspace": table.name])
        }
        return last + 1
    }

    /// Remembers that a purge ran: the last sequence is written to the metadata row at commit.
    private func markPurged(_ table: KeyspaceTable) {
        if table.dirtySerial != connection.transactionSerial {
            table.dirtySerial = connection.transactionSerial
            dirtyTables.append(table)
        }
    }

    /// The statement cached in `slot` of `table` (a keyspace's or a key set's), prepared from
    /// `sql` over the table's name and cached on first use.
    @inline(__always)
    private func statement<Table: NamedSQLiteTable>(_ slot: ReferenceWritableKeyPath<Table, SQLiteStatement?>,
                                                    of table: Table, _ sql: (String) -> String) throws -> SQLiteStatement {
        if let statement = table[keyPath: slot] { return statement }
        let statement = try SQLiteStatement(db: connection.db, sql: sql(table.table))
        table[keyPath: slot] = statement
        return statement
    }

    /// Runs an enumeration statement of `table`: the cached one, or a temporary one when the
    /// cached one is busy (an enumeration started from inside another's callback).
    private func enumerate(_ table: KeyspaceTable, slot: Int, sql: (String) -> String,
                           _ run: (SQLiteStatement) throws -> Void) throws {
        let statement = try enumerationStatement(table.enumerations[slot], table: table.table, sql: sql) {
            table.enumerations[slot] = $0
        }
        try runEnumeration(statement, run)
    }

    /// `cached` when it is idle, a temporary copy when it is busy (an enumeration started from
    /// inside another's callback), or, with none cached, a new statement handed to `cache`.
    private func enumerationStatement(_ cached: SQLiteStatement?, table: String, sql: (String) -> String,
                                      cache: (SQLiteStatement) -> Void) throws -> SQLiteStatement {
        if let cached {
            return cached.inUse ? try SQLiteStatement(db: connection.db, sql: cached.sql, persistent: false) : cached
        }
        let statement = try SQLiteStatement(db: connection.db, sql: sql(table))
        cache(statement)
        return statement
    }

    private func runEnumeration(_ statement: SQLiteStatement, _ run: (SQLiteStatement) throws -> Void) throws {
        statement.inUse = true
        connection.activeEnumerations += 1
        defer {
            statement.reset()
            statement.inUse = false
            connection.activeEnumerations -= 1
        }
        try run(statement)
    }

    /// The enumeration slot (0..<12) of a key range: lower bound or not (1), no/exclusive/
    /// inclusive upper bound (0/2/4), ascending or descending (0/6); and its SQL over `table`
    /// selecting `columns`.
    private static func rangeShape(_ range: KeyRange, descending: Bool) -> Int {
        (range.lowerBound == nil ? 0 : 1)
            + (range.upperBound == nil ? 0 : (range.includesUpperBound ? 4 : 2))
            + (descending ? 6 : 0)
    }

    private static func rangeSQL(_ table: String, columns: String, _ range: KeyRange, descending: Bool) -> String {
        var conditions: [String] = []
        if range.lowerBound != nil { conditions.append("key >= ?1") }
        if range.upperBound != nil { conditions.append(range.includesUpperBound ? "key <= ?2" : "key < ?2") }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        return "SELECT \(columns) FROM \(table)\(filter) ORDER BY key\(descending ? " DESC" : "")"
    }

    /// Reads the current row of a `SELECT seq, key, flags, version, body, extra` statement
    /// (without `extra`: `extra` false, the record's left empty).
    @inline(__always)
    private func record(_ row: SQLiteStatement, extra: Bool = true) -> Record {
        Record(key: row.text(1), sequence: row.uint64(0),
               flags: RecordFlags(rawValue: UInt32(truncatingIfNeeded: row.int64(2))),
               version: row.bytes(3), body: row.bytes(4), extra: extra ? row.bytes(5) : [])
    }

    // MARK: StorageReader

    func keyspaces() throws -> [String] {
        try checkValid()
        // BINARY collation: UTF-8 byte order, like keys.
        return try connection.queryTexts("SELECT name FROM peersync_keyspaces ORDER BY name")
    }

    func get(_ key: String, in keyspace: String) throws -> Record? {
        try select(key, in: keyspace, withExtra: true)
    }

    func getWithoutExtra(_ key: String, in keyspace: String) throws -> Record? {
        try select(key, in: keyspace, withExtra: false)
    }

    /// The record of `key`, with its `extra` bytes or without them (an empty `extra`: the
    /// column is not selected).
    private func select(_ key: String, in keyspace: String, withExtra: Bool) throws -> Record? {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return nil }
        let select = withExtra
            ? try statement(\.get, of: table) { "SELECT seq, flags, version, body, extra FROM \($0) WHERE key = ?1" }
            : try statement(\.getWithoutExtra, of: table) { "SELECT seq, flags, version, body FROM \($0) WHERE key = ?1" }
        var keyCopy = key
        return try keyCopy.withUTF8 { keyBytes in
            defer { select.reset() }
            try select.bindTextNoCopy(1, keyBytes)
            guard try select.step() else { return nil }
            return Record(key: key, sequence: select.uint64(0),
                          flags: RecordFlags(rawValue: UInt32(truncatingIfNeeded: select.int64(1))),
                          version: select.bytes(2), body: select.bytes(3), extra: withExtra ? select.bytes(4) : [])
        }
    }

    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws {
        try enumerate(in: keyspace, range: range, descending: descending, extra: true, body)
    }

    /// Keys looked up by one run of the statement of ``getManyWithoutExtra(_:in:_:)``.
    static let keysPerLookup = 64

    /// ``StorageReader/getManyWithoutExtra(_:in:_:)`` in runs of ``keysPerLookup`` keys, each
    /// run one statement (`key IN (…) ORDER BY key`, the order of the key index): a lookup of
    /// one key each cost opening the table and its key index anew, as much again as finding
    /// the row (profiled on a query fetching 100 documents through an index).
    func getManyWithoutExtra(_ keys: [String], in keyspace: String, _ body: (Record) throws -> Bool) throws {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return }
        let sorted = sortedUniqueKeys(keys)
        if sorted.count < 2 {
            if let key = sorted.first, let record = try getWithoutExtra(key, in: keyspace) { _ = try body(record) }
            return
        }
        try enumerate(table, slot: KeyspaceTable.getManySlot, sql: { name in
            let parameters = (1...Self.keysPerLookup).map { "?\($0)" }.joined(separator: ", ")
            return "SELECT \(SQLiteSchema.recordColumnsWithoutExtra) FROM \(name) WHERE key IN (\(parameters)) ORDER BY key"
        }) { rows in
            // One run's keys in one buffer, bound without copying; parameters left unbound
            // (the last run) are NULL, which no key equals.
            var arena: [UInt8] = []
            var ends: [Int] = []
            var start = 0
            while start < sorted.count {
                let end = min(start + Self.keysPerLookup, sorted.count)
                arena.removeAll(keepingCapacity: true)
                ends.removeAll(keepingCapacity: true)
                for key in sorted[start..<end] {
                    arena.append(contentsOf: key.utf8)
                    ends.append(arena.count)
                }
                let stopped = try arena.withUnsafeBufferPointer { buffer in
                    defer { rows.reset() }
                    var from = 0
                    for (i, to) in ends.enumerated() {
                        try rows.bindTextNoCopy(Int32(i + 1), UnsafeBufferPointer(rebasing: buffer[from..<to]))
                        from = to
                    }
                    while try rows.step() {
                        guard try body(record(rows, extra: false)) else { return true }
                    }
                    return false
                }
                if stopped { return }
                start = end
            }
        }
    }

    func enumerateWithoutExtra(in keyspace: String, range: KeyRange, descending: Bool,
                               _ body: (Record) throws -> Bool) throws {
        try enumerate(in: keyspace, range: range, descending: descending, extra: false, body)
    }

    /// The records in `range`, with their `extra` column or without it (left empty).
    @inline(__always)
    private func enumerate(in keyspace: String, range: KeyRange, descending: Bool, extra: Bool,
                           _ body: (Record) throws -> Bool) throws {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return }
        let shape = Self.rangeShape(range, descending: descending)
        let columns = extra ? SQLiteSchema.recordColumns : SQLiteSchema.recordColumnsWithoutExtra
        try enumerate(table, slot: extra ? shape : KeyspaceTable.withoutExtraSlots + shape, sql: { name in
            Self.rangeSQL(name, columns: columns, range, descending: descending)
        }) { rows in
            if let lower = range.lowerBound { try rows.bindText(1, lower) }
            if let upper = range.upperBound { try rows.bindText(2, upper) }
            while try rows.step() {
                guard try body(record(rows, extra: extra)) else { break }
            }
        }
    }

    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return }
        // Bounded by the last sequence at the start, so records re-put by `body` (which move
        // to new, higher sequences) are not visited again in an endless loop.
        let last = try lastSequence(of: table)
        guard since < last else { return }
        try enumerate(table, slot: KeyspaceTable.sinceSlot, sql: {
            "SELECT \(SQLiteSchema.recordColumns) FROM \($0) WHERE seq > ?1 AND seq <= ?2 ORDER BY seq"
        }) { rows in
            try rows.bind(1, Int64(clamping: since))
            try rows.bind(2, Int64(clamping: last))
            while try rows.step() {
                guard try body(record(rows)) else { break }
            }
        }
    }

    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return 0 }
        let query = includeDeleted
            ? try statement(\.countAll, of: table) { "SELECT count(*) FROM \($0)" }
            : try statement(\.countLive, of: table) {
                "SELECT count(*) FROM \($0) WHERE (flags & \(RecordFlags.deleted.rawValue)) = 0"
            }
        defer { query.reset() }
        return try query.step() ? Int(clamping: query.int64(0)) : 0
    }

    func lastSequence(in keyspace: String) throws -> UInt64 {
        try checkValid()
        guard let table = try table(keyspace, create: false) else { return 0 }
        return try lastSequence(of: table)
    }

    // MARK: StorageWriter

    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        try checkWritable()
        guard let table = try table(keyspace, create: true) else {
            throw PeerSyncError(.internalError, "keyspace was not created", context: ["keyspace": keyspace])
        }
        let sequence = try nextSequence(of: table)
        // An upsert, not INSERT OR REPLACE: REPLACE would also apply to the explicit rowid
        // (seq), which makes SQLite treat every insert as a possible multi-row write and keep a
        // statement journal (profiled: +45% instructions on a bulk insert).
        let insert = try table.insert ?? statement(\.insert, of: table) {
            "INSERT INTO \($0) (\(SQLiteSchema.recordColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, flags = excluded.flags, version = excluded.version, body = excluded.body, extra = excluded.extra"
        }
        // Every buffer is bound with SQLITE_STATIC (no copy) and the statement is reset, which
        // clears the bindings, before the buffers' scopes end.
        var key = record.key
        try key.withUTF8 { keyBytes in
            try record.version.withUnsafeBytes { version in
                try record.body.withUnsafeBytes { body in
                    try record.extra.withUnsafeBytes { extra in
                        defer { insert.reset() }
                        try insert.bind(1, Int64(sequence))
                        try insert.bindTextNoCopy(2, keyBytes)
                        try insert.bind(3, Int64(record.flags.rawValue))
                        try insert.bindBlobNoCopy(4, version)
                        try insert.bindBlobNoCopy(5, body)
                        try insert.bindBlobNoCopy(6, extra)
                        _ = try insert.step()
                    }
                }
            }
        }
        table.lastSequence = sequence
        return sequence
    }

    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        try checkWritable()
        guard let table = try table(keyspace, create: false) else { return nil }
        let sequence = try nextSequence(of: table)
        let update = try statement(\.tombstone, of: table) {
            "UPDATE \($0) SET seq = ?1, flags = flags | \(RecordFlags.deleted.rawValue), body = x'' WHERE key = ?2"
        }
        var key = key
        try key.withUTF8 { keyBytes in
            defer { update.reset() }
            try update.bind(1, Int64(sequence))
            try update.bindTextNoCopy(2, keyBytes)
            _ = try update.step()
        }
        guard connection.changes > 0 else { return nil }
        table.lastSequence = sequence
        return sequence
    }

    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool {
        try checkWritable()
        guard let table = try table(keyspace, create: false) else { return false }
        let delete = try statement(\.purge, of: table) { "DELETE FROM \($0) WHERE key = ?1" }
        _ = try lastSequence(of: table)  // loaded before the purge may remove the newest record
        var key = key
        try key.withUTF8 { keyBytes in
            defer { delete.reset() }
            try delete.bindTextNoCopy(1, keyBytes)
            _ = try delete.step()
        }
        guard connection.changes > 0 else { return false }
        markPurged(table)
        return true
    }

    func dropKeyspace(_ keyspace: String) throws {
        try checkWritable()
        // SQLite cannot drop a table while a statement of the connection is reading, and
        // the enumeration's statements would be finalized under its feet.
        guard connection.activeEnumerations == 0 else {
            throw PeerSyncError(.storage, "dropKeyspace cannot run inside an enumeration callback",
                                context: ["keyspace": keyspace])
        }
        guard let table = try table(keyspace, create: false) else { return }
        connection.tables[KeyspaceName(keyspace)] = nil
        recent = nil
        try connection.execute("DROP TABLE \(table.table)")
        let delete = try connection.cached("DELETE FROM peersync_keyspaces WHERE id = ?1")
        do {
            defer { delete.reset() }
            try delete.bind(1, table.id)
            _ = try delete.step()
        }
        dirtyTables.removeAll { $0 === table }
        changedSchema = true
    }
}

// MARK: Ordered key sets

extension SQLiteTransaction {
    /// The table of key set `name`, or nil if it does not exist and `create` is false.
    @inline(__always)
    private func keySet(_ name: String, create: Bool) throws -> KeySetTable? {
        if let recentKeySet, sameUTF8(recentKeySet.name, name) { return recentKeySet }
        return try lookUpKeySet(name, create: create)
    }

    private func lookUpKeySet(_ name: String, create: Bool) throws -> KeySetTable? {
        if let cached = connection.keySets[KeyspaceName(name)] {
            recentKeySet = cached
            return cached
        }
        let hasCatalog: Bool
        if let known = connection.hasKeySetCatalog {
            hasCatalog = known
        } else {
            hasCatalog = try connection.queryInteger(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'peersync_keysets'") ?? 0 > 0
            connection.hasKeySetCatalog = hasCatalog
        }
        var found: KeySetTable?
        if hasCatalog {
            let lookup = try connection.cached("SELECT id FROM peersync_keysets WHERE name = ?1")
            defer { lookup.reset() }
            try lookup.bindText(1, name)
            if try lookup.step() { found = KeySetTable(id: lookup.int64(0), name: name) }
        }
        if found == nil {
            guard create else { return nil }
            if !hasCatalog {
                try connection.execute(SQLiteSchema.createKeySetCatalog)
                connection.hasKeySetCatalog = true
            }
            let insert = try connection.cached("INSERT INTO peersync_keysets (name) VALUES (?1)")
            do {
                defer { insert.reset() }
                try insert.bindText(1, name)
                _ = try insert.step()
            }
            let table = KeySetTable(id: connection.lastInsertRowID, name: name)
            try connection.execute(SQLiteSchema.createKeySetTable(table.table))
            changedSchema = true
            found = table
        }
        if connection.keySets.count >= Self.maxCachedTables { connection.keySets.removeAll() }
        connection.keySets[KeyspaceName(name)] = found
        recentKeySet = found
        return found
    }

    func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]? {
        try checkValid()
        if let pending = heldBackPuts.pending(keySet) { try writeOut(pending) }
        guard let table = try self.keySet(keySet, create: false) else { return nil }
        let select = try statement(\.get, of: table) { "SELECT value FROM \($0) WHERE key = ?1" }
        var key = key
        return try key.withUTF8 { keyBytes in
            defer { select.reset() }
            try select.bindTextNoCopy(1, keyBytes)
            return try select.step() ? select.bytes(0) : nil
        }
    }

    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws {
        try checkValid()
        if let pending = heldBackPuts.pending(keySet) { try writeOut(pending) }
        guard let table = try self.keySet(keySet, create: false) else { return }
        let slot = Self.rangeShape(range, descending: descending)
        let statement = try enumerationStatement(table.enumerations[slot], table: table.table, sql: { name in
            Self.rangeSQL(name, columns: "key, value", range, descending: descending)
        }, cache: { table.enumerations[slot] = $0 })
        try runEnumeration(statement) { rows in
            if let lower = range.lowerBound { try rows.bindText(1, lower) }
            if let upper = range.upperBound { try rows.bindText(2, upper) }
            while try rows.step() {
                guard try body(rows.text(0), rows.bytes(1)) else { break }
            }
        }
    }

    /// Held back until the commit, or until the transaction reads or removes entries of the
    /// key set (see PendingKeySetPuts.swift in PeerSyncStorage).
    func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) throws {
        try checkWritable()
        if heldBackPuts.hold(key, value, inKeySet: keySet) { try writePendingEntries() }
    }

    @discardableResult
    func removeEntry(_ key: String, inKeySet keySet: String) throws -> Bool {
        try checkWritable()
        if let pending = heldBackPuts.pending(keySet) { try writeOut(pending) }
        guard let table = try self.keySet(keySet, create: false) else { return false }
        let delete = try statement(\.remove, of: table) { "DELETE FROM \($0) WHERE key = ?1" }
        var key = key
        try key.withUTF8 { keyBytes in
            defer { delete.reset() }
            try delete.bindTextNoCopy(1, keyBytes)
            _ = try delete.step()
        }
        return connection.changes > 0
    }

    /// Writes every held-back put, each key set's in key order.
    private func writePendingEntries() throws {
        for pending in heldBackPuts.takeAll() { try writeOut(pending) }
    }

    /// Rows per statement when held-back puts are written out.
    static let putsPerStatement = 64

    /// Writes the held-back puts of one key set in key order (creating the key set), whole
    /// groups of ``putsPerStatement`` by one multi-row upsert, the rest one by one.
    private func writeOut(_ pending: PendingKeySetPuts) throws {
        if pending.isEmpty { return }
        guard let table = try self.keySet(pending.name, create: true) else {
            throw PeerSyncError(.internalError, "key set was not created", context: ["keySet": pending.name])
        }
        let puts = pending.takeSorted()
        do {
            // Upserts (as for records): no REPLACE conflict handling, no statement journal. A
            // key put twice comes twice, in the order of its puts: the last one wins. Keys and
            // values are bound without copying, straight from the run's bytes.
            let upsert = " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            let many = puts.count >= Self.putsPerStatement
                ? try statement(\.putMany, of: table) { name in
                    let rows = (0..<Self.putsPerStatement).map { "(?\(2 * $0 + 1), ?\(2 * $0 + 2))" }
                    return "INSERT INTO \(name) (key, value) VALUES " + rows.joined(separator: ", ") + upsert
                }
                : nil
            let single = puts.count % Self.putsPerStatement != 0
                ? try statement(\.put, of: table) { "INSERT INTO \($0) (key, value) VALUES (?1, ?2)" + upsert }
                : nil
            try puts.bytes.withUnsafeBufferPointer { buffer in
                // Nil only when every key and value is empty: bound as empty then.
                let base = buffer.baseAddress
                func key(_ span: KeySetPutSpan) -> UnsafeBufferPointer<UInt8> {
                    UnsafeBufferPointer(start: base.map { $0 + span.keyStart }, count: span.keyCount)
                }
                func value(_ span: KeySetPutSpan) -> UnsafeRawBufferPointer {
                    UnsafeRawBufferPointer(start: base.map { UnsafeRawPointer($0 + span.valueStart) }, count: span.valueCount)
                }
                var start = 0
                if let many {
                    while puts.count - start >= Self.putsPerStatement {
                        defer { many.reset() }
                        for i in 0..<Self.putsPerStatement {
                            let span = puts.spans[start + i]
                            try many.bindTextNoCopy(Int32(2 * i + 1), key(span))
                            try many.bindBlobNoCopy(Int32(2 * i + 2), value(span))
                        }
                        _ = try many.step()
                        start += Self.putsPerStatement
                    }
                }
                if let single {
                    for span in puts.spans[start...] {
                        defer { single.reset() }
                        try single.bindTextNoCopy(1, key(span))
                        try single.bindBlobNoCopy(2, value(span))
                        _ = try single.step()
                    }
                }
            }
        } catch {
            writeOutError = error
            throw error
        }
    }

    func dropKeySet(_ keySet: String) throws {
        try checkWritable()
        guard connection.activeEnumerations == 0 else {
            throw PeerSyncError(.storage, "dropKeySet cannot run inside an enumeration callback",
                                context: ["keySet": keySet])
        }
        heldBackPuts.forget(keySet)
        guard let table = try self.keySet(keySet, create: false) else { return }
        connection.keySets[KeyspaceName(keySet)] = nil
        recentKeySet = nil
        try connection.execute("DROP TABLE \(table.table)")
        let delete = try connection.cached("DELETE FROM peersync_keysets WHERE id = ?1")
        do {
            defer { delete.reset() }
            try delete.bind(1, table.id)
            _ = try delete.step()
        }
        changedSchema = true
    }
}
