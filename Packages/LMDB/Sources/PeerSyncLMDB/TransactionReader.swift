import PeerSyncCore
import PeerSyncStorage

// The ``StorageReader`` part of ``LMDBTransaction``: lookups, counts and the two enumerations
// (by key, by sequence), which inside a write transaction merge the live B-tree with the
// enumeration's overlay (see EnumerationSnapshots.swift).
extension LMDBTransaction {
    func keyspaces() throws -> [String] {
        try ensureActive()
        let cursor = try Cursor(try currentTxn(), env.meta)
        defer { cursor.close() }
        var names: [String] = []
        var entry = try cursor.seek(atOrAfter: seekBuffer.write([Layout.MetaKey.keyspace]))
        while let current = entry {
            guard let first = current.key.first, first == Layout.MetaKey.keyspace else { break }
            names.append(String(decoding: UnsafeRawBufferPointer(rebasing: current.key[1...]), as: UTF8.self))
            entry = try cursor.move(.next)
        }
        return names
    }

    func get(_ key: String, in keyspace: String) throws -> Record? {
        try get(key, in: keyspace, extra: true)
    }

    func getWithoutExtra(_ key: String, in keyspace: String) throws -> Record? {
        try get(key, in: keyspace, extra: false)
    }

    private func get(_ key: String, in keyspace: String, extra: Bool) throws -> Record? {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace),
              let k = keyBuffer.write(prefix: ks.id, text: key, limit: Layout.maxLMDBKeySize) else { return nil }
        guard let data = try currentTxn().get(env.records, key: k, context: ["keyspace": keyspace, "key": key]) else {
            return nil
        }
        return try RecordHeader.decode(key: key, value: data, extra: extra)
    }

    func count(in keyspace: String, includeDeleted: Bool) throws -> Int {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace) else { return 0 }
        let total = includeDeleted ? ks.liveCount &+ ks.deletedCount : ks.liveCount
        return Int(clamping: total)
    }

    func lastSequence(in keyspace: String) throws -> UInt64 {
        try ensureActive()
        return try lookupKeyspace(keyspace)?.lastSequence ?? 0
    }

    func enumerate(in keyspace: String, range: KeyRange, descending: Bool,
                   _ body: (Record) throws -> Bool) throws {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace) else { return }
        try enumerateRecords(ks, range: range, descending: descending, body)
    }

    func enumerateWithoutExtra(in keyspace: String, range: KeyRange, descending: Bool,
                               _ body: (Record) throws -> Bool) throws {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace) else { return }
        try enumerateRecords(ks, range: range, descending: descending, extra: false, body)
    }

    // MARK: Ordered key sets (records without sequence index entries, see Codec.swift)

    func entry(_ key: String, inKeySet keySet: String) throws -> [UInt8]? {
        try ensureActive()
        try writePendingEntries(of: keySet)
        guard let ks = try lookupKeyspace(keySet, keySet: true),
              let k = keyBuffer.write(prefix: ks.id, text: key, limit: Layout.maxLMDBKeySize) else { return nil }
        guard let data = try currentTxn().get(env.records, key: k, context: ["keySet": keySet, "key": key]) else {
            return nil
        }
        return try RecordHeader.decode(key: key, value: data).body
    }

    func enumerateEntries(inKeySet keySet: String, range: KeyRange, descending: Bool,
                          _ body: (_ key: String, _ value: [UInt8]) throws -> Bool) throws {
        try ensureActive()
        try writePendingEntries(of: keySet)
        guard let ks = try lookupKeyspace(keySet, keySet: true) else { return }
        try enumerateRecords(ks, range: range, descending: descending) { record in try body(record.key, record.body) }
    }

    /// The records of keyspace (or key set) `ks` in `range`, merging a write transaction's
    /// overlay; with `extra` false, their `extra` left empty (not copied out of the map).
    private func enumerateRecords(_ ks: KeyspaceState, range: KeyRange, descending: Bool, extra: Bool = true,
                                  _ body: (Record) throws -> Bool) throws {
        let lower = fullKey(ks.id, range.lowerBound ?? "")
        let upper = range.upperBound.map { fullKey(ks.id, $0) }
        if let upper {
            let c = compareBytes(upper, lower)
            if c < 0 || (c == 0 && !range.includesUpperBound) { return }
        }
        let overlay = KeyOverlay(id: ks.id, descending: descending, lower: lower, upper: upper,
                                 upperInclusive: range.includesUpperBound)
        if isWrite { keyOverlays.append(overlay) }
        defer { if isWrite { keyOverlays.removeAll { $0 === overlay } } }

        var cursor: Cursor?
        var cursorGeneration = -1
        var cursorMutations = -1
        var pendingLive = false  // the cursor sits on a live key that was not emitted yet
        let step: CursorMove = descending ? .previous : .next
        while true {
            try ensureActive()
            var entry: CursorEntry?
            if let c = cursor, c.isUsable, cursorGeneration == generation, cursorMutations == mutations {
                entry = try c.move(pendingLive ? .current : step)
            } else {
                if cursor == nil || cursorGeneration != generation || !(cursor?.isUsable ?? false) {
                    cursor?.close()
                    cursor = try Cursor(try currentTxn(), env.records)
                }
                guard let c = cursor else { throw noTransaction() }
                entry = try seek(c, overlay)
                cursorGeneration = generation
                cursorMutations = mutations
            }
            if let c = cursor {
                while let current = entry, overlay.contains(current.key) { entry = try c.move(step) }
            }
            let live = entry.flatMap { overlay.inRange($0.key) ? $0 : nil }
            let candidate = overlay.entries.isEmpty ? nil : overlay.next()
            var record: Record
            if let live, candidate.map({ descending ? compareBytes(live.key, $0.key) > 0
                                                   : compareBytes(live.key, $0.key) < 0 }) ?? true {
                let name = String(decoding: UnsafeRawBufferPointer(rebasing: live.key[4...]), as: UTF8.self)
                record = try RecordHeader.decode(key: name, value: live.value, extra: extra)
                if isWrite { overlay.setAfter(live.key) }
                pendingLive = false
            } else if let candidate {
                record = candidate.record
                if !extra { record.extra = [] }
                overlay.setAfter(candidate.key)
                pendingLive = live != nil
            } else {
                break
            }
            overlay.consume()
            if try !body(record) { break }
        }
        cursor?.close()
    }

    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try ensureActive()
        guard let ks = try lookupKeyspace(keyspace), since < ks.lastSequence else { return }
        let overlay = SeqOverlay(id: ks.id, limit: ks.lastSequence, after: since)
        if isWrite { seqOverlays.append(overlay) }
        defer { if isWrite { seqOverlays.removeAll { $0 === overlay } } }

        var cursor: Cursor?
        var cursorGeneration = -1
        var cursorMutations = -1
        var pendingLive = false
        while true {
            try ensureActive()
            var entry: CursorEntry?
            if let c = cursor, c.isUsable, cursorGeneration == generation, cursorMutations == mutations {
                entry = try c.move(pendingLive ? .current : .next)
            } else {
                if cursor == nil || cursorGeneration != generation || !(cursor?.isUsable ?? false) {
                    cursor?.close()
                    cursor = try Cursor(try currentTxn(), env.sequences)
                }
                guard let c = cursor else { throw noTransaction() }
                if overlay.after == UInt64.max {
                    entry = nil
                } else {
                    entry = try c.seek(atOrAfter: seekBuffer.write(prefix: ks.id, sequence: overlay.after + 1))
                }
                cursorGeneration = generation
                cursorMutations = mutations
            }
            var live: (sequence: UInt64, recordKey: UnsafeRawBufferPointer)?
            if let entry, let s = sequenceKey(entry.key, id: ks.id), s <= overlay.limit { live = (s, entry.value) }
            let candidate = overlay.entries.first
            let record: Record
            if let live, candidate.map({ live.sequence < $0.sequence }) ?? true {
                record = try fetchIndexed(ks.id, sequence: live.sequence, keyBytes: live.recordKey)
                overlay.after = live.sequence
                pendingLive = false
            } else if let candidate {
                record = candidate.record
                overlay.after = candidate.sequence
                pendingLive = live != nil
            } else {
                break
            }
            overlay.consume()
            if try !body(record) { break }
        }
        cursor?.close()
    }

    /// Positions a records cursor where a by-key enumeration (re)starts: at the first key in
    /// range, or just past `overlay.after`.
    func seek(_ cursor: Cursor, _ overlay: KeyOverlay) throws(PeerSyncError) -> CursorEntry? {
        if !overlay.descending {
            let target = overlay.hasAfter ? overlay.after : overlay.lower
            let entry = try positionAtOrAfter(cursor, target)
            if let entry, overlay.hasAfter, compareBytes(entry.key, overlay.after) == 0 {
                return try cursor.move(.next)
            }
            return entry
        }
        let target: [UInt8]
        let inclusive: Bool
        if overlay.hasAfter {
            target = overlay.after
            inclusive = false
        } else if let upper = overlay.upper {
            target = upper
            inclusive = overlay.upperInclusive
        } else if overlay.id == UInt32.max {
            return try cursor.move(.last)
        } else {
            target = withUnsafeBytes(of: (overlay.id + 1).bigEndian) { Array($0) }
            inclusive = false
        }
        guard let entry = try positionAtOrAfter(cursor, target) else { return try cursor.move(.last) }
        if inclusive, compareBytes(entry.key, target) == 0 { return entry }
        return try cursor.move(.previous)
    }

    /// ``Cursor/seek(atOrAfter:)`` for targets of any length (LMDB rejects keys over 511 bytes).
    private func positionAtOrAfter(_ cursor: Cursor, _ target: [UInt8]) throws(PeerSyncError) -> CursorEntry? {
        var entry = try cursor.seek(atOrAfter: seekBuffer.write(Array(target.prefix(Layout.maxLMDBKeySize))))
        if target.count > Layout.maxLMDBKeySize {
            while let current = entry, compareBytes(current.key, target) < 0 { entry = try cursor.move(.next) }
        }
        return entry
    }

    private func fullKey(_ id: UInt32, _ text: String) -> [UInt8] {
        var bytes = withUnsafeBytes(of: id.bigEndian) { Array($0) }
        bytes.append(contentsOf: text.utf8)
        return bytes
    }

    /// The sequence of a sequences-DB key if it belongs to keyspace `id`.
    @inline(__always)
    func sequenceKey(_ key: UnsafeRawBufferPointer, id: UInt32) -> UInt64? {
        guard key.count == 12, key.loadUnaligned(as: UInt32.self) == id.bigEndian else { return nil }
        return UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
    }

    /// The record a sequences-DB entry points to; `.corrupt` if the indexes disagree.
    func fetchIndexed(_ id: UInt32, sequence: UInt64, keyBytes: UnsafeRawBufferPointer) throws(PeerSyncError) -> Record {
        let name = String(decoding: keyBytes, as: UTF8.self)
        guard let k = keyBuffer.write(prefix: id, text: name, limit: Layout.maxLMDBKeySize) else {
            throw PeerSyncError(.corrupt, "the sequence index holds an over-long key", context: ctx)
        }
        guard let value = try currentTxn().get(env.records, key: k) else {
            throw PeerSyncError(.corrupt, "the sequence index points to a missing record",
                                context: ["directory": env.directory, "key": name, "sequence": String(sequence)])
        }
        let record = try RecordHeader.decode(key: name, value: value)
        guard record.sequence == sequence else {
            throw PeerSyncError(.corrupt, "the sequence index disagrees with the record",
                                context: ["directory": env.directory, "key": name, "sequence": String(sequence)])
        }
        return record
    }
}

extension LMDBTransaction {
    /// The number of entries in the sequences DB (tests: key set entries add none).
    func sequenceIndexEntryCountForTesting() throws -> Int {
        try ensureActive()
        let cursor = try Cursor(try currentTxn(), env.sequences)
        defer { cursor.close() }
        var count = 0
        var entry = try cursor.move(.first)
        while entry != nil {
            count += 1
            entry = try cursor.move(.next)
        }
        return count
    }
}
