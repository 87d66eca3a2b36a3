import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

@Suite struct ReadBatchTests {
    @Test(arguments: Backend.available)
    func readBatchReadsTreesAndRawBodies(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            let body: [String: JSONValue] = ["z": 1, "a": ["b": "c\u{e9}\n"], "m": [1.5, true, .null]]
            try await c.insertRevision(docID: "d", revID: .t(2, "b"), history: [.t(1, "a")], body: body, deleted: false)
            try await c.insertRevision(docID: "gone", revID: .t(2, "x"), history: [.t(1, "w")], body: [:], deleted: true)

            let (revs, raw, missing, tomb, unknownRev) = try await db.inReadBatch { txn in
                let read = try txn.revisionsAndBody(of: "d", in: c)
                return (read?.revisions, read?.body, try txn.revisionsAndBody(of: "nope", in: c) == nil,
                        try txn.revisionsAndBody(of: "gone", in: c)?.body,
                        try txn.revisionsAndBody(of: "d", revID: .t(1, "a"), in: c).map { $0.body == nil })
            }
            #expect(missing)
            #expect(revs?.currentRevID == .t(2, "b") && revs?.revisions.count == 2)
            let stored = try #require(raw)
            // The stored bytes are exactly the canonical JSON a parse + serialise would give.
            #expect(stored.data == JSONValue.object(body).canonicalData)
            #expect(stored.revID == .t(2, "b") && !stored.isDeleted && !stored.mayReferenceBlobs)
            #expect(try stored.properties() == body)
            #expect(tomb?.isDeleted == true && tomb?.data == Array("{}".utf8) && tomb?.revID == .t(2, "x"))
            #expect(unknownRev == true)  // the ancestor's body is not stored
            #expect(try await c.revisionBodyData(docID: "d", revID: .t(2, "b")) == stored)
            #expect(try await c.revisionBodyData(docID: "d", revID: .t(9, "z")) == nil)

            // The other reads of the batch agree with the Collection API.
            let (doc, tree, parsed) = try await db.inReadBatch { txn in
                (try txn.document(id: "d", in: c)?.revisionID, try txn.revisions(of: "d", in: c),
                 try txn.revisionBody(docID: "d", revID: .t(2, "b"), in: c))
            }
            #expect(doc == RevisionID.t(2, "b").description)
            #expect(tree == (try await c.revisions(of: "d")))
            #expect(parsed == body)
        }
    }

    @Test(arguments: Backend.available)
    func blobReferencesAreNeverMissed(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            var doc = MutableDocument(id: "b")
            doc.setBlob(Blob(contentType: "text/plain", data: Data("hello".utf8)), at: ["deep", "file"])
            try await c.save(document: &doc)
            let rev = try RevisionID(try #require(doc.revisionID))
            let raw = try #require(try await c.revisionBodyData(docID: "b", revID: rev))
            #expect(raw.mayReferenceBlobs)
            // A legacy `_attachments` entry from a peer (not flagged by a blob dictionary).
            try await c.insertRevision(docID: "l", revID: .t(1, "a"), history: [],
                                       body: ["_attachments": ["f": ["digest": "sha1-AAAA", "length": 1]]], deleted: false)
            #expect(try await c.revisionBodyData(docID: "l", revID: .t(1, "a"))?.mayReferenceBlobs == true)
            // The byte search alone (an unflagged revision) finds a `digest` key anywhere.
            #expect(RevisionBodyData.containsDigestKey(Array(#"{"a":{"digest":"x"}}"#.utf8)))
            #expect(RevisionBodyData.containsDigestKey(Array(#""digest""#.utf8)))
            #expect(!RevisionBodyData.containsDigestKey(Array(#"{"digests":1,"x":"digest-ish"}"#.utf8)))
            #expect(RevisionBodyData.containsDigestKey(Array(#"{"v":"digest"}"#.utf8)))  // conservative: a value too
            #expect(!RevisionBodyData.containsDigestKey(Array(#"{"dig":"est","x":"\"diges"}"#.utf8)))
            #expect(!RevisionBodyData.containsDigestKey([]))
        }
    }

    @Test(arguments: Backend.available)
    func readBatchRejectsMisuse(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            final class Holder: @unchecked Sendable { var txn: DatabaseReadTransaction? }  // test only, one task
            let holder = Holder()
            try await db.inReadBatch { txn in holder.txn = txn }
            let leaked = try #require(holder.txn)
            #expect(throws: PeerSyncError.self) { try leaked.revisions(of: "x", in: c) }
            #expect((try? leaked.revisionsAndBody(of: "x", in: c)) == nil)
            // Errors thrown in the closure are rethrown; a collection of another database is refused.
            try await withDatabase(backend) { other, _ in
                let foreign = try other.defaultCollection()
                await expectError(.invalidArgument) {
                    try await db.inReadBatch { txn in try txn.revisions(of: "x", in: foreign) }
                }
            }
            await expectError(.notFound) {
                try await db.inReadBatch { _ in throw PeerSyncError(.notFound, "from the closure") }
            }
        }
    }

    @Test(arguments: Backend.available)
    func insertReturnsTheTreeAsWritten(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let c = try db.defaultCollection()
            try await c.insertRevision(docID: "d", revID: .t(2, "b"), history: [.t(1, "a")], body: ["v": 2], deleted: false)
            let (first, again) = try await db.inBatch { txn in
                // A conflicting branch, then the same revision again (nothing added).
                let branch = try txn.insertRevisionReturningRevisions(docID: "d", revID: .t(2, "c"), history: [.t(1, "a")],
                                                                      body: ["v": 3], deleted: false, in: c)
                let same = try txn.insertRevisionReturningRevisions(docID: "d", revID: .t(2, "c"), history: [.t(1, "a")],
                                                                    body: ["v": 3], deleted: false, in: c)
                return (branch, same)
            }
            #expect(first.result.inserted && first.result.isConflicted)
            let stored = try await c.revisions(of: "d")
            #expect(first.revisions != nil && first.revisions == stored)
            #expect(first.revisions?.isConflicted == true && first.revisions?.leaves.count == 2)
            #expect(!again.result.inserted && again.revisions == nil)
        }
    }
}
