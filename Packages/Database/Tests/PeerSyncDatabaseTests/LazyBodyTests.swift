import Foundation
import PeerSyncCore
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

/// Documents read from the database keep their stored canonical JSON and parse it only when a
/// property is used (``StoredBody``).
@Suite struct LazyBodyTests {
    struct Item: Codable, Equatable {
        var name: String
        var count: Int
    }

    @Test(arguments: Backend.available)
    func aDocumentIsParsedOnlyWhenAPropertyIsTouched(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let properties: [String: JSONValue] = ["name": "widget", "count": 3, "tags": ["a", "b"]]
            var saved = MutableDocument(id: "d", data: properties)
            try await c.save(document: &saved)

            let doc = try #require(try await c.document(id: "d"))
            let body = try #require(doc.storedBody)
            #expect(!body.isParsed)
            // Metadata, the JSON text, decoding and comparing two reads work from the bytes.
            #expect(doc.id == "d" && doc.revisionID == saved.revisionID && !doc.isDeleted)
            #expect(body.data == JSONValue.object(properties).canonicalData)
            #expect(doc.toJSON() == JSONValue.object(properties).canonicalString)
            #expect(try doc.decode(as: Item.self) == Item(name: "widget", count: 3))
            let again = try #require(try await c.document(id: "d"))
            #expect(doc == again)
            #expect(!body.isParsed && again.storedBody?.isParsed == false)

            // The first property access parses, once; the value is the saved one.
            #expect(doc.string(forKey: "name") == "widget")
            #expect(body.isParsed)
            #expect(doc.properties == properties)
            #expect(doc.toMutable().properties == properties)
        }
    }

    @Test(arguments: Backend.available)
    func enumerationsAndBatchesParseNothing(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            try await db.inBatch { txn in
                for i in 0..<20 {
                    var doc = MutableDocument(id: String(format: "doc-%02d", i), data: ["i": .int(Int64(i))])
                    try txn.save(document: &doc, in: c)
                }
            }
            let all = try await c.allDocuments()
            #expect(all.count == 20)
            #expect(all.allSatisfy { $0.storedBody?.isParsed == false })
            let inBatch = try await db.inReadBatch { txn in try txn.document(id: "doc-07", in: c) }
            #expect(inBatch?.storedBody?.isParsed == false)
            let withTombstone = try await db.inBatch { txn -> Document? in
                try txn.delete(document: all[0], in: c)
                return try txn.document(id: "doc-01", in: c)
            }
            #expect(withTombstone?.storedBody?.isParsed == false)
            let tombstone = try #require(try await c.documentIncludingDeleted(id: "doc-00"))
            #expect(tombstone.isDeleted && tombstone.toJSON() == "{}" && tombstone.properties.isEmpty)
            #expect(all.map { $0.int(forKey: "i") } == Array(0..<20))
        }
    }

    @Test(arguments: Backend.available)
    func aDocumentSharedBetweenTasksParsesToOneValue(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var saved = MutableDocument(id: "shared", data: ["n": 42, "s": "x"])
            try await c.save(document: &saved)
            let doc = try #require(try await c.document(id: "shared"))
            let values = await withTaskGroup(of: [String: JSONValue].self) { group in
                for _ in 0..<8 { group.addTask { doc.properties } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(values.count == 8 && values.allSatisfy { $0 == ["n": 42, "s": "x"] })
        }
    }

    @Test(arguments: Backend.available)
    func damagedStoredBodies(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "ok", data: ["v": 1])
            try await c.save(document: &doc)
            let template = try await db.onWriterQueue { storage in
                try storage.read { try $0.get("ok", in: CollectionSpec.default.documentsKeyspace) }
            }
            let record = try #require(template)
            // Damaged behind the database's back: inside the braces, and not an object at all.
            try await db.onWriterQueue { storage in
                try storage.write { writer in
                    var inside = record
                    inside.key = "inside"
                    inside.body = Array(#"{"v":1,"#.utf8) + Array("}".utf8)
                    try writer.put(inside, in: CollectionSpec.default.documentsKeyspace)
                    var truncated = record
                    truncated.key = "truncated"
                    truncated.body = Array(#"{"v":"#.utf8)
                    try writer.put(truncated, in: CollectionSpec.default.documentsKeyspace)
                }
            }
            // The cheap check at read time catches a body that is not `{…}` …
            await expectError(.corrupt) { try await c.document(id: "truncated") }
            // … damage inside the braces reads as no properties when parsed, and the integrity
            // check reports both.
            let inside = try #require(try await c.document(id: "inside"))
            #expect(inside.properties.isEmpty)
            let problems = try await db.checkIntegrity()
            #expect(problems.contains { $0.contains("inside") } && problems.contains { $0.contains("truncated") }, "\(problems)")
        }
    }
}
