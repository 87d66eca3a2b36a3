import PeerSyncCore
import PeerSyncStorage

// Enumeration snapshots of ``LMDBTransaction``: an enumeration inside a write transaction sees
// the keyspace as it was when it began, whatever its body writes. Before a record changes, or
// a keyspace is dropped, the pre-images that running enumerations have yet to visit go into
// their overlays (``KeyOverlay``, ``SeqOverlay``); the enumerations merge them with the live
// B-tree (TransactionReader.swift).
extension LMDBTransaction {
    /// Called before a record changes (`old` is its stored value, nil for a new key): lets
    /// running enumerations keep the pre-image of a key they have not reached yet.
    @inline(__always)
    func noteMutation(_ id: UInt32, _ key: UnsafeRawBufferPointer, old: UnsafeRawBufferPointer?) throws(PeerSyncError) {
        mutations &+= 1
        guard !replaying, !(keyOverlays.isEmpty && seqOverlays.isEmpty) else { return }
        func decodeOld() throws(PeerSyncError) -> Record? {
            guard let old else { return nil }
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: key[4...]), as: UTF8.self)
            return try RecordHeader.decode(key: name, value: old)
        }
        for overlay in keyOverlays where overlay.id == id {
            try overlay.capture(key) { () throws(PeerSyncError) in try decodeOld() }
        }
        if let old {
            let sequence = try RecordHeader.parse(old).sequence
            for overlay in seqOverlays where overlay.id == id && overlay.wants(sequence) {
                try overlay.capture(sequence) { () throws(PeerSyncError) in
                    guard let record = try decodeOld() else { throw noTransaction() }
                    return record
                }
            }
        }
    }

    /// Before a keyspace is dropped, copies every record that its running enumerations have
    /// yet to visit into their overlays.
    func preserveForEnumerations(_ ks: KeyspaceState) throws(PeerSyncError) {
        let keyed = keyOverlays.filter { $0.id == ks.id }
        let sequenced = seqOverlays.filter { $0.id == ks.id }
        if keyed.isEmpty && sequenced.isEmpty { return }
        let txn = try currentTxn()
        for overlay in keyed {
            let cursor = try Cursor(txn, env.records)
            defer { cursor.close() }
            var entry = try seek(cursor, overlay)
            while let current = entry, overlay.inRange(current.key) {
                try overlay.capture(current.key) { () throws(PeerSyncError) in
                    let name = String(decoding: UnsafeRawBufferPointer(rebasing: current.key[4...]), as: UTF8.self)
                    return try RecordHeader.decode(key: name, value: current.value)
                }
                entry = try cursor.move(overlay.descending ? .previous : .next)
            }
        }
        for overlay in sequenced {
            let cursor = try Cursor(txn, env.sequences)
            defer { cursor.close() }
            var entry = overlay.after == UInt64.max
                ? nil : try cursor.seek(atOrAfter: seekBuffer.write(prefix: ks.id, sequence: overlay.after &+ 1))
            while let current = entry, let s = sequenceKey(current.key, id: ks.id), s <= overlay.limit {
                try overlay.capture(s) { () throws(PeerSyncError) in
                    try fetchIndexed(ks.id, sequence: s, keyBytes: current.value)
                }
                entry = try cursor.move(.next)
            }
        }
    }
}
