import PeerSyncCore
import PeerSyncTestSupport
import PeerSyncTransport
@testable import PeerSyncWebSocket
import PeerSyncWebSocketTestSupport
import Testing

/// Issue 9 §4: unfinished incoming messages of all connections of a server share one memory
/// budget; the connection that would exceed it is closed with 1009 and its buffer freed.
@Suite("Partial-message memory budget", .timeLimit(.minutes(2)))
struct PartialMessageBudgetTests {
    static let mib = 1 << 20

    @Test("a budget grants growth up to its limit and refuses beyond; shares give back what they hold")
    func budgetArithmetic() {
        let budget = PartialMessageBudget(limit: 100)
        var a = PartialMessageShare(budget: budget)
        var b = PartialMessageShare(budget: budget)
        let grantedA = a.resize(to: 60)
        let grantedB = b.resize(to: 40)
        #expect(grantedA && grantedB)
        #expect(budget.bufferedBytes == 100)
        let beyond = b.resize(to: 41)
        #expect(!beyond)
        #expect(b.held == 40 && budget.bufferedBytes == 100)
        let shrunk = a.resize(to: 10)
        #expect(shrunk)
        #expect(budget.bufferedBytes == 50)
        a.release()
        b.release()
        #expect(budget.bufferedBytes == 0)
        var unlimited = PartialMessageShare(budget: nil)
        let anything = unlimited.resize(to: Int.max / 2)
        #expect(anything)
    }

    @Test("the decoder reports its partial message and frees it on stop()")
    func decoderPartialCount() throws {
        var decoder = WebSocketFrameDecoder(role: .server, maxMessageSize: 1 << 20)
        let frame = clientFrame(0x2, [UInt8](repeating: 7, count: 1000))
        var events: [WebSocketFrameDecoder.Event] = []
        try frame.withUnsafeBytes { try decoder.decode(UnsafeRawBufferPointer(rebasing: $0[0..<600]), into: &events) }
        #expect(decoder.partialMessageByteCount == 600 - 8)
        let fragment = clientFrame(0x1, Array("abc".utf8), fin: false)
        var other = WebSocketFrameDecoder(role: .server, maxMessageSize: 1 << 20)
        try fragment.withUnsafeBytes { try other.decode($0, into: &events) }
        #expect(other.partialMessageByteCount == 3)
        #expect(events.isEmpty)
        decoder.stop()
        #expect(decoder.partialMessageByteCount == 0 && decoder.isFinished)
    }

    @Test("connections holding unfinished messages stay under the server's budget; the one exceeding it gets 1009, the others finish")
    func sharedBudgetClosesTheGrowingConnection() async throws {
        let limit = 4 * Self.mib
        let server = try await startEchoServer(configure: { $0.maxPartialMessageBytes = limit })
        defer { Task { await server.stop() } }
        let budget = try #require(server.partialMessageBudget)
        #expect(budget.limit == limit)

        // A and B: 1.5 MiB of a 2 MiB binary frame each, then they pause (3 MiB held).
        let payload = (0..<(2 * Self.mib)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let frame = clientFrame(0x2, payload)
        let split = 10 + 4 + 3 * Self.mib / 2  // header (127-length form, masked) + 1.5 MiB
        var early: [(RawClient, [UInt8])] = []
        for expected in [3 * Self.mib / 2, 3 * Self.mib] {
            let client = try await RawClient.connect(port: server.port)
            let (response, rest) = try await client.upgrade()
            #expect(response.status == 101)
            try await client.send(Array(frame[..<split]))
            try await waitUntil("the server buffered \(expected) bytes (now \(budget.bufferedBytes))") {
                budget.bufferedBytes == expected
            }
            early.append((client, rest))
        }

        // C, the newest: a fragmented message, 1 MiB per fragment. The first fits exactly
        // (4 MiB in all); the second would exceed the budget: C is closed with 1009.
        let newest = try await RawClient.connect(port: server.port)
        let (response, rest) = try await newest.upgrade()
        #expect(response.status == 101)
        let piece = [UInt8](repeating: 0x41, count: Self.mib)
        try await newest.send(clientFrame(0x2, piece, fin: false))
        try await waitUntil("C's first fragment is buffered (now \(budget.bufferedBytes))") { budget.bufferedBytes == limit }
        // The server may close C while this write is in flight: its failure is expected.
        try? await newest.send(clientFrame(0x0, piece, fin: false))
        let (events, _) = try await newest.readUntilClose(initial: rest, timeout: 60)
        guard case .close(let code, let reason)? = events.last else {
            Issue.record("C got no close frame: \(events)")
            return
        }
        #expect(code == 1009)
        #expect(reason.contains("message too big") && reason.contains("\(limit)"), "reason: \(reason)")
        await newest.close()
        // C's buffer was given back; A's and B's are still held.
        try await waitUntil("C's share is released (now \(budget.bufferedBytes))") { budget.bufferedBytes == 3 * Self.mib }

        // A and B finish their messages and get them echoed intact.
        for (client, rest) in early {
            try await client.send(Array(frame[split...]))
            let echoed = try await readBinaryMessage(client, initial: rest)
            #expect(echoed == payload)
        }
        #expect(budget.bufferedBytes == 0)
        for (client, _) in early { await client.close() }
        #expect(budget.bufferedBytes == 0)
    }

    @Test("a connection dropped mid-message gives its share back")
    func droppedConnectionReleasesItsShare() async throws {
        let server = try await startEchoServer(configure: { $0.maxPartialMessageBytes = 4 * Self.mib })
        defer { Task { await server.stop() } }
        let budget = try #require(server.partialMessageBudget)
        let client = try await RawClient.connect(port: server.port)
        _ = try await client.upgrade()
        let frame = clientFrame(0x2, [UInt8](repeating: 1, count: Self.mib))
        try await client.send(Array(frame[..<(Self.mib / 2)]))
        try await waitUntil("the partial frame is buffered") { budget.bufferedBytes > 0 }
        await client.close()
        try await waitUntil("the share is released after the drop (now \(budget.bufferedBytes))") { budget.bufferedBytes == 0 }
    }
}

/// Polls `condition` every 10 ms for up to `seconds` (generous: only bounds a failure).
func waitUntil(_ what: @autoclosure () -> String, seconds: Double = 60,
               _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while !condition() {
        if ContinuousClock.now > deadline {
            Issue.record("timed out waiting: \(what())")
            throw PeerSyncError(.timeout, "timed out waiting: \(what())")
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Reads frames (as a client) until one whole binary message arrives.
func readBinaryMessage(_ client: RawClient, initial: [UInt8] = [], timeout: Double = 60) async throws -> [UInt8] {
    let stream = client.stream
    return try await withTimeout(timeout, "reading a binary message") {
        var decoder = WebSocketFrameDecoder(role: .client, maxMessageSize: 1 << 26)
        decoder.feed(initial)
        while true {
            while let event = try decoder.next() {
                if case .binary(let bytes) = event { return bytes }
            }
            guard let bytes = try await stream.read(maxBytes: 1 << 16) else {
                throw PeerSyncError(.connectionClosed, "closed before a binary message")
            }
            decoder.feed(bytes)
        }
    }
}
