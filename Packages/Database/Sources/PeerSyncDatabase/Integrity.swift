import Foundation
import PeerSyncCore
import PeerSyncStorage

extension Database {
    /// Verifies the database and returns the problems found (empty when sound): every
    /// document record decodes, its revision tree is consistent, its current revision and
    /// flags match the tree and the current body is a JSON object; sequences are unique and
    /// not above the keyspace's last sequence; every blob referenced by a kept revision body
    /// is stored; the expiration index is consistent; plus the storage engine's own check
    /// when it offers one (`StorageIntegrityChecking` on the storage, else
    /// `StorageBackendIntegrityChecking` on the backend), its lines prefixed `storage: `.
    ///
    /// Isolation: a read — the records are checked in one snapshot, on a reader thread.
    public func checkIntegrity() async throws -> [String] {
        try await onReader { storage in
            var problems = try storage.read { reader in try self.checkRecords(reader) }
            if let checking = storage as? any StorageIntegrityChecking {
                problems += try checking.checkIntegrity().map { "storage: \($0)" }
            } else if let checking = self.config.backend as? any StorageBackendIntegrityChecking {
                problems += try checking.checkIntegrity(directory: self.path).map { "storage: \($0)" }
            }
            return problems
        }
    }

    private func checkRecords(_ reader: any StorageReader) throws -> [String] {
        var problems: [String] = []
        let specs = try Database.collectionSpecs(reader)
        if !specs.contains(.default) { problems.append("the default collection is missing") }
        var referenced = Set<String>()
        for spec in specs {
            let engine = engine(spec)
            let prefix = spec.fullName
            var keys = Set<String>()
            try reader.enumerate(in: spec.documentsKeyspace) { record in
                keys.insert(record.key)
                problems += checkDocument(record, engine: engine, referenced: &referenced).map { "\(prefix)/\(record.key): \($0)" }
                return true
            }
            // Sequence index: unique, increasing, within lastSequence, one entry per record.
            let last = try reader.lastSequence(in: spec.documentsKeyspace)
            var previous: UInt64 = 0
            var seenKeys = Set<String>()
            try reader.enumerate(in: spec.documentsKeyspace, since: 0) { record in
                if record.sequence <= previous {
                    problems.append("\(prefix): sequence \(record.sequence) of \(record.key) is not increasing")
                }
                if record.sequence > last {
                    problems.append("\(prefix): sequence \(record.sequence) of \(record.key) is above the last sequence \(last)")
                }
                if !seenKeys.insert(record.key).inserted {
                    problems.append("\(prefix): \(record.key) appears twice in the sequence index")
                }
                previous = record.sequence
                return true
            }
            if seenKeys != keys {
                problems.append("\(prefix): the sequence index lists \(seenKeys.count) documents, the key index \(keys.count)")
            }
            // Expiration index.
            try reader.enumerate(in: spec.expiryKeyspace, range: .prefix("d:"), descending: false) { record in
                let docID = String(record.key.dropFirst(2))
                guard let ms = Int64(String(decoding: record.body, as: UTF8.self)) else {
                    problems.append("\(prefix): invalid expiration entry for \(docID)")
                    return true
                }
                if try reader.get(DocumentEngine.expiryIndexKey(ms: ms, docID: docID), in: spec.expiryKeyspace) == nil {
                    problems.append("\(prefix): expiration of \(docID) is missing from the time index")
                }
                return true
            }
        }
        for digest in referenced.sorted() where !blobStore.has(digest: digest) {
            problems.append("blob \(digest) is referenced but not stored")
        }
        return problems
    }

    private func checkDocument(_ record: Record, engine: DocumentEngine, referenced: inout Set<String>) -> [String] {
        var problems: [String] = []
        if (try? DocumentID.validate(record.key)) == nil { problems.append("invalid document ID") }
        let tree: RevTree
        do {
            tree = try engine.loadTree(record)
        } catch {
            return problems + ["revision tree does not decode: \(error.message)"]
        }
        problems += tree.validate()
        guard let winner = tree.winner else { return problems + ["revision tree is empty"] }
        if String(decoding: record.version, as: UTF8.self) != winner.revID.description {
            problems.append("record version \(String(decoding: record.version, as: UTF8.self)) is not the winner \(winner.revID)")
        }
        if winner.body == nil { problems.append("current revision has no body") }
        // Every branch closed (an older version's resolution could leave a closing tombstone
        // current): the document reads as deleted although no one deleted it.
        if winner.isClosed { problems.append("current revision \(winner.revID) is a closed leaf (a resolved-away branch)") }
        if (try? JSONValue(parsing: record.body))?.objectValue == nil { problems.append("current body is not a JSON object") }
        if record.flags.contains(.deleted) != winner.isDeleted { problems.append("deleted flag does not match the current revision") }
        if record.flags.contains(.conflicted) != tree.hasConflict { problems.append("conflicted flag does not match the tree") }
        for node in tree.nodes {
            guard let body = node.body else { continue }
            guard let value = try? JSONValue(parsing: body) else {
                problems.append("body of \(node.revID) is not valid JSON")
                continue
            }
            DocumentEngine.collectBlobDigests(value, into: &referenced)
        }
        return problems
    }
}
