// The example of Packages/Database/README.md, verbatim, so that it keeps compiling and running.
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncStorage   // MemoryStorageBackend; use PeerSyncSQLite's SQLiteStorageBackend on disk

struct TodoItem: Codable { var title: String; var done: Bool }

func example(directory: String) async throws {
    let config = DatabaseConfiguration(directory: directory, backend: MemoryStorageBackend())
    let db = try await Database(name: "todo", config: config)        // <directory>/todo.peersync/
    let items = try await db.createCollection(name: "items", scope: "app")

    // Listen for changes (also those made by another process with the database open).
    let token = items.addChangeListener { change in print("changed:", change.documentIDs) }

    // Create, read, update.
    var doc = try MutableDocument(id: "item-1", encoding: TodoItem(title: "Buy milk", done: false))
    try await items.save(document: &doc)                             // doc.revisionID == "1-…"
    guard var edit = try await items.document(id: "item-1")?.toMutable() else { return }
    edit.setBool(true, forKey: "done")
    try await items.save(document: &edit, concurrencyControl: .failOnConflict)
    if let item = try await items.document(id: "item-1")?.decode(as: TodoItem.self) {
        print(item.title, item.done)                                 // Buy milk true
    }

    // Blobs are stored once per content and referenced from documents.
    var photo = MutableDocument(id: "photo-1")
    photo.setBlob(Blob(contentType: "image/png", data: Data([0x89, 0x50, 0x4E, 0x47])), forKey: "image")
    try await items.save(document: &photo)
    if let blob = try await items.document(id: "photo-1")?.blob(forKey: "image") {
        for try await chunk in blob.contentStream() { print(chunk.count, "bytes") }
    }

    // Several changes in one transaction.
    try await db.inBatch { txn in
        for i in 2...5 {
            var d = MutableDocument(id: "item-\(i)", data: ["title": .string("Item \(i)"), "done": false])
            try txn.save(document: &d, in: items)
        }
    }
    print(try await items.count)                                     // 6

    token.remove()
    try await db.close()
}
import Testing

@Suite struct ReadmeExampleTests {
    @Test func readmeExample() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        try await example(directory: dir.path)
        // The example left its data behind in the (in-memory) database: check it.
        let db = try await Database(name: "todo", config: DatabaseConfiguration(directory: dir.path, backend: MemoryStorageBackend()))
        let items = try #require(try await db.collection(name: "items", scope: "app"))
        #expect(try await items.count == 6)
        #expect(try await items.document(id: "item-1")?.bool(forKey: "done") == true)
        #expect(try await items.document(id: "photo-1")?.blob(forKey: "image")?.content == Data([0x89, 0x50, 0x4E, 0x47]))
        try await db.delete()
    }
}
