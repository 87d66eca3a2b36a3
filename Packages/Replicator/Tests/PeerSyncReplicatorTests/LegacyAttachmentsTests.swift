import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
@testable import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

private func sha1Digest(_ bytes: [UInt8]) -> String { "sha1-" + Data(SHA1.hash(bytes)).base64EncodedString() }

private func blobRef(_ digest: String, _ length: Int, _ type: String = "text/plain") -> JSONValue {
    .object(["@type": "blob", "digest": .string(digest), "length": .int(Int64(length)), "content_type": .string(type)])
}

/// The pure transforms (protocol notes §7, §9).
@Suite struct LegacyAttachmentsTransformTests {
    let d1 = "sha1-" + String(repeating: "A", count: 27) + "="
    let d2 = "sha1-" + String(repeating: "B", count: 27) + "="
    let d3 = "sha1-" + String(repeating: "C", count: 27) + "="

    @Test func encodeAddsOneStubPerBlobNamedByJSONPointer() {
        let body: [String: JSONValue] = [
            "photo": blobRef(d1, 10, "image/png"),
            "list": [1, .object(["x": blobRef(d2, 20)])],
            "a/b~c": blobRef(d3, 30),
            "_attachments": ["old.txt": ["digest": "md5-xyz", "stub": true, "revpos": 1],
                             "blob_/gone": ["digest": .string(d3), "stub": true]],
            "title": "t",
        ]
        let out = LegacyAttachments.encode(body, revpos: 7)
        let attachments = out["_attachments"]?.objectValue ?? [:]
        #expect(Set(attachments.keys) == ["old.txt", "blob_/photo", "blob_/list/1/x", "blob_/a~1b~0c"])
        #expect(attachments["blob_/photo"] == ["digest": .string(d1), "length": 10, "content_type": "image/png",
                                               "stub": true, "revpos": 7])
        #expect(attachments["blob_/list/1/x"]?["digest"] == .string(d2))
        #expect(attachments["old.txt"] == ["digest": "md5-xyz", "stub": true, "revpos": 1])
        // The rest of the body is untouched (blobs keep `@type`).
        var rest = out
        rest["_attachments"] = nil
        var original = body
        original["_attachments"] = nil
        #expect(rest == original)
        // No blob: unchanged.
        let plain: [String: JSONValue] = ["n": 1, "_attachments": ["blob_/x": ["digest": .string(d1)]]]
        #expect(LegacyAttachments.encode(plain, revpos: 2) == plain)
    }

    @Test func decodeRoundTripsAndStripsUnderscoreKeys() throws {
        let stored: [String: JSONValue] = ["photo": blobRef(d1, 10), "deep": [["f": blobRef(d2, 5)]],
                                           "_attachments": ["legacy.txt": ["digest": .string(d3), "stub": true, "revpos": 1]]]
        var wire = LegacyAttachments.encode(stored, revpos: 3)
        wire["_id"] = "doc"
        wire["_rev"] = "3-abcd"
        wire["_revisions"] = ["start": 3]
        wire["_exp"] = 12
        #expect(try LegacyAttachments.decode(wire) == stored)
        // Only blob_ entries gone: `_attachments` disappears.
        var onlyBlobs = LegacyAttachments.encode(["photo": blobRef(d1, 10)], revpos: 1)
        onlyBlobs["_deleted"] = false
        #expect(try LegacyAttachments.decode(onlyBlobs) == ["photo": blobRef(d1, 10)])
        // No `_attachments`: blobs need no entry.
        #expect(try LegacyAttachments.decode(["photo": blobRef(d1, 10), "_id": "x"]) == ["photo": blobRef(d1, 10)])
        // A non-dictionary `_attachments` is stripped like any `_` key.
        #expect(try LegacyAttachments.decode(["n": 1, "_attachments": "junk"]) == ["n": 1])
    }

    @Test func decodeCopiesAChangedDigestIntoTheBlob() throws {
        let body: [String: JSONValue] = ["photo": blobRef(d1, 10),
                                         "_attachments": ["blob_/photo": ["digest": .string(d2), "stub": true, "revpos": 2]]]
        let out = try LegacyAttachments.decode(body)
        #expect(out["photo"]?["digest"] == .string(d2))
        #expect(out["photo"]?["length"] == 10)
        #expect(out["_attachments"] == nil)
        // A blob_ entry that points at no blob is an ordinary legacy attachment.
        let stray: [String: JSONValue] = ["n": 1, "_attachments": ["blob_/nothing": ["digest": .string(d3)]]]
        #expect(try LegacyAttachments.decode(stray) == stray)
    }

    @Test func blobWhoseDigestIsAbsentFromAttachmentsFails() {
        let body: [String: JSONValue] = ["photo": blobRef(d1, 10),
                                         "_attachments": ["other.txt": ["digest": .string(d2), "stub": true]]]
        #expect(throws: PeerSyncError.self) { try LegacyAttachments.decode(body) }
        do { _ = try LegacyAttachments.decode(body) } catch { #expect(error.code == .notFound) }
        // The same digest under any entry name is enough.
        let ok: [String: JSONValue] = ["photo": blobRef(d1, 10),
                                       "_attachments": ["other.txt": ["digest": .string(d1), "stub": true]]]
        #expect(throws: Never.self) { try LegacyAttachments.decode(ok) }
    }

    @Test func legacyFormIsSentWithoutBlobsTrueOrWhenAttachmentsAreAlreadyThere() {
        let blobOnly: [String: JSONValue] = ["f": blobRef(d1, 1)]
        let mixed: [String: JSONValue] = ["f": blobRef(d1, 1), "_attachments": ["a.txt": ["digest": .string(d2)]]]
        #expect(LegacyAttachments.sendsLegacyForm(blobOnly, peerSupportsBlobs: false))
        #expect(!LegacyAttachments.sendsLegacyForm(blobOnly, peerSupportsBlobs: true))
        #expect(LegacyAttachments.sendsLegacyForm(mixed, peerSupportsBlobs: true))
        // What is sent then passes the receiver's check and decodes back to the stored body.
        #expect(throws: PeerSyncError.self) { try LegacyAttachments.decode(mixed) }
        #expect((try? LegacyAttachments.decode(LegacyAttachments.encode(mixed, revpos: 4))) == mixed)
    }

    @Test func attachmentReferencesAreBlobStoreDigestsOnly() {
        let body: [String: JSONValue] = ["_attachments": [
            "a.txt": ["digest": .string(d1), "length": 3, "content_type": "text/plain", "stub": true],
            "md5.txt": ["digest": "md5-abc", "stub": true],
            "inline.txt": ["digest": .string(d2), "data": "aGk="],
            "nolength.txt": ["digest": .string(d3), "stub": true],
        ]]
        #expect(LegacyAttachments.attachmentReferences(in: body)
                == [["@type": "blob", "digest": .string(d1), "length": 3, "content_type": "text/plain"]])
    }
}

/// A raw BLIP peer pulling from a passive session, answering `changes` with or without
/// `blobs: true` (and `deltas: true` with `deltas`), claiming the `known` revisions of each
/// document; the `rev`s it receives are yielded.
private func rawPuller(_ peer: Peer, blobs: Bool, deltas: Bool = false,
                       known: [String: [String]] = [:]) async throws -> (BLIPConnection, AsyncStream<BLIPRequest>) {
    let conn = try await peer.connector()(ReplicatorConfiguration(target: peer.endpoint))
    let blip = try BLIPConnection(connection: conn)
    let (revs, continuation) = AsyncStream<BLIPRequest>.makeStream()
    await blip.setHandler(profile: "changes") { request in
        let entries = (try? JSONValue(parsing: request.body))?.arrayValue ?? []
        var props: BLIPProperties = blobs ? [("blobs", "true")] : []
        if deltas { props["deltas"] = "true" }
        let answers: [JSONValue] = entries.map { e in
            .array((known[e.arrayValue?[1].stringValue ?? ""] ?? []).map { .string($0) })
        }
        return BLIPMessage(type: .response, properties: props, body: JSONValue.array(answers).canonicalData)
    }
    await blip.setHandler(profile: "rev") { request in
        continuation.yield(request)
        return nil
    }
    await blip.start()
    let reply = try await blip.sendRequest(.request("getCollections", body: JSONValue.object([
        "checkpoint_ids": .array(["raw"]), "collections": .array(["_default"]),
    ]).canonicalData))
    #expect(!reply.isError)
    _ = try await blip.sendRequest(.request("subChanges", properties: [("collection", "0")]))
    return (blip, revs)
}

@Suite struct LegacyAttachmentsProtocolTests {
    @Test func pushedBodiesCarryLegacyAttachmentsOnlyWithoutBlobsTrue() async throws {
        try await withPeers(1) { p in
            try p[0].listen()
            let collection = try p[0].defaultCollection
            let content = Data("legacy peers see _attachments".utf8)
            var doc = MutableDocument(id: "doc", data: ["title": "x"])
            doc.setBlob(Blob(contentType: "text/plain", data: content), forKey: "file")
            try await collection.save(document: &doc)
            var edited = try #require(try await collection.document(id: "doc")).toMutable()
            edited.setValue("y", forKey: "title")
            try await collection.save(document: &edited)
            try await save(collection, "plain", ["n": 1])
            let blob = try #require(try await collection.document(id: "doc")?.blob(forKey: "file"))

            for blobs in [false, true] {
                let (blip, revs) = try await rawPuller(p[0], blobs: blobs)
                var bodies: [String: [String: JSONValue]] = [:]
                for await rev in revs {
                    bodies[rev.properties["id"] ?? ""] = try JSONValue(parsing: rev.body).objectValue
                    if bodies.count == 2 { break }
                }
                let body = try #require(bodies["doc"])
                #expect(body["file"] == .object(blob.properties))
                #expect(body["title"] == "y")
                #expect(bodies["plain"] == ["n": 1])
                if blobs {
                    #expect(body["_attachments"] == nil)
                } else {
                    var entry = blob.properties
                    entry["@type"] = nil
                    entry["stub"] = true
                    entry["revpos"] = 2
                    #expect(body["_attachments"] == ["blob_/file": .object(entry)])
                }
                // The content is served either way.
                let got = try await blip.sendRequest(.request("getAttachment", properties: [
                    ("collection", "0"), ("digest", blob.digest), ("docID", "doc")]))
                #expect(!got.isError && got.body == Array(content))
                await blip.close()
            }
        }
    }

    @Test func deltaToAPeerWithoutBlobsIsBetweenLegacyForms() async throws {
        try await withPeers(1) { p in
            try p[0].listen(options: .init(enableDeltaSync: true))
            let collection = try p[0].defaultCollection
            var doc = MutableDocument(id: "doc", data: ["text": .string(String(repeating: "long enough for a delta ", count: 20)),
                                                       "n": 1])
            doc.setBlob(Blob(contentType: "text/plain", data: Data("delta base".utf8)), forKey: "file")
            try await collection.save(document: &doc)
            let rev1 = try #require(doc.revisionID)
            let body1 = try #require(try await collection.document(id: "doc")?.properties)
            doc.setValue(2, forKey: "n")
            try await collection.save(document: &doc)
            let rev2 = try #require(try await collection.document(id: "doc"))

            let (blip, revs) = try await rawPuller(p[0], blobs: false, deltas: true, known: ["doc": [rev1]])
            var iterator = revs.makeAsyncIterator()
            let rev = try #require(await iterator.next())
            #expect(rev.properties["deltaSrc"] == rev1)
            let delta = try JSONValue(parsing: rev.body)
            // Between legacy forms, only the revpos changes under `_attachments`; applied to the base's legacy form it gives rev 2's.
            #expect(delta == ["n": 2, "_attachments": ["blob_/file": ["revpos": 2]]])
            let base = LegacyAttachments.encode(body1, revpos: 1)
            let applied = try JSONDelta.apply(delta, to: .object(base))
            #expect(applied == .object(LegacyAttachments.encode(rev2.properties, revpos: 2)))
            await blip.close()
        }
    }

    @Test func receivedLegacyBodiesAreStrippedAndTheirAttachmentsFetched() async throws {
        try await withPeers(2) { p in
            try p[0].listen()
            let blobContent = Array("a modern blob".utf8), legacyContent = Array("an old-style attachment".utf8)
            let blobDigest = sha1Digest(blobContent), legacyDigest = sha1Digest(legacyContent)
            let client = try await RawClient.connect(to: p[0], attachments: [blobDigest: blobContent, legacyDigest: legacyContent])
            let legacyEntry: JSONValue = ["digest": .string(legacyDigest), "length": .int(Int64(legacyContent.count)),
                                          "content_type": "text/plain", "stub": true, "revpos": 1]
            // As Sync Gateway sends it: meta properties, the blob mirrored under `blob_/file`.
            let body: JSONValue = [
                "_id": "sg", "_rev": "1-abcd", "_revisions": ["start": 1, "ids": ["abcd"]], "_exp": 99,
                "title": "from SG",
                "file": blobRef(blobDigest, blobContent.count),
                "_attachments": ["blob_/file": ["digest": .string(blobDigest), "length": .int(Int64(blobContent.count)),
                                                "stub": true, "revpos": 1],
                                 "notes.txt": legacyEntry],
            ]
            let reply = try await client.request("rev", [("id", "sg"), ("rev", "1-abcd")], body: body.canonicalData)
            #expect(!reply.isError, "\(reply.bodyString)")
            let stored = try #require(try await p[0].defaultCollection.revisionBody(docID: "sg", revID: RevisionID("1-abcd")))
            #expect(stored == ["title": "from SG", "file": blobRef(blobDigest, blobContent.count),
                               "_attachments": ["notes.txt": legacyEntry]])
            // Both contents were fetched with getAttachment and verified.
            for (digest, content) in [(blobDigest, blobContent), (legacyDigest, legacyContent)] {
                let blob = try #require(try await p[0].db.getBlob(properties: ["@type": "blob", "digest": .string(digest),
                                                                               "length": .int(Int64(content.count))]))
                #expect(try await storedSHA1(blob).0 == SHA1.hash(content))
            }

            // A blob whose digest is in no `_attachments` entry fails the rev (LiteCore/NotFound).
            let other = Array("unlisted".utf8)
            let bad: JSONValue = ["file": blobRef(sha1Digest(other), other.count), "_attachments": ["notes.txt": legacyEntry]]
            let refused = try await client.request("rev", [("id", "bad"), ("rev", "1-abcd")], body: bad.canonicalData)
            #expect(refused.errorDomain == "LiteCore" && refused.errorCode == 7)
            #expect(try await p[0].defaultCollection.document(id: "bad") == nil)

            // A delta mentioning `_attachments` applies to the base's legacy form.
            let delta: JSONValue = ["title": "edited", "_attachments": ["blob_/file": ["revpos": 2]]]
            let edited = try await client.request("rev", [("id", "sg"), ("rev", "2-abcd"), ("history", "1-abcd"),
                                                          ("deltaSrc", "1-abcd")], body: delta.canonicalData)
            #expect(!edited.isError, "\(edited.bodyString)")
            let after = try #require(try await p[0].defaultCollection.revisionBody(docID: "sg", revID: RevisionID("2-abcd")))
            #expect(after == ["title": "edited", "file": blobRef(blobDigest, blobContent.count),
                              "_attachments": ["notes.txt": legacyEntry]])
            await client.blip.close()

            // Pulled on by one of our replicators (blobs: true): the body, which keeps
            // `_attachments`, goes with `blob_` entries again so the receiver's digest check
            // passes, and the kept legacy attachment's content is served too.
            let log = EventLog()
            let status = try await replicate(p[1], to: p[0], type: .pull, events: log)
            #expect(status.error == nil, "\(status)")
            #expect(log.documents.map(\.id) == ["sg"] && log.documents.allSatisfy { $0.error == nil }, "\(log.documents)")
            let copy = try #require(try await p[1].defaultCollection.revisionBody(docID: "sg", revID: RevisionID("2-abcd")))
            #expect(copy == after)
            let pulled = try #require(try await p[1].db.getBlob(properties: ["@type": "blob", "digest": .string(legacyDigest),
                                                                             "length": .int(Int64(legacyContent.count))]))
            #expect(try await storedSHA1(pulled).0 == SHA1.hash(legacyContent))
        }
    }

    @Test func activePushToAPeerWithoutBlobsSupportSendsLegacyAttachments() async throws {
        let network = LoopbackNetwork()
        let received = Mutex<[String: JSONValue]>([:])
        let peer = try ScriptedPeer(network: network, script: { _ in }) { blip in
            await blip.setHandler(profile: "proposeChanges") { request in
                let entries = (try? JSONValue(parsing: request.body))?.arrayValue ?? []
                return BLIPMessage(type: .response, body: JSONValue.array(entries.map { _ in .int(0) }).canonicalData)
            }
            await blip.setHandler(profile: "rev") { request in
                let body = try JSONValue(parsing: request.body)
                received.withLock { $0[request.properties["id"] ?? ""] = body }
                return nil
            }
        }
        try await withPeers(1) { p in
            let collection = try p[0].defaultCollection
            var doc = MutableDocument(id: "doc")
            let blob = Blob(contentType: "text/plain", data: Data("pushed".utf8))
            try await p[0].db.saveBlob(blob)
            doc.setValue(.array([.object(blob.properties)]), forKey: "files")
            try await collection.save(document: &doc)
            let stored = try #require(try await collection.document(id: "doc"))
            var cfg = ReplicatorConfiguration(target: peer.endpoint)
            cfg.replicatorType = .push
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollections([collection], config: .init())
            let replicator = try Replicator(config: cfg, connector: peer.connector())
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            let body = try #require(received.withLock { $0["doc"] })
            var entry = blob.properties
            entry["@type"] = nil
            entry["stub"] = true
            entry["revpos"] = .int(Int64(stored.generation))
            #expect(body["_attachments"] == ["blob_/files/0": .object(entry)])
            #expect(body["files"] == .array([.object(blob.properties)]))
        }
        await peer.close()
    }
}
