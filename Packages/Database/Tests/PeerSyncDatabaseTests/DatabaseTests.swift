import Foundation
import PeerSyncCore
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

@Suite struct DatabaseTests {
    @Test(arguments: Backend.available)
    func createReadUpdateDelete(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let users = try db.defaultCollection()
            #expect(try await users.count == 0)
            #expect(try await users.document(id: "u1") == nil)

            var doc = MutableDocument(id: "u1", data: ["name": "Ada", "age": 36])
            #expect(try await users.save(document: &doc))
            let rev1 = try #require(doc.revisionID)
            #expect(rev1.hasPrefix("1-"))
            #expect(doc.sequence == 1)

            let read = try #require(try await users.document(id: "u1"))
            #expect(read.revisionID == rev1 && read.sequence == 1 && !read.isDeleted)
            #expect(read.string(forKey: "name") == "Ada" && read.int(forKey: "age") == 36)
            #expect(read.collectionName == "_default" && read.scopeName == "_default")
            #expect(read.toJSON() == #"{"age":36,"name":"Ada"}"#)

            var edit = read.toMutable()
            edit.setInt(37, forKey: "age")
            #expect(try await users.save(document: &edit))
            #expect(edit.revisionID?.hasPrefix("2-") == true)
            #expect(edit.sequence == 2)
            #expect(try await users.document(id: "u1")?.int(forKey: "age") == 37)
            #expect(try await users.count == 1)

            let current = try #require(try await users.document(id: "u1"))
            #expect(try await users.delete(document: current))
            #expect(try await users.document(id: "u1") == nil)
            #expect(try await users.count == 0)
            let tombstone = try #require(try await users.documentIncludingDeleted(id: "u1"))
            #expect(tombstone.isDeleted && tombstone.revisionID?.hasPrefix("3-") == true)

            // Saving a new document with the ID of a deleted one continues its history.
            var again = MutableDocument(id: "u1", data: ["name": "Ada again"])
            #expect(try await users.save(document: &again, concurrencyControl: .failOnConflict))
            #expect(again.revisionID?.hasPrefix("4-") == true)
            #expect(try await users.count == 1)
        }
    }

    @Test(arguments: Backend.available)
    func sameEditGivesSameRevisionID(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var a = MutableDocument(id: "a", data: ["x": 1, "y": [true, "z"]])
            var b = MutableDocument(id: "b", data: ["y": [true, "z"], "x": 1.0])
            try await c.save(document: &a)
            try await c.save(document: &b)
            #expect(a.revisionID == b.revisionID)
        }
    }

    @Test(arguments: Backend.available)
    func persistsAcrossReopen(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        do {
            let db = try await Database(name: "p", config: makeConfig(backend, dir))
            let c = try await db.createCollection(name: "notes", scope: "app")
            var doc = MutableDocument(id: "n1", data: ["t": "x"])
            try await c.save(document: &doc)
            try await c.putLocal(id: "checkpoint", json: ["seq": 1])
            try await db.close()
            #expect(!db.isOpen)
            await expectError(.closed) { try await c.document(id: "n1") }
            await expectError(.closed) { try db.defaultCollection() }
            try await db.close()  // idempotent
        }
        #expect(Database.exists(name: "p", directory: dir.path))
        #expect(!Database.exists(name: "q", directory: dir.path))
        let db = try await Database(name: "p", config: makeConfig(backend, dir))
        let c = try #require(try await db.collection(name: "notes", scope: "app"))
        #expect(try await c.document(id: "n1")?.string(forKey: "t") == "x")
        #expect(try await c.getLocal(id: "checkpoint")?.properties == ["seq": 1])
        #expect(db.path.hasSuffix("p.peersync"))
        #expect(db.name == "p")
        try await db.delete()
        #expect(!Database.exists(name: "p", directory: dir.path))
    }

    @Test func openByPath() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path + "/custom-folder"
        let db = try await Database(path: path, config: makeConfig(.memory, dir))
        #expect(db.name == "custom-folder")
        #expect(FileManager.default.fileExists(atPath: path + "/blobs"))
        try await db.close()
        try await Database.delete(name: "nothing-here", directory: dir.path)  // no-op
        await expectError(.invalidArgument) { try await Database(name: "a/b", config: makeConfig(.memory, dir)) }
        await expectError(.invalidArgument) { try await Database(name: "", config: makeConfig(.memory, dir)) }
    }

    @Test(arguments: Backend.available)
    func scopesAndCollections(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            #expect(try await db.collections().map(\.name) == ["_default"])
            #expect(try await db.scopes().map(\.name) == ["_default"])
            #expect(try db.defaultScope().name == "_default")
            #expect(try await db.collection(name: "missing") == nil)

            let a = try await db.createCollection(name: "a", scope: "s1")
            let b = try await db.createCollection(name: "b-%_2", scope: "s1")
            let again = try await db.createCollection(name: "a", scope: "s1")
            #expect(a == again)
            #expect(a.fullName == "s1.a" && a.scope.name == "s1")
            #expect(try await db.collections(scope: "s1").map(\.name) == ["a", "b-%_2"])
            #expect(try await db.scopes().map(\.name) == ["_default", "s1"])
            #expect(try await db.scope(name: "s1")?.collections().count == 2)
            #expect(try await db.scope(name: "nope") == nil)

            var doc = MutableDocument(id: "x", data: ["v": 1])
            try await a.save(document: &doc)
            // A document read from one collection cannot be saved into another.
            await expectError(.invalidArgument) { try await b.save(document: &doc) }

            try await db.deleteCollection(name: "a", scope: "s1")
            #expect(try await db.collection(name: "a", scope: "s1") == nil)
            await expectError(.notFound) { try await a.document(id: "x") }
            await expectError(.notFound) { try await db.deleteCollection(name: "a", scope: "s1") }
            await expectError(.invalidArgument) { try await db.deleteCollection(name: "_default") }
            // Re-created collections start empty.
            let fresh = try await db.createCollection(name: "a", scope: "s1")
            #expect(try await fresh.count == 0)
            _ = b
        }
    }

    @Test(arguments: ["", "_x", "%x", "a.b", "a b", String(repeating: "c", count: 252), "é"])
    func invalidCollectionNames(_ name: String) async throws {
        try await withDatabase(.memory) { db, _ in
            await expectError(.invalidArgument) { try await db.createCollection(name: name) }
            await expectError(.invalidArgument) { try await db.createCollection(name: "ok", scope: name) }
        }
    }

    @Test func validCollectionNameLimits() async throws {
        try await withDatabase(.memory) { db, _ in
            let long = try await db.createCollection(name: String(repeating: "c", count: 251))
            #expect(long.name.count == 251)
            _ = try await db.createCollection(name: "A-z_0%9")
        }
    }

    @Test(arguments: Backend.available)
    func failOnConflictAndLastWriteWins(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var original = MutableDocument(id: "d", data: ["v": 1])
            try await c.save(document: &original)
            var first = try #require(try await c.document(id: "d")).toMutable()
            var second = try #require(try await c.document(id: "d")).toMutable()
            first.setInt(2, forKey: "v")
            try await c.save(document: &first)

            second.setInt(3, forKey: "v")
            let before = second
            #expect(try await c.save(document: &second, concurrencyControl: .failOnConflict) == false)
            #expect(second == before, "a failed save leaves the document unchanged")
            #expect(try await c.document(id: "d")?.int(forKey: "v") == 2)

            #expect(try await c.save(document: &second, concurrencyControl: .lastWriteWins))
            let stored = try #require(try await c.document(id: "d"))
            #expect(stored.int(forKey: "v") == 3)
            #expect(stored.generation == 3, "last write wins saves on top of the current revision")
            #expect(try await c.revisions(of: "d")?.isConflicted == false)

            // A brand-new document with an existing live ID conflicts.
            var fresh = MutableDocument(id: "d", data: ["v": 9])
            #expect(try await c.save(document: &fresh, concurrencyControl: .failOnConflict) == false)

            // Deleting a stale document.
            let stale = try #require(try await c.document(id: "d"))
            var newer = stale.toMutable()
            newer.setInt(4, forKey: "v")
            try await c.save(document: &newer)
            #expect(try await c.delete(document: stale, concurrencyControl: .failOnConflict) == false)
            #expect(try await c.document(id: "d") != nil)
            #expect(try await c.delete(document: stale, concurrencyControl: .lastWriteWins))
            #expect(try await c.document(id: "d") == nil)
            // Deleting again does nothing; deleting an unknown document is an error.
            #expect(try await c.delete(document: newer))
            await expectError(.notFound) { try await c.delete(document: MutableDocument(id: "never")) }
        }
    }

    @Test(arguments: Backend.available)
    func conflictHandler(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "m", data: ["a": 1, "shared": "base"])
            try await c.save(document: &doc)
            var mine = try #require(try await c.document(id: "m")).toMutable()
            var theirs = try #require(try await c.document(id: "m")).toMutable()
            theirs.setInt(2, forKey: "b")
            theirs.setString("theirs", forKey: "shared")
            try await c.save(document: &theirs)

            mine.setString("mine", forKey: "shared")
            mine.setInt(3, forKey: "c")
            let calls = Collected<String>()
            let saved = try await c.save(document: &mine) { new, current in
                calls.append(current?.revisionID ?? "nil")
                // Merge: current's properties, overridden by the new ones.
                var merged = current?.properties ?? [:]
                for (key, value) in new.properties { merged[key] = value }
                new.setData(merged)
                return true
            }
            #expect(saved)
            #expect(calls.all == [theirs.revisionID ?? "?"])
            let result = try #require(try await c.document(id: "m"))
            #expect(result.properties == ["a": 1, "b": 2, "c": 3, "shared": "mine"])
            #expect(result.generation == 3)
            #expect(mine.revisionID == result.revisionID)

            // A handler that gives up leaves the stored document alone.
            var stale = theirs
            stale.setString("late", forKey: "shared")
            let gaveUp = try await c.save(document: &stale) { _, _ in false }
            #expect(!gaveUp)
            #expect(try await c.document(id: "m")?.string(forKey: "shared") == "mine")

            // No conflict: the handler is not called.
            var plain = result.toMutable()
            plain.setInt(4, forKey: "d")
            #expect(try await c.save(document: &plain) { _, _ in Issue.record("handler called without conflict"); return false })

            // A handler that throws: the error propagates and nothing changes.
            struct Oops: Error {}
            var thrower = theirs
            await #expect(throws: Oops.self) { try await c.save(document: &thrower) { _, _ in throw Oops() } }
            #expect(try await c.document(id: "m")?.int(forKey: "d") == 4)

            // Handler with a deleted current document gets nil.
            let current = try #require(try await c.document(id: "m"))
            var afterDelete = current.toMutable()
            try await c.delete(document: current)
            let sawNil = Collected<Bool>()
            #expect(try await c.save(document: &afterDelete) { _, current in sawNil.append(current == nil); return true })
            #expect(sawNil.all == [true])
            #expect(try await c.document(id: "m") != nil)
        }
    }

    @Test(arguments: Backend.available)
    func purge(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "p", data: ["v": 1])
            try await c.save(document: &doc)
            try await c.purge(id: "p")
            #expect(try await c.document(id: "p") == nil)
            #expect(try await c.documentIncludingDeleted(id: "p") == nil)
            #expect(try await c.changes(since: 0).isEmpty)
            await expectError(.notFound) { try await c.purge(id: "p") }
            // A purged ID starts a new history.
            var again = MutableDocument(id: "p", data: ["v": 2])
            try await c.save(document: &again)
            #expect(again.revisionID?.hasPrefix("1-") == true)
            let read = try #require(try await c.document(id: "p"))
            try await c.purge(document: read)
            #expect(try await c.count == 0)
        }
    }

    @Test(arguments: Backend.available)
    func expiration(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            for id in ["soon", "later", "never"] {
                var doc = MutableDocument(id: id, data: ["id": .string(id)])
                try await c.save(document: &doc)
            }
            let purged = Collected<String>()
            let token = c.addChangeListener { change in for id in change.documentIDs { purged.append(id) } }
            defer { token.remove() }
            let later = Date().addingTimeInterval(3600)
            try await c.setDocumentExpiration(id: "soon", expiration: Date().addingTimeInterval(0.2))
            try await c.setDocumentExpiration(id: "later", expiration: later)
            #expect(abs((try await c.getDocumentExpiration(id: "later"))!.timeIntervalSince(later)) < 0.002)
            #expect(try await c.getDocumentExpiration(id: "never") == nil)
            await expectError(.notFound) { try await c.setDocumentExpiration(id: "missing", expiration: later) }

            #expect(await purged.wait { $0.contains("soon") }, "expired document must be purged and notified")
            #expect(try await c.document(id: "soon") == nil)
            #expect(try await c.documentIncludingDeleted(id: "soon") == nil)
            #expect(try await c.document(id: "later") != nil)

            // Clearing an expiration.
            try await c.setDocumentExpiration(id: "later", expiration: nil)
            #expect(try await c.getDocumentExpiration(id: "later") == nil)
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    @Test(arguments: Backend.available)
    func expiredWhileClosedArePurgedOnOpen(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let config = makeConfig(backend, dir, pollInterval: .seconds(3600))
        do {
            let db = try await Database(name: "e", config: config)
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "gone", data: [:])
            try await c.save(document: &doc)
            try await c.setDocumentExpiration(id: "gone", expiration: Date().addingTimeInterval(0.05))
            try await db.close()
        }
        try await Task.sleep(for: .milliseconds(100))
        let db = try await Database(name: "e", config: config)
        #expect(try await db.defaultCollection().documentIncludingDeleted(id: "gone") == nil)
        try await db.close()
    }

    @Test(arguments: Backend.available)
    func badInputIsRejectedAndChangesNothing(_ backend: Backend) async throws {
        try await withDatabase(backend, maxBodySize: 1000) { db, _ in
            let c = try db.defaultCollection()
            var good = MutableDocument(id: "good", data: ["v": 1])
            try await c.save(document: &good)
            let lastSequence = try await c.lastSequence

            var empty = MutableDocument(id: "", data: [:])
            await expectError(.invalidDocumentID) { try await c.save(document: &empty) }
            var long = MutableDocument(id: String(repeating: "x", count: 256), data: [:])
            await expectError(.invalidDocumentID) { try await c.save(document: &long) }
            var longest = MutableDocument(id: String(repeating: "é", count: 127) + "x", data: [:])  // 255 bytes: fine
            #expect(try await c.save(document: &longest))
            var reserved = MutableDocument(id: "r", data: ["_id": "r"])
            await expectError(.invalidArgument) { try await c.save(document: &reserved) }
            var nestedUnderscore = MutableDocument(id: "n", data: ["a": ["_fine": 1]])
            #expect(try await c.save(document: &nestedUnderscore), "only top-level _ keys are reserved")
            var huge = MutableDocument(id: "huge", data: ["s": .string(String(repeating: "x", count: 2000))])
            await expectError(.tooLarge) { try await c.save(document: &huge) }
            var hugeUpdate = good
            hugeUpdate.setString(String(repeating: "y", count: 2000), forKey: "s")
            await expectError(.tooLarge) { try await c.save(document: &hugeUpdate) }
            await expectError(.invalidDocumentID) { try await c.purge(id: "") }
            await expectError(.invalidDocumentID) { try await c.setDocumentExpiration(id: "", expiration: nil) }

            // The database is unchanged apart from the two valid saves.
            #expect(try await c.lastSequence == lastSequence + 2)
            #expect(try await c.document(id: "good")?.properties == ["v": 1])
            #expect(try await c.count == 3)
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    /// Issue 9: an ID with NUL (or another control character) is refused by every call that
    /// takes an ID, and nothing is stored: such a document could never be replicated (BLIP
    /// properties are NUL-separated) and would stall every peer's pull.
    @Test(arguments: Backend.available)
    func controlCharactersInIDsAreRefusedEverywhere(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            for id in ["a\u{0}b", "\u{0}", "tab\there", "x\u{7F}"] {
                var doc = MutableDocument(id: id, data: ["v": 1])
                await expectError(.invalidDocumentID) { try await c.save(document: &doc) }
                await expectError(.invalidDocumentID) { try await c.save(document: &doc, conflictHandler: { _, _ in true }) }
                await expectError(.invalidDocumentID) { try await c.document(id: id) }
                await expectError(.invalidDocumentID) { try await c.documentIncludingDeleted(id: id) }
                await expectError(.invalidDocumentID) { try await c.purge(id: id) }
                await expectError(.invalidDocumentID) { try await c.setDocumentExpiration(id: id, expiration: nil) }
                await expectError(.invalidDocumentID) { try await c.getDocumentExpiration(id: id) }
                await expectError(.invalidDocumentID) {
                    try await c.insertRevision(docID: id, revID: try RevisionID("1-aa"), history: [], body: [:], deleted: false)
                }
                await expectError(.invalidDocumentID) {
                    try await db.inBatch { txn in
                        var inBatch = MutableDocument(id: id, data: [:])
                        return try txn.save(document: &inBatch, in: c)
                    }
                }
            }
            #expect(try await c.count == 0)
            #expect(try await c.lastSequence == 0)
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }

    @Test(arguments: Backend.available)
    func batchCommitsTogetherOrRollsBack(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let other = try await db.createCollection(name: "other")
            let changes = Collected<[String]>()
            let token = c.addChangeListener { changes.append($0.documentIDs) }
            defer { token.remove() }

            let count = try await db.inBatch { txn in
                for i in 0..<10 {
                    var doc = MutableDocument(id: "b\(i)", data: ["i": .int(Int64(i))])
                    try txn.save(document: &doc, in: c)
                }
                var x = MutableDocument(id: "x", data: [:])
                try txn.save(document: &x, in: other)
                let read = try #require(try txn.document(id: "b3", in: c))
                #expect(read.int(forKey: "i") == 3, "reads see the batch's own writes")
                try txn.delete(document: read, in: c)
                try txn.purge(id: "b4", in: c)
                return 10
            }
            #expect(count == 10)
            #expect(try await c.count == 8)
            #expect(try await other.count == 1)
            #expect(await changes.wait { $0.count >= 1 })
            #expect(changes.all.first.map(Set.init) == Set((0..<10).map { "b\($0)" }),
                    "one notification for the whole batch: \(changes.all)")

            struct Abort: Error {}
            await #expect(throws: Abort.self) {
                try await db.inBatch { txn in
                    var doc = MutableDocument(id: "rolled-back", data: [:])
                    try txn.save(document: &doc, in: c)
                    try txn.purge(id: "b0", in: c)
                    throw Abort()
                }
            }
            #expect(try await c.document(id: "rolled-back") == nil)
            #expect(try await c.document(id: "b0") != nil)

            // Invalid input inside a batch rolls the whole batch back.
            await expectError(.invalidArgument) {
                try await db.inBatch { txn in
                    var ok = MutableDocument(id: "ok", data: [:])
                    try txn.save(document: &ok, in: c)
                    var bad = MutableDocument(id: "bad", data: ["_rev": 1])
                    try txn.save(document: &bad, in: c)
                }
            }
            #expect(try await c.document(id: "ok") == nil)
        }
    }

    @Test(arguments: Backend.available)
    func enumerationAndChangesFeed(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            for id in ["c", "a", "d", "b"] {
                var doc = MutableDocument(id: id, data: ["id": .string(id)])
                try await c.save(document: &doc)
            }
            try await c.delete(document: try #require(try await c.document(id: "d")))
            var edit = try #require(try await c.document(id: "c")).toMutable()
            edit.setBool(true, forKey: "edited")
            try await c.save(document: &edit)

            #expect(try await c.documentIDs() == ["a", "b", "c"])
            #expect(try await c.allDocuments().map(\.id) == ["a", "b", "c"])
            #expect(try await c.allDocuments(limit: 2).map(\.id) == ["a", "b"])
            #expect(try await c.allDocuments(limit: 2, offset: 1).map(\.id) == ["b", "c"])
            #expect(try await c.allDocuments(limit: 0).isEmpty)

            let feed = try await c.changes(since: 0)
            #expect(feed.map(\.docID) == ["a", "b", "d", "c"])
            #expect(feed.map(\.sequence) == [2, 4, 5, 6])
            #expect(feed.first { $0.docID == "d" }?.deleted == true)
            #expect(feed.first { $0.docID == "c" }?.revID.generation == 2)
            #expect(try await c.changes(since: 4).map(\.docID) == ["d", "c"])
            #expect(try await c.changes(since: 0, limit: 1).map(\.docID) == ["a"])
            #expect(try await c.lastSequence == 6)
        }
    }

    @Test(arguments: Backend.available)
    func localDocuments(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            #expect(try await c.getLocal(id: "cp") == nil)
            let first = try await c.putLocal(id: "cp", json: ["seq": 10], ifRevision: "")
            #expect(first.revisionID == "0-1")
            let second = try await c.putLocal(id: "cp", json: ["seq": 20], ifRevision: "0-1")
            #expect(second.revisionID == "0-2")
            await expectError(.conflict) { try await c.putLocal(id: "cp", json: ["seq": 30], ifRevision: "0-1") }
            await expectError(.conflict) { try await c.putLocal(id: "cp", json: [:], ifRevision: "") }
            #expect(try await c.getLocal(id: "cp")?.properties == ["seq": 20])
            // Local documents are not documents: not counted, not in the changes feed.
            #expect(try await c.count == 0)
            #expect(try await c.changes(since: 0).isEmpty)
            try await c.deleteLocal(id: "cp")
            await expectError(.notFound) { try await c.deleteLocal(id: "cp") }

            try await db.putLocal(id: "dbwide", json: ["x": true])
            #expect(try await db.getLocal(id: "dbwide")?.properties == ["x": true])
            #expect(try await c.getLocal(id: "dbwide") == nil)
            try await db.deleteLocal(id: "dbwide")
            #expect(try await db.getLocal(id: "dbwide") == nil)
        }
    }

    @Test(arguments: Backend.available)
    func integrityCheckDetectsDamage(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "ok", data: ["v": 1])
            try await c.save(document: &doc)
            #expect(try await db.checkIntegrity().isEmpty)
            try await db.performMaintenance(.integrityCheck)

            // Damage records behind the database's back.
            try await db.onWriterQueue { storage in
                try storage.write { writer in
                    try writer.put(Record(key: "broken", version: Array("1-aa".utf8), body: Array("{}".utf8), extra: [1, 2, 3]),
                                   in: CollectionSpec.default.documentsKeyspace)
                    var record = try #require(try writer.get("ok", in: CollectionSpec.default.documentsKeyspace))
                    record.version = Array("9-ff".utf8)
                    try writer.put(record, in: CollectionSpec.default.documentsKeyspace)
                }
            }
            let problems = try await db.checkIntegrity()
            #expect(problems.contains { $0.contains("broken") && $0.contains("does not decode") }, "\(problems)")
            #expect(problems.contains { $0.contains("ok") && $0.contains("not the winner") }, "\(problems)")
            await expectError(.corrupt) { try await db.performMaintenance(.integrityCheck) }
            // Reading the damaged document fails cleanly.
            await expectError(.corrupt) { try await c.revisions(of: "broken") }
        }
    }

    @Test func revisionTreeIsPrunedToMaxDepth() async throws {
        try await withDatabase(.memory, maxRevTreeDepth: 5) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "deep", data: [:])
            for i in 0..<12 {
                doc.setInt(i, forKey: "i")
                try await c.save(document: &doc)
            }
            let revs = try #require(try await c.revisions(of: "deep"))
            #expect(revs.revisions.count == 5)
            #expect(revs.currentRevID.generation == 12)
            #expect(revs.revisions.map(\.revID.generation).min() == 8)
            // Bodies kept: the leaf and its parent only.
            #expect(revs.revisions.filter(\.hasBody).map(\.revID.generation).sorted() == [11, 12])
            #expect(try await c.revisionBody(docID: "deep", revID: revs.currentRevID) == ["i": 11])
            #expect(try await db.checkIntegrity().isEmpty)
        }
    }
}

#if SQLite && canImport(PeerSyncSQLite)
import PeerSyncSQLite

@Suite struct DamagedFileTests {
    @Test func openingAGarbageStoreFailsWithATypedError() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let folder = dir.path + "/bad.peersync"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: folder + "/" + SQLiteStorageBackend.fileName))
        do {
            _ = try await Database(name: "bad", config: makeConfig(.sqlite, dir))
            Issue.record("opened a garbage file")
        } catch let error as PeerSyncError {
            #expect(error.code == .corrupt, "\(error)")
        }
    }
}
#endif

/// A memory backend whose integrity check reports a fixed problem.
private struct CheckingBackend: StorageBackend, StorageBackendIntegrityChecking {
    let inner = MemoryStorageBackend()
    var name: String { "checking" }
    func open(directory: String, options: StorageOptions) throws -> any Storage { try inner.open(directory: directory, options: options) }
    func hasStore(in directory: String) -> Bool { inner.hasStore(in: directory) }
    func checkIntegrity(directory: String) throws -> [String] { ["page 7 is damaged in \(URL(fileURLWithPath: directory).lastPathComponent)"] }
}

@Suite struct BackendIntegrityTests {
    @Test func backendCheckIsIncluded() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let db = try await Database(name: "chk", config: DatabaseConfiguration(directory: dir.path, backend: CheckingBackend()))
        #expect(try await db.checkIntegrity() == ["storage: page 7 is damaged in chk.peersync"])
        try await db.close()
    }
}

/// Smuggles a transaction out of its batch to check that it is dead afterwards.
private final class TransactionBox: @unchecked Sendable {
    var transaction: DatabaseTransaction?
}

@Suite struct TransactionAndScopeTests {
    @Test func transactionConflictHandlerAndLifetime() async throws {
        try await withDatabase(.memory) { db, _ in
            let c = try db.defaultCollection()
            var original = MutableDocument(id: "t", data: ["v": 1])
            try await c.save(document: &original)
            var newer = original
            newer.setInt(2, forKey: "v")
            try await c.save(document: &newer)

            let box = TransactionBox()
            let saved = try await db.inBatch { txn in
                box.transaction = txn
                var stale = original
                stale.setInt(3, forKey: "w")
                return try txn.save(document: &stale, in: c) { doc, current in
                    doc.setInt(current?.int(forKey: "v") ?? 0, forKey: "v")
                    return true
                }
            }
            #expect(saved)
            #expect(try await c.document(id: "t")?.properties == ["v": 2, "w": 3])
            let escaped = try #require(box.transaction)
            #expect(throws: PeerSyncError.self) { try escaped.document(id: "t", in: c) }

            // A collection of another database is refused.
            try await withDatabase(.memory) { other, _ in
                let foreign = try other.defaultCollection()
                await expectError(.invalidArgument) {
                    try await db.inBatch { txn in try txn.document(id: "t", in: foreign) }
                }
            }
        }
    }

    @Test func scopeObjects() async throws {
        try await withDatabase(.memory) { db, _ in
            try await db.createCollection(name: "one", scope: "s")
            let scope = try #require(try await db.scope(name: "s"))
            #expect(try await scope.collection(name: "one")?.fullName == "s.one")
            #expect(try await scope.collection(name: "two") == nil)
            #expect(try await db.defaultScope().collections().map(\.name) == ["_default"])
            #expect(scope == (try await db.scopes()).last)
        }
    }
}
