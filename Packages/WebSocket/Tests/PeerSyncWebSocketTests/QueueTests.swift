import PeerSyncCore
import PeerSyncTransport
@testable import PeerSyncWebSocket
import Testing

@Suite("Connection queues")
struct QueueTests {
    @Test("inbound queue: a message that does not fit suspends the sender once (no spinning) until room is made")
    func inboundBackpressure() async throws {
        let queue = InboundQueue(maxCount: 10, maxBytes: 3000)
        let big = TransportMessage.binary([UInt8](repeating: 1, count: 1000))
        let sender = Task { await queue.send([big, big, .text("x"), big, big]) }
        // 1000 + 1000 + 1 fit; the fourth (1000 bytes) would exceed 3000.
        try await Task.sleep(for: .milliseconds(300))
        #expect(queue.bufferedCount == 3)
        #expect(queue.senderWaitCount == 1)
        #expect(try await queue.receive() == big)
        try await Task.sleep(for: .milliseconds(100))
        // Room for one more 1000-byte message only.
        #expect(queue.bufferedCount == 3)
        #expect(queue.senderWaitCount == 2)
        for expected in [big, .text("x"), big, big] {
            #expect(try await queue.receive() == expected)
        }
        await sender.value
        queue.finish()
        #expect(try await queue.receive() == nil)
    }

    @Test("inbound queue: one message larger than the byte limit passes alone; finish with an error after the buffered ones")
    func inboundOversizeAndErrors() async throws {
        let queue = InboundQueue(maxCount: 4, maxBytes: 10)
        await queue.send([.binary([UInt8](repeating: 0, count: 100))])
        #expect(queue.bufferedCount == 1)
        queue.finish(throwing: PeerSyncError(.connectionReset, "gone"))
        #expect(try await queue.receive()?.byteCount == 100)
        await #expect(throws: PeerSyncError.self) { _ = try await queue.receive() }
        await #expect(throws: PeerSyncError.self) { _ = try await queue.receive() }
    }

    @Test("inbound queue: a cancelled receive throws and takes nothing")
    func inboundCancel() async throws {
        let queue = InboundQueue(maxCount: 4, maxBytes: 100)
        let waiting = Task { try await queue.receive() }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        await #expect(throws: PeerSyncError.self) { _ = try await waiting.value }
        await queue.send([.text("kept")])
        #expect(try await queue.receive() == .text("kept"))
    }

    @Test("outbound queue: control frames jump ahead of data, close goes after data, senders past the limit wait")
    func outboundOrder() async throws {
        let queue = OutboundQueue(limit: 10)
        try await queue.send([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])  // 11 bytes: admitted into an empty queue
        let blocked = Task { try await queue.send([2]) }
        try await Task.sleep(for: .milliseconds(50))
        #expect(queue.sendControl([9]))
        #expect(queue.sendClose([8], urgent: false))
        #expect(!queue.sendControl([9]))  // nothing after close
        await #expect(throws: PeerSyncError.self) { try await blocked.value }  // was not admitted before the close
        let batch = try #require(await queue.nextBatch())
        #expect(batch.frames == [[9], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [8]])
        #expect(batch.containsClose)
        #expect(await queue.nextBatch() == nil)
    }
}
