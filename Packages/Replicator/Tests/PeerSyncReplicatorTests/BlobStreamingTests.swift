import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// Blob content made on the fly: `length` bytes from a seeded generator, streamed into a
/// database's blob store (never whole in memory). Returns the blob and its SHA-1.
func writeGeneratedBlob(_ db: Database, length: Int, seed: UInt64, contentType: String) async throws -> (Blob, [UInt8]) {
    let writer = try await db.openBlobWriter()
    var rng = SplitMix64(seed: seed)
    var hasher = SHA1()
    var written = 0
    var chunk = [UInt8](repeating: 0, count: 256 * 1024)
    while written < length {
        let n = min(chunk.count, length - written)
        chunk.withUnsafeMutableBytes { raw in
            var i = 0
            while i < n {
                var word = rng.next()
                for _ in 0..<8 where i < n { raw[i] = UInt8(truncatingIfNeeded: word); word >>= 8; i += 1 }
            }
        }
        hasher.update(chunk[0..<n])
        try await writer.write(Data(chunk[0..<n]))
        written += n
    }
    return (try await writer.finish(contentType: contentType), hasher.finalize())
}

/// SHA-1 and length of a blob's stored content, read in chunks.
func storedSHA1(_ blob: Blob) async throws -> ([UInt8], Int) {
    var hasher = SHA1()
    var count = 0
    for try await chunk in blob.contentStream() {
        chunk.withUnsafeBytes { hasher.update(buffer: $0) }
        count += chunk.count
    }
    return (hasher.finalize(), count)
}

/// Resident memory of this process from /proc/self/status (kB): current and high-water mark.
func memoryKB() -> (rss: Int, hwm: Int) {
    // /proc files report size 0: read to the end rather than by the size.
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/status"),
          let data = try? handle.read(upToCount: 1 << 16) else { return (0, 0) }
    try? handle.close()
    let text = String(decoding: data, as: UTF8.self)
    func field(_ name: String) -> Int {
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            return Int(line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? 0
        }
        return 0
    }
    return (field("VmRSS"), field("VmHWM"))
}

/// Samples VmRSS every 20 ms while `body` runs; returns the peak growth over the start (kB).
func peakRSSGrowth(_ body: () async throws -> Void) async throws -> Int {
    let start = memoryKB().rss
    let peak = Atomic<Int>(start)
    let sampler = Task {
        while !Task.isCancelled {
            let now = memoryKB().rss
            _ = peak.max(now, ordering: .relaxed)
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
    defer { sampler.cancel() }
    try await body()
    _ = peak.max(memoryKB().rss, ordering: .relaxed)
    return peak.load(ordering: .relaxed) - start
}

@Suite(.serialized) struct BlobStreamingTests {
    static let bigLength = 50 * 1024 * 1024

    @Test func fiftyMegabyteBlobPushedThenPulledIntoAThirdDatabase() async throws {
        try await withPeers(3) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection, c = try p[2].defaultCollection
            let (small, smallSHA) = try await writeGeneratedBlob(p[0].db, length: 1024, seed: 1, contentType: "text/plain")
            let (big, bigSHA) = try await writeGeneratedBlob(p[0].db, length: Self.bigLength, seed: 2,
                                                             contentType: "application/octet-stream")
            var doc = MutableDocument(id: "withBlobs", data: ["title": "two blobs"])
            doc.setBlob(small, forKey: "small")
            doc.setBlob(big, forKey: "big")
            try await a.save(document: &doc)

            var status: ReplicatorStatus?
            let pushGrowth = try await peakRSSGrowth { status = try await replicate(p[0], to: p[1], type: .push) }
            #expect(status?.error == nil)
            let pullGrowth = try await peakRSSGrowth { status = try await replicate(p[2], to: p[1], type: .pull) }
            #expect(status?.error == nil)
            print("blob RSS growth: push \(pushGrowth / 1024) MB, pull \(pullGrowth / 1024) MB for a \(Self.bigLength >> 20) MiB blob; VmHWM \(memoryKB().hwm / 1024) MB")

            // The listener's BLIP connections never held more than about one ACK window.
            let blips = p[1].blips.withLock { $0 }
            #expect(blips.count == 2)
            var peakIn = 0, peakOut = 0
            for blip in blips {
                let stats = await blip.streamStatistics
                peakIn = max(peakIn, stats.peakBufferedInboundBytes)
                peakOut = max(peakOut, stats.peakBufferedOutboundBytes)
            }
            #expect(peakIn > 0 && peakIn <= 1 << 20)
            #expect(peakOut > 0 && peakOut <= 256 * 1024)

            // All three databases hold the same document and blobs, re-read and checked.
            let snapA = try await snapshot(a)
            #expect(try await snapshot(b) == snapA)
            #expect(try await snapshot(c) == snapA)
            for (peer, collection) in [(p[1], b), (p[2], c)] {
                let copy = try #require(try await collection.document(id: "withBlobs"))
                for (key, sha, length) in [("small", smallSHA, 1024), ("big", bigSHA, Self.bigLength)] {
                    let ref = try #require(copy.blob(forKey: key))
                    #expect(ref.digest == (key == "small" ? small.digest : big.digest))
                    let stored = try #require(try await peer.db.getBlob(properties: ref.properties))
                    let (digest, count) = try await storedSHA1(stored)
                    #expect(count == length)
                    #expect(digest == sha)
                }
            }
        }
    }

    @Test func slowBlobTransferOutlastsTheReplyTimeout() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            let (blob, sha) = try await writeGeneratedBlob(p[0].db, length: 3 * 1024 * 1024, seed: 9,
                                                           contentType: "application/octet-stream")
            var doc = MutableDocument(id: "slow")
            doc.setBlob(blob, forKey: "file")
            try await a.save(document: &doc)
            // 1 MB/s: the blob takes ~3 s, three times the reply timeout of the `rev` that waits
            // for it. The wait goes on while blob content is being served. A slow run stretches
            // both by `slowFactor` (so the ratio stays).
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.replicatorType = .push
            cfg.replyTimeout = slow(.seconds(1))
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollections([a], config: .init())
            let replicator = try Replicator(config: cfg, connector: p[1].connector(conditions: LinkConditions(bandwidth: 1_000_000 / slowFactor)))
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            #expect(p[1].blips.withLock { $0.count } == 1)
            let copy = try #require(try await b.document(id: "slow")?.blob(forKey: "file"))
            let stored = try #require(try await p[1].db.getBlob(properties: copy.properties))
            #expect(try await storedSHA1(stored).0 == sha)
        }
    }

    @Test func compressedAttachmentRoundTrip() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            // A compressible content type: the puller asks for `compress: true`.
            let text = Data(String(repeating: "streamed blobs compress per frame. ", count: 40_000).utf8)
            var doc = MutableDocument(id: "text")
            doc.setBlob(Blob(contentType: "text/plain", data: text), forKey: "file")
            try await a.save(document: &doc)
            let status = try await replicate(p[0], to: p[1], type: .push)
            #expect(status.error == nil)
            let copy = try #require(try await b.document(id: "text")?.blob(forKey: "file"))
            #expect(try await p[1].db.getBlob(properties: copy.properties)?.content == text)
        }
    }
}

/// A raw BLIP client on a peer's listener, playing the other side of the protocol by hand.
struct RawClient {
    let blip: BLIPConnection
    let revs: AsyncStream<BLIPRequest>

    static func connect(to peer: Peer, attachments: [String: [UInt8]] = [:]) async throws -> RawClient {
        let conn = try await peer.connector()(ReplicatorConfiguration(target: peer.endpoint))
        let blip = try BLIPConnection(connection: conn)
        let (revs, continuation) = AsyncStream<BLIPRequest>.makeStream()
        await blip.setHandler(profile: "changes") { request in
            let entries = (try? JSONValue(parsing: request.body))?.arrayValue ?? []
            return BLIPMessage(type: .response, body: JSONValue.array(entries.map { _ in .array([]) }).canonicalData)
        }
        await blip.setHandler(profile: "rev") { request in
            continuation.yield(request)
            return nil
        }
        // Serves (possibly wrong) attachment content by digest, streamed.
        await blip.setStreamingHandler(profile: "getAttachment") { request in
            guard let content = attachments[request.properties["digest"] ?? ""] else {
                return .message(.error(domain: "HTTP", code: 404, message: "no"))
            }
            return .streamed(BLIPMessage(type: .response), body: BLIPBodySource(bytes: content, chunkSize: 10_000))
        }
        await blip.start()
        let reply = try await blip.sendRequest(.request("getCollections", body: JSONValue.object([
            "checkpoint_ids": .array(["raw"]), "collections": .array(["_default"]),
        ]).canonicalData))
        #expect(!reply.isError)
        return RawClient(blip: blip, revs: revs)
    }

    func request(_ profile: String, _ props: BLIPProperties = [:], body: [UInt8] = []) async throws -> BLIPMessage {
        var all: BLIPProperties = [("collection", "0")]
        for (k, v) in props { all[k] = v }
        return try await blip.sendRequest(.request(profile, properties: all, body: body))
    }
}

@Suite struct AttachmentProtocolTests {
    @Test func proveAndGetAttachmentOnlyForSentRevisions() async throws {
        try await withPeers(1) { p in
            try p[0].listen()
            let collection = try p[0].defaultCollection
            let content = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
            let blob = Blob(contentType: "text/plain", data: content)
            var doc = MutableDocument(id: "doc")
            doc.setBlob(blob, forKey: "file")
            try await collection.save(document: &doc)
            // Stored, but referenced by no document.
            let loose = try await p[0].db.openBlobWriter()
            try await loose.write(Data("loose content".utf8))
            let looseBlob = try await loose.finish()

            let client = try await RawClient.connect(to: p[0])
            let nonce = (0..<32).map { UInt8($0 * 7 + 1) }
            // Before any rev was sent, nothing is served.
            let early = try await client.request("proveAttachment", [("digest", blob.digest)], body: nonce)
            #expect(early.errorDomain == "HTTP" && early.errorCode == 403)

            _ = try await client.request("subChanges")
            var iterator = client.revs.makeAsyncIterator()
            let rev = try #require(await iterator.next())
            #expect(rev.properties["id"] == "doc")

            // The proof, computed here independently of the handler.
            var hasher = SHA1()
            hasher.update([UInt8(nonce.count)] + nonce + Array(content))
            let expected = "sha1-" + Data(hasher.finalize()).base64EncodedString()
            let proof = try await client.request("proveAttachment", [("digest", blob.digest)], body: nonce)
            #expect(!proof.isError)
            #expect(proof.bodyString == expected)
            let longNonce = [UInt8](repeating: 9, count: 255)
            var longHasher = SHA1()
            longHasher.update([255] + longNonce + Array(content))
            let longProof = try await client.request("proveAttachment", [("digest", blob.digest)], body: longNonce)
            #expect(longProof.bodyString == "sha1-" + Data(longHasher.finalize()).base64EncodedString())

            for bad in [0, 15, 256] {
                let reply = try await client.request("proveAttachment", [("digest", blob.digest)],
                                                     body: [UInt8](repeating: 1, count: bad))
                #expect(reply.errorDomain == "BLIP" && reply.errorCode == 400, "nonce of \(bad) bytes")
            }
            let unsent = try await client.request("proveAttachment", [("digest", looseBlob.digest)], body: nonce)
            #expect(unsent.errorDomain == "HTTP" && unsent.errorCode == 403)

            // getAttachment: the same rule; content streamed, compressed on request.
            for compress in [false, true] {
                var props: BLIPProperties = [("digest", blob.digest)]
                if compress { props["compress"] = "true" }
                let reply = try await client.request("getAttachment", props)
                #expect(!reply.isError && reply.body == Array(content))
                #expect(reply.flags.contains(.compressed) == compress)
            }
            let refused = try await client.request("getAttachment", [("digest", looseBlob.digest)])
            #expect(refused.errorDomain == "HTTP" && refused.errorCode == 403)
            let malformed = try await client.request("getAttachment", [("digest", "md5-xyz")])
            #expect(malformed.errorDomain == "BLIP" && malformed.errorCode == 400)
            await client.blip.close()
        }
    }

    @Test func attachmentWithWrongContentFailsTheRevWith422AndStoresNothing() async throws {
        try await withPeers(1) { p in
            try p[0].listen()
            let good = [UInt8](repeating: 5, count: 300_000)
            let digest = "sha1-" + Data(SHA1.hash(good)).base64EncodedString()
            var wrong = good
            wrong[150_000] = 6
            let client = try await RawClient.connect(to: p[0], attachments: [digest: wrong])
            let body: JSONValue = .object(["file": .object(["@type": "blob", "digest": .string(digest),
                                                             "length": .int(Int64(good.count))])])
            let reply = try await client.request("rev", [("id", "pushed"), ("rev", "1-abcd")], body: body.canonicalData)
            #expect(reply.errorDomain == "HTTP" && reply.errorCode == 422)
            #expect(try await p[0].defaultCollection.document(id: "pushed") == nil)
            let ref: [String: JSONValue] = ["@type": "blob", "digest": .string(digest), "length": .int(Int64(good.count))]
            #expect(try await p[0].db.getBlob(properties: ref) == nil)
            // No partial file left behind in the blob store's temporary directory.
            let tmp = URL(fileURLWithPath: p[0].directory).appendingPathComponent("p0.peersync/blobs/tmp").path
            let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: tmp)) ?? []
            #expect(leftovers.isEmpty)

            // The right content is accepted.
            let fixed = try await RawClient.connect(to: p[0], attachments: [digest: good])
            let ok = try await fixed.request("rev", [("id", "pushed"), ("rev", "1-abcd")], body: body.canonicalData)
            #expect(!ok.isError)
            #expect(try await p[0].db.getBlob(properties: ref) != nil)
            await client.blip.close()
            await fixed.blip.close()
        }
    }
}
