import Synchronization
import Testing
@testable import PeerSyncBLIP
import PeerSyncCore

/// Deterministic bytes produced lazily in chunks: a random 64 KiB block (seeded) whose first
/// eight bytes are replaced by the chunk index, so every chunk differs and a lost, repeated or
/// reordered chunk changes the SHA-1.
struct GeneratedBytes: AsyncSequence, Sendable {
    typealias Element = [UInt8]
    let total: Int
    let seed: UInt64
    /// Text-like content (compresses well) instead of random bytes.
    var compressible = false
    var failAfter: Int?

    static let chunkSize = 65_536

    func block() -> [UInt8] {
        var rng = SplitMix64(seed: seed)
        if compressible {
            let words = Array("the quick brown fox jumps over the lazy dog and replicates a blob ".utf8)
            return (0..<Self.chunkSize).map { i in words[(i + Int(rng.next() % 3)) % words.count] }
        }
        return (0..<Self.chunkSize).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
    }

    func makeAsyncIterator() -> Iterator { Iterator(source: self, block: block()) }

    struct Iterator: AsyncIteratorProtocol {
        let source: GeneratedBytes
        let block: [UInt8]
        var produced = 0
        var index: UInt64 = 0

        mutating func next() async throws -> [UInt8]? {
            if let limit = source.failAfter, produced >= limit {
                throw PeerSyncError(.io, blip: .http(404, "disk read failed"))
            }
            guard produced < source.total else { return nil }
            var chunk = Array(block.prefix(source.total - produced))
            for i in 0..<Swift.min(8, chunk.count) { chunk[i] = UInt8(truncatingIfNeeded: index >> (8 * UInt64(i))) }
            produced += chunk.count
            index += 1
            return chunk
        }
    }

    /// SHA-1 of the whole content, computed chunk by chunk.
    func sha1() async throws -> [UInt8] {
        var hasher = SHA1()
        for try await chunk in self { hasher.update(chunk) }
        return hasher.finalize()
    }
}

/// `first`, then (once `gate` ends) `rest`.
struct GatedBytes: AsyncSequence, Sendable {
    typealias Element = [UInt8]
    let first: GeneratedBytes
    let gate: AsyncStream<Void>
    let rest: GeneratedBytes

    func makeAsyncIterator() -> Iterator {
        Iterator(first: first.makeAsyncIterator(), gate: gate, rest: rest.makeAsyncIterator())
    }

    struct Iterator: AsyncIteratorProtocol {
        var first: GeneratedBytes.Iterator
        let gate: AsyncStream<Void>
        var rest: GeneratedBytes.Iterator
        var waited = false

        mutating func next() async throws -> [UInt8]? {
            if let chunk = try await first.next() { return chunk }
            if !waited {
                for await _ in gate {}
                waited = true
            }
            return try await rest.next()
        }
    }
}

/// A channel that counts the bytes it sends.
final class CountingChannel: BLIPFrameChannel, Sendable {
    let inner: MemoryChannel
    let sentBytes = Mutex<Int>(0)
    init(_ inner: MemoryChannel) { self.inner = inner }
    func sendFrame(_ frame: [UInt8]) async throws {
        sentBytes.withLock { $0 += frame.count }
        try await inner.sendFrame(frame)
    }
    func receiveFrame() async throws -> [UInt8]? { try await inner.receiveFrame() }
    func close(code: Int, reason: String) async { await inner.close(code: code, reason: reason) }
}

@Suite struct StreamingTests {
    static let mebibyte = 1024 * 1024

    func pair(tuning: BLIPTuning = BLIPTuning()) throws -> (BLIPConnection, BLIPConnection, CountingChannel, CountingChannel) {
        let (a, b) = MemoryChannel.pair()
        let ca = CountingChannel(a), cb = CountingChannel(b)
        return (try BLIPConnection(channel: ca, tuning: tuning), try BLIPConnection(channel: cb, tuning: tuning), ca, cb)
    }

    @Test func fiftyMebibytesStreamedBothWays() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: 50 * Self.mebibyte, seed: 7)
        let expected = try await content.sha1()
        // Request direction: a streamed request body, assembled by the receiving handler.
        await server.setHandler(profile: "upload") { request in
            BLIPMessage(type: .response, body: SHA1.hash(request.body))
        }
        // Response direction: a streamed reply, consumed chunk by chunk.
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response, properties: ["length": String(content.total)]),
                      body: BLIPBodySource(content))
        }
        await server.setHandler(profile: "ping") { _ in BLIPMessage(type: .response, body: [1]) }
        await client.start()
        await server.start()

        let upload = try await client.sendRequest(.request("upload"), body: BLIPBodySource(content))
        #expect(upload.body == expected)
        let clientOut = await client.streamStatistics
        #expect(clientOut.peakBufferedOutboundBytes <= 64 * 1024 + GeneratedBytes.chunkSize + 64)

        let response = try await client.sendRequestStreamingResponse(.request("download"))
        #expect(!response.isError && response.properties["length"] == String(content.total))
        var hasher = SHA1()
        var count = 0
        var pings = 0
        for try await chunk in response.body {
            hasher.update(chunk)
            count += chunk.count
            // Other traffic keeps flowing while the stream is being read.
            if count % (10 * Self.mebibyte) < chunk.count {
                #expect(try await client.sendRequest(.request("ping")).body == [1])
                pings += 1
            }
        }
        #expect(count == content.total)
        #expect(hasher.finalize() == expected)
        #expect(pings >= 4)
        let clientIn = await client.streamStatistics
        let serverOut = await server.streamStatistics
        #expect(clientIn.bufferedInboundBytes == 0)
        #expect(clientIn.peakBufferedInboundBytes <= 256 * 1024)
        #expect(serverOut.peakBufferedOutboundBytes <= 64 * 1024 + GeneratedBytes.chunkSize + 64)
        #expect(serverOut.bufferedOutboundBytes == 0)
        await client.close()
    }

    @Test func slowConsumerStallsTheSender() async throws {
        let (client, server, _, serverChannel) = try pair()
        let content = GeneratedBytes(total: 8 * Self.mebibyte, seed: 11)
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response), body: BLIPBodySource(content))
        }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("download"))
        var iterator = response.body.makeAsyncIterator()
        var received = try await iterator.next()?.count ?? 0
        // Not reading: the sender must stop after its unACKed window, not push the whole body.
        try await Task.sleep(for: .milliseconds(300))
        let sentWhileStalled = serverChannel.sentBytes.withLock { $0 }
        #expect(sentWhileStalled < 512 * 1024)
        let stalled = await client.streamStatistics
        #expect(stalled.bufferedInboundBytes <= BLIPTuning().maxUnackedBytes + BLIPTuning().maxFrameSize)
        var hasher = SHA1()
        while let chunk = try await iterator.next() {
            hasher.update(chunk)
            received += chunk.count
            if received % (Self.mebibyte) < chunk.count { try await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(received == content.total)
        let stats = await client.streamStatistics
        #expect(stats.peakBufferedInboundBytes <= BLIPTuning().maxUnackedBytes + BLIPTuning().maxFrameSize)
        #expect(stats.peakBufferedInboundBytes <= Self.mebibyte)
        await client.close()
    }

    @Test func compressedStreamInBothDirections() async throws {
        let (client, server, clientChannel, serverChannel) = try pair()
        let content = GeneratedBytes(total: 6 * Self.mebibyte, seed: 3, compressible: true)
        let expected = try await content.sha1()
        await server.setHandler(profile: "upload") { request in
            BLIPMessage(type: .response, body: SHA1.hash(request.body))
        }
        await server.setStreamingHandler(profile: "download") { request in
            let flags: BLIPFlags = request.properties.bool("compress") ? [.compressed] : []
            return .streamed(BLIPMessage(type: .response, flags: flags), body: BLIPBodySource(content))
        }
        await client.start()
        await server.start()
        let upload = try await client.sendRequest(.request("upload", flags: [.compressed]), body: BLIPBodySource(content))
        #expect(upload.body == expected)
        #expect(clientChannel.sentBytes.withLock { $0 } < content.total / 2)

        let response = try await client.sendRequestStreamingResponse(.request("download", properties: ["compress": "true"]))
        var hasher = SHA1()
        var count = 0
        for try await chunk in response.body { hasher.update(chunk); count += chunk.count }
        #expect(count == content.total)
        #expect(hasher.finalize() == expected)
        #expect(serverChannel.sentBytes.withLock { $0 } < content.total / 2)
        await client.close()
    }

    @Test func veryCompressibleStreamStaysBoundedWithASlowConsumer() async throws {
        var tuning = BLIPTuning()
        tuning.maxStreamBufferedBytes = 512 * 1024
        let (client, server, _, _) = try pair(tuning: tuning)
        let zeros = [UInt8](repeating: 0, count: 20 * Self.mebibyte)
        await server.setStreamingHandler(profile: "zeros") { _ in
            .streamed(BLIPMessage(type: .response, flags: [.compressed]), body: BLIPBodySource(bytes: zeros))
        }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("zeros"))
        var iterator = response.body.makeAsyncIterator()
        var count = try await iterator.next()?.count ?? 0
        try await Task.sleep(for: .milliseconds(300))
        while let chunk = try await iterator.next() {
            #expect(chunk.allSatisfy { $0 == 0 })
            count += chunk.count
        }
        #expect(count == zeros.count)
        let stats = await client.streamStatistics
        // Reading stops past the limit; one more frame (≤ 16 KiB inflated) may land.
        #expect(stats.peakBufferedInboundBytes <= tuning.maxStreamBufferedBytes + tuning.maxFrameSize)
        await client.close()
    }

    @Test func failingSourceMidStreamFailsTheConsumerWithATypedError() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: 8 * Self.mebibyte, seed: 5, failAfter: 2 * Self.mebibyte)
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response), body: BLIPBodySource(content))
        }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("download"))
        #expect(!response.isError)
        var count = 0
        var caught: PeerSyncError?
        do {
            for try await chunk in response.body { count += chunk.count }
        } catch {
            caught = error  // typed: PeerSyncError
        }
        #expect(caught != nil)
        #expect(caught?.code == .closed || caught?.code == .io)
        #expect(count >= 1 * Self.mebibyte && count <= 2 * Self.mebibyte)
        // The sender could not abort the message in BLIP, so it closed the connection.
        guard case .error(let error) = await server.waitUntilClosed() else {
            Issue.record("the sender should close with an error"); return
        }
        #expect(error.code == .io)
    }

    @Test func failingSourceBeforeTheFirstFrameBecomesAnErrorResponse() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: Self.mebibyte, seed: 5, failAfter: 0)
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response), body: BLIPBodySource(content))
        }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("download"))
        #expect(response.isError && response.errorDomain == "HTTP" && response.errorCode == 404)
        #expect(try await response.collected().bodyString == "disk read failed")
        // The whole-message API sees the same error response, and the connection lives on.
        let again = try await client.sendRequest(.request("download"))
        #expect(again.errorCode == 404)
        await client.close()
    }

    @Test func connectionLossFailsAnUnfinishedStream() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: 8 * Self.mebibyte, seed: 9)
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response), body: BLIPBodySource(content))
        }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("download"))
        var iterator = response.body.makeAsyncIterator()
        _ = try await iterator.next()
        await server.close()
        await #expect(throws: PeerSyncError.self) {
            while try await iterator.next() != nil {}
        }
    }

    @Test func cancelledConsumerGetsCancelledAndTheSenderFinishes() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: 4 * Self.mebibyte, seed: 17)
        let gate = AsyncStream<Void>.makeStream()
        await server.setStreamingHandler(profile: "download") { _ in
            // One chunk, then wait until the consumer was cancelled, then the rest.
            let first = GeneratedBytes(total: 100_000, seed: 17)
            return .streamed(BLIPMessage(type: .response), body: BLIPBodySource(GatedBytes(first: first, gate: gate.stream, rest: content)))
        }
        await server.setHandler(profile: "ping") { _ in BLIPMessage(type: .response, body: [3]) }
        await client.start()
        await server.start()
        let response = try await client.sendRequestStreamingResponse(.request("download"))
        let reader = Task { () -> PeerSyncError? in
            var iterator = response.body.makeAsyncIterator()
            do throws(PeerSyncError) {
                while try await iterator.next() != nil {}
                return nil
            } catch {
                // A later call keeps failing instead of waiting.
                do throws(PeerSyncError) { _ = try await iterator.next() } catch { #expect(error.code == .cancelled) }
                return error
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        reader.cancel()
        let error = await reader.value
        #expect(error?.code == .cancelled)
        gate.continuation.finish()
        for _ in 0..<200 {
            if await server.streamStatistics.bufferedOutboundBytes == 0 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await server.streamStatistics.bufferedOutboundBytes == 0)
        #expect(try await client.sendRequest(.request("ping")).body == [3])
        await client.close()
    }

    @Test func abandonedStreamIsDrainedAndTheConnectionGoesOn() async throws {
        let (client, server, _, _) = try pair()
        let content = GeneratedBytes(total: 4 * Self.mebibyte, seed: 13)
        await server.setStreamingHandler(profile: "download") { _ in
            .streamed(BLIPMessage(type: .response), body: BLIPBodySource(content))
        }
        await server.setHandler(profile: "ping") { _ in BLIPMessage(type: .response, body: [2]) }
        await client.start()
        await server.start()
        do {
            let response = try await client.sendRequestStreamingResponse(.request("download"))
            var iterator = response.body.makeAsyncIterator()
            _ = try await iterator.next()
        }
        // The sender finishes (its remaining bytes are ACKed and discarded) ...
        for _ in 0..<200 {
            if await server.streamStatistics.bufferedOutboundBytes == 0,
               await client.streamStatistics.bufferedInboundBytes == 0 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await client.streamStatistics.bufferedInboundBytes == 0)
        // ... and a second full download still works.
        let second = try await client.sendRequestStreamingResponse(.request("download"))
        let body = try await second.body.collect(maxBytes: 8 * Self.mebibyte)
        #expect(body.count == content.total)
        #expect(try await client.sendRequest(.request("ping")).body == [2])
        await client.close()
    }
}
