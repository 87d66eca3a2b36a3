import Foundation
import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import PeerSyncStorage
import PeerSyncTestSupport
import Testing
@testable import PeerSyncQuery

/// Where index entries are stored: an ordered key set (`OrderedKeySets`, no sequences), and
/// databases whose indexes were created before, with entries as records of a keyspace.
@Suite struct IndexLayoutTests {
    static let keySet = "idx:_default._default:byN"
    static let definitions = "idxdef:_default._default"

    /// Runs blocking storage calls on a thread of their own, never on Swift's cooperative pool
    /// (the `Storage` rule: a blocked pool thread would stall other tests' tasks).
    static func offThePool(_ body: @escaping @Sendable () throws -> Void) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Thread {
                do {
                    try body()
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }.start()
        }
    }

    /// The entries of a new index are in the key set, none in a keyspace; an entry's value is
    /// the length of the document ID its key ends with, and reads give the ID back.
    @Test(arguments: Backend.available)
    func entriesAreInAnOrderedKeySet(_ backend: Backend) async throws {
        try await withTemporaryDirectory(prefix: "peersync-index-layout") { dir in
            let path = dir + "/db.peersync"
            let make = backend.make()
            let db = try await Database(path: path, config: DatabaseConfiguration(directory: dir, backend: make, durable: false))
            let c = try db.defaultCollection()
            for i in 0..<5 { _ = try await c.save(document: MutableDocument(id: "d\(i)", data: ["n": .int(Int64(i % 2))])) }
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            _ = try await c.save(document: MutableDocument(id: "d5", data: ["n": .int(1)]))
            let long = String(repeating: "é", count: 120)   // 240 bytes
            _ = try await c.save(document: MutableDocument(id: long, data: ["n": .int(7)]))
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM _ WHERE n = 7") == [long])
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM _ WHERE n = 1 ORDER BY meta().id") == ["d1", "d3", "d5"])
            try await c.purge(id: long)
            try await db.close()

            try await Self.offThePool {
                let store = try make.open(directory: path, options: StorageOptions())
                defer { try? store.close() }
                try store.read { r in
                    var ids: [String] = []
                    try r.enumerateEntries(inKeySet: Self.keySet, range: .all, descending: false) { key, value in
                        // The value is the ID's length; the key ends with the ID.
                        #expect(value == [2])
                        ids.append(String(decoding: key.utf8.suffix(2), as: UTF8.self))
                        return true
                    }
                    #expect(ids == ["d0", "d2", "d4", "d1", "d3", "d5"])
                    #expect(try !r.keyspaces().contains(Self.keySet), "no entry is a keyspace record")
                }
            }
            if backend == .memory { MemoryStorageBackend().removeStore(in: path) }
        }
    }

    /// A database whose index was stored in the old layout (entries as keyspace records, a
    /// definition without `"entries"`) keeps working: writes go on, the index is not used
    /// while in the old layout, and the first query rebuilds it into the key set and drops the
    /// old keyspace.
    @Test(arguments: Backend.available)
    func anIndexInTheOldKeyspaceLayoutIsRebuiltIntoAKeySet(_ backend: Backend) async throws {
        try await withTemporaryDirectory(prefix: "peersync-index-layout") { dir in
            let path = dir + "/db.peersync"
            let make = backend.make()
            let config = DatabaseConfiguration(directory: dir, backend: make, durable: false)
            var db = try await Database(path: path, config: config)
            var c = try db.defaultCollection()
            for i in 0..<6 { _ = try await c.save(document: MutableDocument(id: "d\(i)", data: ["n": .int(Int64(i % 3))])) }
            try await db.close()

            // Write the old layout by hand, as a build from before key sets left it: the entries
            // as records of keyspace `idx:…` (computed by the indexer, plus one wrong entry a
            // query must never return), the definition without `"entries"`.
            try await Self.offThePool {
                let store = try make.open(directory: path, options: StorageOptions())
                try store.write { w in
                    let prepared = try QueryIndexer.installed.prepare([IndexDefinition(name: "byN", expressions: ["n"])])
                    var documents: [Record] = []
                    try w.enumerate(in: "docs:_default._default") { documents.append($0); return true }
                    #expect(documents.count == 6)
                    for record in documents {
                        for key in try prepared.entryKeys(documentID: record.key, body: record.body)[0] {
                            try w.put(Record(key: key, body: Array(record.key.utf8)), in: Self.keySet)
                        }
                    }
                    let wrong = try prepared.entryKeys(documentID: "ghost", body: Array(#"{"n":1}"#.utf8))[0][0]
                    try w.put(Record(key: wrong, body: Array("ghost".utf8)), in: Self.keySet)
                    try w.put(Record(key: "byN", body: Array(#"{"expressions":["n"],"kind":"value","stale":false}"#.utf8)),
                              in: Self.definitions)
                }
                try store.close()
            }

            db = try await Database(path: path, config: config)
            c = try db.defaultCollection()
            let old = try #require(try await c.indexDefinitions().first)
            #expect(old.isStale, "an index in the old layout must not be used as it is")
            // Writes work meanwhile (and do not touch the old entries).
            _ = try await c.save(document: MutableDocument(id: "d6", data: ["n": .int(1)]))
            _ = try await c.delete(document: try #require(try await c.document(id: "d4")))

            let sql = "SELECT meta().id FROM _ WHERE n = 1 ORDER BY meta().id"
            #expect(try await db.createQuery(sql).explain().contains("USING INDEX byN"))
            #expect(try await IndexTests.ids(db, sql) == ["d1", "d6"])
            #expect(try await c.indexDefinitions().first?.isStale == false)
            #expect(try await IndexTests.storedEntries(c, "byN").count == 6)
            try await db.close()

            try await Self.offThePool {
                let reopened = try make.open(directory: path, options: StorageOptions())
                defer { try? reopened.close() }
                try reopened.read { r in
                    #expect(try !r.keyspaces().contains(Self.keySet), "the old keyspace is dropped by the rebuild")
                    let definition = try #require(try r.get("byN", in: Self.definitions))
                    #expect(String(decoding: definition.body, as: UTF8.self).contains(#""entries":"keyset""#))
                }
            }
            if backend == .memory { MemoryStorageBackend().removeStore(in: path) }
        }
    }
}
