import Foundation
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Synchronization
import Testing

@Suite struct BasicReplicationTests {
    @Test func pushOneShot() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            for i in 0..<30 { try await save(a, "doc\(i)", ["n": .int(Int64(i))]) }
            let status = try await replicate(p[0], to: p[1], type: .push)
            #expect(status.error == nil && status.activity == .stopped)
            #expect(try await b.count == 30)
            #expect(try await b.document(id: "doc7")?.int(forKey: "n") == 7)
            let sa = try await snapshot(a), sb = try await snapshot(b)
            #expect(sa == sb)
        }
    }

    @Test func pullOneShot() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            for i in 0..<25 { try await save(b, "d\(i)", ["v": .string("x\(i)")]) }
            let status = try await replicate(p[0], to: p[1], type: .pull)
            #expect(status.error == nil)
            #expect(try await a.count == 25)
            let sa = try await snapshot(a), sb = try await snapshot(b)
            #expect(sa == sb)
        }
    }

    @Test func pushAndPullWithDeletionsAndUpdates() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            for i in 0..<10 { try await save(a, "a\(i)", ["side": "a"]) }
            for i in 0..<10 { try await save(b, "b\(i)", ["side": "b"]) }
            try await replicate(p[0], to: p[1])
            let ca = try await a.count, cb = try await b.count
            #expect(ca == 20 && cb == 20)
            // Updates and deletions both ways.
            try await save(a, "b3", ["side": "a-edit"])
            try await b.delete(document: try #require(try await b.document(id: "a4")))
            let status = try await replicate(p[0], to: p[1])
            #expect(status.error == nil)
            #expect(try await b.document(id: "b3")?.string(forKey: "side") == "a-edit")
            #expect(try await a.document(id: "a4") == nil)
            #expect(try await a.documentIncludingDeleted(id: "a4")?.isDeleted == true)
            let sa = try await snapshot(a), sb = try await snapshot(b)
            #expect(sa == sb)
        }
    }

    @Test func checkpointResumeTransfersOnlyNewDocuments() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection
            for i in 0..<20 { try await save(a, "d\(i)", ["i": .int(Int64(i))]) }
            let first = EventLog()
            try await replicate(p[0], to: p[1], type: .push, events: first)
            #expect(first.documents.count == 20)
            let second = EventLog()
            try await replicate(p[0], to: p[1], type: .push, events: second)
            #expect(second.documents.count == 0)
            try await save(a, "new", ["fresh": true])
            let third = EventLog()
            try await replicate(p[0], to: p[1], type: .push, events: third)
            #expect(third.documents.map(\.id) == ["new"])
            // reset: everything compared again (the peer has them all: nothing is sent again,
            // but every document is proposed, answered 304).
            let status = try await replicate(p[0], to: p[1], type: .push, reset: true)
            #expect(status.error == nil)
        }
    }

    @Test func filtersAndDocumentIDs() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            for i in 0..<10 { try await save(a, "d\(i)", ["even": .bool(i % 2 == 0)]) }
            var cfg = CollectionConfiguration()
            cfg.pushFilter = { doc, _ in doc.bool(forKey: "even") }
            try await replicate(p[0], to: p[1], type: .push, config: cfg)
            #expect(try await b.documentIDs().sorted() == ["d0", "d2", "d4", "d6", "d8"])

            for i in 0..<5 { try await save(b, "remote\(i)", ["i": .int(Int64(i))]) }
            var ids = CollectionConfiguration()
            ids.documentIDs = ["remote1", "remote3"]
            try await replicate(p[0], to: p[1], type: .pull, config: ids)
            let r1 = try await a.document(id: "remote1"), r3 = try await a.document(id: "remote3")
            #expect(r1 != nil && r3 != nil)
            #expect(try await a.document(id: "remote2") == nil)

            var pullFilter = CollectionConfiguration()
            pullFilter.pullFilter = { doc, _ in doc.int(forKey: "i") == 4 }
            try await replicate(p[0], to: p[1], type: .pull, config: pullFilter)
            let r4 = try await a.document(id: "remote4"), r0 = try await a.document(id: "remote0")
            #expect(r4 != nil && r0 == nil)
        }
    }

    @Test func blobsAreTransferredAndVerified() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            let content = Data((0..<1024).map { UInt8($0 % 251) })
            var doc = MutableDocument(id: "withBlob")
            doc.setBlob(Blob(contentType: "application/octet-stream", data: content), forKey: "file")
            try await a.save(document: &doc)
            try await replicate(p[0], to: p[1], type: .push)
            let pushed = try #require(try await b.document(id: "withBlob"))
            let blob = try #require(pushed.blob(forKey: "file"))
            #expect(try await p[1].db.getBlob(properties: blob.properties)?.content == content)
            // And pulled the other way into a third peer.
        }
    }
}
