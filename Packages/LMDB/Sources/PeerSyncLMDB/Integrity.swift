import PeerSyncCore
import PeerSyncStorage

/// The full walk behind ``LMDBStorageBackend/checkIntegrity(directory:)``.
final class IntegrityCheck {
    private let transaction: LMDBTransaction
    private var problems: [String] = []
    private var suppressed = 0
    private static let maxProblems = 1000

    init(_ transaction: LMDBTransaction) {
        self.transaction = transaction
    }

    private struct Tally {
        var name: String
        var stored: KeyspaceState
        var live: UInt64 = 0
        var deleted: UInt64 = 0
        var indexed: UInt64 = 0
    }

    private func report(_ message: String) {
        if problems.count < Self.maxProblems { problems.append(message) } else { suppressed += 1 }
    }

    func run() throws -> [String] {
        let env = transaction.env
        let txn = try transaction.currentTxn()

        // 1. Meta entries.
        var keyspaces: [UInt32: Tally] = [:]
        var nextID: UInt32?
        var sawFormat = false
        try walk(txn, env.meta) { key, value in
            guard let tag = key.first else {
                report("meta: an empty key")
                return
            }
            switch tag {
            case Layout.MetaKey.format where key.count == 1:
                sawFormat = true
                if value.count != 4 || value.loadUnaligned(as: UInt32.self) != Layout.formatVersion.littleEndian {
                    report("meta: unexpected format version entry")
                }
            case Layout.MetaKey.nextKeyspaceID where key.count == 1:
                if value.count == 4 {
                    nextID = UInt32(littleEndian: value.loadUnaligned(as: UInt32.self))
                } else {
                    report("meta: malformed next-keyspace-ID entry")
                }
            case Layout.MetaKey.keyspace, Layout.MetaKey.keySet:
                let name = String(decoding: UnsafeRawBufferPointer(rebasing: key[1...]), as: UTF8.self)
                guard let state = try? KeyspaceState.decode(name: name, value, isKeySet: tag == Layout.MetaKey.keySet) else {
                    report("meta: malformed entry for keyspace `\(name)`")
                    return
                }
                if let other = keyspaces[state.id] {
                    report("meta: keyspaces `\(other.name)` and `\(name)` share ID \(state.id)")
                } else {
                    keyspaces[state.id] = Tally(name: name, stored: state)
                }
            default:
                report("meta: unknown entry with tag \(tag)")
            }
        }
        if !sawFormat { report("meta: the format version entry is missing") }
        if let nextID {
            for tally in keyspaces.values where tally.stored.id >= nextID {
                report("keyspace `\(tally.name)`: ID \(tally.stored.id) is not below the next ID \(nextID)")
            }
        } else {
            report("meta: the next-keyspace-ID entry is missing")
        }

        // 2. Records: decode each, check its sequence and its index entry.
        var orphanRecords: [UInt32: Int] = [:]
        var seqKey = [UInt8](repeating: 0, count: 12)
        try walk(txn, env.records) { key, value in
            guard key.count >= 4 else {
                report("records: a key shorter than its keyspace prefix")
                return
            }
            let id = UInt32(bigEndian: key.loadUnaligned(as: UInt32.self))
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: key[4...]), as: UTF8.self)
            guard var tally = keyspaces[id] else {
                orphanRecords[id, default: 0] += 1
                return
            }
            guard let header = try? RecordHeader.parse(value) else {
                report("keyspace `\(tally.name)`: record `\(name)` is malformed")
                return
            }
            if header.flags & RecordFlags.deleted.rawValue != 0 { tally.deleted += 1 } else { tally.live += 1 }
            keyspaces[id] = tally
            if tally.stored.isKeySet { return }   // an ordered key set's entries have no sequence index
            if header.sequence == 0 || header.sequence > tally.stored.lastSequence {
                report("keyspace `\(tally.name)`: record `\(name)` has sequence \(header.sequence), "
                       + "beyond the last sequence \(tally.stored.lastSequence)")
            }
            seqKey.withUnsafeMutableBytes { b in
                b.storeBytes(of: id.bigEndian, as: UInt32.self)
                b.storeBytes(of: header.sequence.bigEndian, toByteOffset: 4, as: UInt64.self)
            }
            switch Result(catching: { () throws(PeerSyncError) in try txn.get(env.sequences, key: seqKey) }) {
            case .failure(let error):
                report("keyspace `\(tally.name)`: reading the index entry of `\(name)` failed: \(error.message)")
            case .success(nil):
                report("keyspace `\(tally.name)`: record `\(name)` (sequence \(header.sequence)) is missing from the sequence index")
            case .success(let indexed?) where compareBytes(indexed, UnsafeRawBufferPointer(rebasing: key[4...])) != 0:
                report("keyspace `\(tally.name)`: sequence \(header.sequence) of `\(name)` is indexed under another key")
            case .success:
                break
            }
        }

        // 3. Sequence index: every entry points to a record carrying that sequence.
        var orphanIndex: [UInt32: Int] = [:]
        try walk(txn, env.sequences) { key, value in
            guard key.count == 12 else {
                report("sequences: a key of \(key.count) bytes instead of 12")
                return
            }
            let id = UInt32(bigEndian: key.loadUnaligned(as: UInt32.self))
            let sequence = UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
            guard var tally = keyspaces[id] else {
                orphanIndex[id, default: 0] += 1
                return
            }
            tally.indexed += 1
            keyspaces[id] = tally
            var recordKey = withUnsafeBytes(of: id.bigEndian) { Array($0) }
            recordKey.append(contentsOf: value)
            let name = String(decoding: value, as: UTF8.self)
            switch Result(catching: { () throws(PeerSyncError) in try txn.get(env.records, key: recordKey) }) {
            case .failure(let error):
                report("keyspace `\(tally.name)`: reading record `\(name)` failed: \(error.message)")
            case .success(nil):
                report("keyspace `\(tally.name)`: sequence \(sequence) points to a missing record `\(name)`")
            case .success(let stored?):
                if let header = try? RecordHeader.parse(stored), header.sequence != sequence {
                    report("keyspace `\(tally.name)`: sequence \(sequence) points to `\(name)`, which has sequence \(header.sequence)")
                }
            }
        }

        // 4. Counts.
        for tally in keyspaces.values.sorted(by: { $0.name < $1.name }) {
            if tally.live != tally.stored.liveCount || tally.deleted != tally.stored.deletedCount {
                report("keyspace `\(tally.name)`: stored counts (\(tally.stored.liveCount) live, \(tally.stored.deletedCount) deleted) "
                       + "differ from the records (\(tally.live) live, \(tally.deleted) deleted)")
            }
            if tally.indexed != (tally.stored.isKeySet ? 0 : tally.live + tally.deleted) {
                report("keyspace `\(tally.name)`: \(tally.indexed) sequence index entries for \(tally.live + tally.deleted) records")
            }
        }
        for (id, count) in orphanRecords.sorted(by: { $0.key < $1.key }) {
            report("records: \(count) record(s) belong to keyspace ID \(id), which has no meta entry")
        }
        for (id, count) in orphanIndex.sorted(by: { $0.key < $1.key }) {
            report("sequences: \(count) index entr(ies) belong to keyspace ID \(id), which has no meta entry")
        }
        if suppressed > 0 { problems.append("… and \(suppressed) more problem(s)") }
        return problems
    }

    /// Calls `visit` with every key/value of `dbi`, in order.
    private func walk(_ txn: TxnHandle, _ database: DatabaseHandle,
                      _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        let cursor = try Cursor(txn, database)
        defer { cursor.close() }
        var entry = try cursor.move(.first)
        while let current = entry {
            try visit(current.key, current.value)
            entry = try cursor.move(.next)
        }
    }
}
