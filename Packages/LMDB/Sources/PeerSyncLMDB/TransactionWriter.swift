import PeerSyncCore
import PeerSyncStorage

// The ``StorageWriter`` part of ``LMDBTransaction``: each public write runs its core operation
// through `perform` (which grows the map and replays on `MDB_MAP_FULL`) and then records it in
// the journal; the cores below write the records and sequence index and keep the keyspace
// counters, without journaling or growth handling (the replay calls them too).
extension LMDBTransaction {
    @discardableResult
    func put(_ record: Record, in keyspace: String) throws -> UInt64 {
        try ensureWritable()
        guard record.key.utf8.count <= Layout.maxRecordKeySize else {
            throw PeerSyncError(.tooLarge, "the record key is longer than \(Layout.maxRecordKeySize) bytes",
                                context: ["keyspace": keyspace, "keyLength": String(record.key.utf8.count)])
        }
        guard keyspace.utf8.count <= Layout.maxKeyspaceNameSize else {
            throw PeerSyncError(.tooLarge, "the keyspace name is longer than \(Layout.maxKeyspaceNameSize) bytes",
                                context: ["keyspace": keyspace])
        }
        guard let size = RecordHeader.storedSize(record) else {
            throw PeerSyncError(.tooLarge, "the record is larger than LMDB's 4 GiB value limit",
                                context: ["keyspace": keyspace, "key": record.key])
        }
        let sequence = try perform { () throws(PeerSyncError) in try putCore(record, keyspace, storedSize: size) }
        journal.append(.put(record, keyspace: keyspace, sequence: sequence, storedSize: size))
        journalBytes &+= size &+ record.key.utf8.count &+ 64
        return sequence
    }

    @discardableResult
    func delete(_ key: String, in keyspace: String) throws -> UInt64? {
        try ensureWritable()
        let sequence = try perform { () throws(PeerSyncError) in try deleteCore(key, keyspace) }
        if sequence != nil {
            journal.append(.delete(key: key, keyspace: keyspace, sequence: sequence))
            journalBytes &+= key.utf8.count &+ 64
        }
        return sequence
    }

    @discardableResult
    func purge(_ key: String, in keyspace: String) throws -> Bool {
        try ensureWritable()
        let existed = try perform { () throws(PeerSyncError) in try purgeCore(key, keyspace) }
        if existed {
            journal.append(.purge(key: key, keyspace: keyspace, existed: true))
            journalBytes &+= key.utf8.count &+ 64
        }
        return existed
    }

    func dropKeyspace(_ keyspace: String) throws {
        try ensureWritable()
        let existed = try perform { () throws(PeerSyncError) in try dropCore(keyspace) }
        if existed {
            journal.append(.drop(keyspace: keyspace))
            journalBytes &+= 64
        }
    }

    // MARK: Ordered key sets: keyspaces without sequence index entries

    /// Held back until the commit, or until the transaction reads or removes entries of the
    /// key set (see PendingKeySetPuts.swift in PeerSyncStorage); checked for size now.
    func putEntry(_ key: String, value: [UInt8], inKeySet keySet: String) throws {
        try ensureWritable()
        guard key.utf8.count <= Layout.maxRecordKeySize else {
            throw PeerSyncError(.tooLarge, "the entry key is longer than \(Layout.maxRecordKeySize) bytes",
                                context: ["keySet": keySet, "keyLength": String(key.utf8.count)])
        }
        guard keySet.utf8.count <= Layout.maxKeyspaceNameSize else {
            throw PeerSyncError(.tooLarge, "the key set name is longer than \(Layout.maxKeyspaceNameSize) bytes",
                                context: ["keySet": keySet])
        }
        guard value.count <= RecordHeader.maxBodySize else {
            throw PeerSyncError(.tooLarge, "the entry is larger than LMDB's 4 GiB value limit",
                                context: ["keySet": keySet, "key": key])
        }
        if heldBackPuts.hold(key, value, inKeySet: keySet) { try writePendingEntries() }
    }

    @discardableResult
    func removeEntry(_ key: String, inKeySet keySet: String) throws -> Bool {
        try ensureWritable()
        try writePendingEntries(of: keySet)
        let existed = try perform { () throws(PeerSyncError) in try purgeCore(key, keySet, keySet: true) }
        if existed {
            journal.append(.removeEntry(key: key, keySet: keySet, existed: true))
            journalBytes &+= key.utf8.count &+ 64
        }
        return existed
    }

    func dropKeySet(_ keySet: String) throws {
        try ensureWritable()
        heldBackPuts.forget(keySet)
        let existed = try perform { () throws(PeerSyncError) in try dropCore(keySet, keySet: true) }
        if existed {
            journal.append(.dropKeySet(keySet: keySet))
            journalBytes &+= 64
        }
    }

    // MARK: Held-back key-set puts

    /// Writes the held-back puts of key set `name`, if any, in key order (before the
    /// transaction reads, enumerates or removes its entries).
    @inline(__always)
    func writePendingEntries(of name: String) throws(PeerSyncError) {
        if let pending = heldBackPuts.pending(name) { try writeOut(pending) }
    }

    /// Writes every held-back put, each key set's in key order.
    func writePendingEntries() throws(PeerSyncError) {
        for pending in heldBackPuts.takeAll() { try writeOut(pending) }
    }

    /// Writes the held-back puts of one key set in key order (creating the key set).
    /// Consecutive keys land in the same leaf page, which LMDB's cursor put finds without
    /// descending the tree again. The run is journaled whole before it is written (one journal
    /// entry, not one per put): a map growth part-way through replays the journal, this run
    /// included, into the new transaction, so nothing of it is left to write afterwards. A
    /// failure poisons the transaction (`perform`): the puts not written are gone.
    private func writeOut(_ pending: PendingKeySetPuts) throws(PeerSyncError) {
        if pending.isEmpty { return }
        let keySet = pending.name
        let puts = pending.takeSorted()
        // Counted as journaled single puts would be: per put its stored size (header + value),
        // its key, and 64.
        journalBytes &+= puts.count &* (RecordHeader.size &+ 64) &+ puts.valueByteCount &+ puts.keyByteCount
        journal.append(.putEntries(puts, keySet: keySet))
        let before = generation
        try perform { () throws(PeerSyncError) in
            // Run again after the map grew (a new LMDB transaction): the replay wrote it all.
            if generation != before { return }
            try putEntriesCore(puts, keySet)
        }
    }

    // MARK: Write internals (no journaling, no growth handling)

    @inline(__always)
    private func writeCursor(records: Bool) throws(PeerSyncError) -> Cursor {
        if records {
            if let c = recordsCursor, c.isUsable { return c }
            let c = try Cursor(try currentTxn(), env.records)
            recordsCursor = c
            return c
        } else {
            if let c = sequencesCursor, c.isUsable { return c }
            let c = try Cursor(try currentTxn(), env.sequences)
            sequencesCursor = c
            return c
        }
    }

    /// Puts `puts` into key set `keySet` (creating it), in order, as ``putCore(_:_:storedSize:keySet:)``
    /// puts each entry as a `Record` with the value as its body (the same stored bytes: a
    /// header with the next sequence, no flags, no version or extra, then the value), without
    /// building one: the key set is looked up once, and each key and value is copied into
    /// LMDB straight from the run's bytes. No journaling, no growth handling.
    func putEntriesCore(_ puts: SortedKeySetPuts, _ keySet: String) throws(PeerSyncError) {
        if puts.isEmpty { return }
        let ks: KeyspaceState
        if let existing = try lookupKeyspace(keySet, keySet: true) {
            ks = existing
        } else {
            ks = try createKeyspace(keySet, keySet: true)
        }
        let cursor = try writeCursor(records: true)
        // Running enumerations that must keep pre-images: only they need `noteMutation` per
        // put (none can start during the run: no caller code runs in it).
        let watched = !replaying && (keyOverlays.contains { $0.id == ks.id } || seqOverlays.contains { $0.id == ks.id })
        mutations &+= 1
        // The counters are kept in locals and stored back whatever happens (a failure poisons
        // the transaction or, on a map growth, the replay rereads them).
        var lastSequence = ks.lastSequence
        var liveCount = ks.liveCount
        var deletedCount = ks.deletedCount
        defer {
            ks.lastSequence = lastSequence
            ks.liveCount = liveCount
            ks.deletedCount = deletedCount
            ks.dirty = true
        }
        let id = ks.id.bigEndian
        let keyBase = keyBuffer.base
        let keyLimit = min(Layout.maxLMDBKeySize, keyBuffer.capacity) - 4
        let deleted = RecordFlags.deleted.rawValue
        func write(_ raw: UnsafeRawBufferPointer) throws(PeerSyncError) {
            // Nil only when every key and value is empty.
            let base = raw.baseAddress
            for span in puts.spans {
                guard lastSequence < UInt64.max else {
                    throw PeerSyncError(.storage, "sequence numbers are exhausted", context: ["keyspace": keySet])
                }
                let sequence = lastSequence + 1
                guard span.keyCount <= keyLimit else {   // checked by `putEntry`
                    throw PeerSyncError(.tooLarge, "the entry key is too long", context: ["keySet": keySet])
                }
                keyBase.storeBytes(of: id, as: UInt32.self)
                if span.keyCount > 0, let base {
                    (keyBase + 4).copyMemory(from: base + span.keyStart, byteCount: span.keyCount)
                }
                let key = UnsafeRawBufferPointer(start: keyBase, count: 4 + span.keyCount)
                let size = RecordHeader.size + span.valueCount
                let dest: UnsafeMutableRawPointer
                switch try cursor.reserveNew(key: key, size: size, context: Self.entryContext(keySet, key)) {
                case .exists(let stored):
                    // `stored` is the stored entry: read what we need before replacing it in place.
                    let old = try RecordHeader.parse(stored)
                    if watched { try noteMutation(ks.id, key, old: stored) }
                    let data = try cursor.reserveCurrent(key: key, size: size, context: Self.entryContext(keySet, key))
                    guard let address = data.baseAddress else { throw noTransaction() }
                    dest = address
                    if old.flags & deleted != 0 {
                        deletedCount = deletedCount > 0 ? deletedCount - 1 : 0
                    } else {
                        liveCount = liveCount > 0 ? liveCount - 1 : 0
                    }
                case .reserved(let data):
                    guard let address = data.baseAddress else { throw noTransaction() }
                    dest = address
                    if watched { try noteMutation(ks.id, key, old: nil) }
                }
                RecordHeader.write(sequence: sequence, flags: 0, versionCount: 0, extraCount: 0, to: dest)
                if span.valueCount > 0, let base {
                    (dest + RecordHeader.size).copyMemory(from: base + span.valueStart, byteCount: span.valueCount)
                }
                liveCount &+= 1
                lastSequence = sequence
            }
        }
        // `withUnsafeBytes` rethrows untyped errors: the loop's error is carried out by hand.
        var failure: PeerSyncError?
        puts.bytes.withUnsafeBytes { raw in
            do throws(PeerSyncError) {
                try write(raw)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// The error context of a key-set entry whose full key (ID + entry key) is `key`.
    private static func entryContext(_ keySet: String, _ key: UnsafeRawBufferPointer) -> [String: String] {
        ["keyspace": keySet, "key": String(decoding: UnsafeRawBufferPointer(rebasing: key[4...]), as: UTF8.self)]
    }

    /// With `keySet`, `keyspace` names an ordered key set: no sequence index entries.
    func putCore(_ record: Record, _ keyspace: String, storedSize: Int, keySet: Bool = false) throws(PeerSyncError) -> UInt64 {
        let ks: KeyspaceState
        if let existing = try lookupKeyspace(keyspace, keySet: keySet) {
            ks = existing
        } else {
            ks = try createKeyspace(keyspace, keySet: keySet)
        }
        guard ks.lastSequence < UInt64.max else {
            throw PeerSyncError(.storage, "sequence numbers are exhausted", context: ["keyspace": keyspace])
        }
        let sequence = ks.lastSequence + 1
        guard let key = keyBuffer.write(prefix: ks.id, text: record.key, limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.tooLarge, "the record key is too long", context: ["keyspace": keyspace])
        }
        let cursor = try writeCursor(records: true)
        switch try cursor.reserveNew(key: key, size: storedSize, context: ["keyspace": keyspace, "key": record.key]) {
        case .exists(let stored):
            // `stored` is the stored record: read what we need before replacing it in place.
            let old = try RecordHeader.parse(stored)
            try noteMutation(ks.id, key, old: stored)
            let data = try cursor.reserveCurrent(key: key, size: storedSize,
                                                 context: ["keyspace": keyspace, "key": record.key])
            guard let dest = data.baseAddress else { throw noTransaction() }
            RecordHeader.encode(record, sequence: sequence, into: dest)
            if !keySet { try deleteSequenceEntry(ks.id, old.sequence) }
            ks.count(old.flags, -1)
        case .reserved(let data):
            guard let dest = data.baseAddress else { throw noTransaction() }
            RecordHeader.encode(record, sequence: sequence, into: dest)
            try noteMutation(ks.id, key, old: nil)
        }
        if !keySet { try putSequenceEntry(ks.id, sequence, key: record.key) }
        ks.count(record.flags.rawValue, 1)
        ks.lastSequence = sequence
        return sequence
    }

    func deleteCore(_ keyString: String, _ keyspace: String) throws(PeerSyncError) -> UInt64? {
        guard let ks = try lookupKeyspace(keyspace),
              let key = keyBuffer.write(prefix: ks.id, text: keyString, limit: Layout.maxLMDBKeySize) else { return nil }
        let cursor = try writeCursor(records: true)
        guard let data = try cursor.find(key, context: ["keyspace": keyspace, "key": keyString]) else { return nil }
        guard ks.lastSequence < UInt64.max else {
            throw PeerSyncError(.storage, "sequence numbers are exhausted", context: ["keyspace": keyspace])
        }
        let old = try RecordHeader.parse(data)
        try noteMutation(ks.id, key, old: data)
        // Keep version and extra: copy them out, the node is rewritten below.
        let kept = old.versionCount + old.extraCount
        scratch.removeAll(keepingCapacity: true)
        if kept > 0, let src = data.baseAddress {
            scratch.append(contentsOf: UnsafeRawBufferPointer(start: src + RecordHeader.size, count: kept))
        }
        let sequence = ks.lastSequence + 1
        let newFlags = old.flags | RecordFlags.deleted.rawValue
        let newData = try cursor.reserveCurrent(key: key, size: RecordHeader.size + kept,
                                                context: ["keyspace": keyspace, "key": keyString])
        guard let dest = newData.baseAddress else { throw noTransaction() }
        RecordHeader.write(sequence: sequence, flags: newFlags, versionCount: old.versionCount,
                           extraCount: old.extraCount, to: dest)
        if kept > 0 {
            scratch.withUnsafeBytes { src in
                if let s = src.baseAddress { (dest + RecordHeader.size).copyMemory(from: s, byteCount: kept) }
            }
        }
        try deleteSequenceEntry(ks.id, old.sequence)
        try putSequenceEntry(ks.id, sequence, key: keyString)
        ks.count(old.flags, -1)
        ks.count(newFlags, 1)
        ks.lastSequence = sequence
        return sequence
    }

    func purgeCore(_ keyString: String, _ keyspace: String, keySet: Bool = false) throws(PeerSyncError) -> Bool {
        guard let ks = try lookupKeyspace(keyspace, keySet: keySet),
              let key = keyBuffer.write(prefix: ks.id, text: keyString, limit: Layout.maxLMDBKeySize) else { return false }
        let cursor = try writeCursor(records: true)
        guard let data = try cursor.find(key, context: ["keyspace": keyspace, "key": keyString]) else { return false }
        let old = try RecordHeader.parse(data)
        try noteMutation(ks.id, key, old: data)
        try cursor.deleteCurrent(context: ["keyspace": keyspace, "key": keyString])
        if !keySet { try deleteSequenceEntry(ks.id, old.sequence) }
        ks.count(old.flags, -1)
        return true
    }

    func dropCore(_ keyspace: String, keySet: Bool = false) throws(PeerSyncError) -> Bool {
        guard let ks = try lookupKeyspace(keyspace, keySet: keySet) else { return false }
        if !replaying { try preserveForEnumerations(ks) }
        mutations &+= 1
        try deletePrefix(ks.id, in: env.records)
        if !keySet { try deletePrefix(ks.id, in: env.sequences) }
        if let key = metaBuffer.write(tag: Self.metaTag(keySet: keySet), text: keyspace, limit: Layout.maxLMDBKeySize) {
            _ = try currentTxn().delete(env.meta, key: key, context: ["keyspace": keyspace])
        }
        ks.dirty = false
        setCached(keyspace, keySet: keySet, .absent)
        if lastKeyspace === ks { lastKeyspace = nil }
        return true
    }

    private func deletePrefix(_ id: UInt32, in database: DatabaseHandle) throws(PeerSyncError) {
        let cursor = try Cursor(try currentTxn(), database)
        defer { cursor.close() }
        let prefix = withUnsafeBytes(of: id.bigEndian) { Array($0) }
        while let entry = try cursor.seek(atOrAfter: seekBuffer.write(prefix)),
              entry.key.count >= 4, entry.key.loadUnaligned(as: UInt32.self) == id.bigEndian {
            try cursor.deleteCurrent()
        }
    }

    private func putSequenceEntry(_ id: UInt32, _ sequence: UInt64, key: String) throws(PeerSyncError) {
        let cursor = try writeCursor(records: false)
        let count = key.utf8.count
        // Sequences grow, so appending usually works (and packs pages full); when a keyspace
        // with a higher ID already has entries, it falls back to a normal put.
        let reserved = try cursor.reserveAppending(key: seekBuffer.write(prefix: id, sequence: sequence), size: count,
                                                   context: ["key": key])
        if count > 0, let dest = reserved.baseAddress { copyUTF8(key, to: dest) }
    }

    private func deleteSequenceEntry(_ id: UInt32, _ sequence: UInt64) throws(PeerSyncError) {
        let key = seekBuffer.write(prefix: id, sequence: sequence)
        if try !currentTxn().delete(env.sequences, key: key) {
            log.warning("LMDB store \(env.directory): sequence \(sequence) was missing from the sequence index")
        }
    }

    // MARK: Test hooks

    /// Removes one sequence-index entry behind the store's back (tests of the integrity check).
    func damageSequenceIndexForTesting(keyspace: String, sequence: UInt64) throws {
        try ensureWritable()
        guard let ks = try lookupKeyspace(keyspace) else { return }
        try deleteSequenceEntry(ks.id, sequence)
    }
}
