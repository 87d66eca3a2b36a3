import PeerSyncCore
@testable import PeerSyncPosix
import Testing

@Suite("SOCK_SEQPACKET sockets", .timeLimit(.minutes(1)))
struct SeqPacketSocketTests {
    @Test("every send arrives as one message, in order, boundaries kept")
    func messageBoundaries() async throws {
        let (a, b) = try SeqPacketSocket.pair()
        defer { a.close(); b.close() }
        let sizes = [1, 247, 3, 1000, 64 * 1024]
        for (i, size) in sizes.enumerated() { try await a.send([UInt8](repeating: UInt8(i), count: size)) }
        for (i, size) in sizes.enumerated() {
            let packet = try #require(try await b.receive(maxBytes: 128 * 1024))
            #expect(packet == [UInt8](repeating: UInt8(i), count: size))
        }
    }

    @Test("a full socket buffer suspends the sender until the receiver reads (back-pressure)")
    func backPressure() async throws {
        let (a, b) = try SeqPacketSocket.pair()
        defer { a.close(); b.close() }
        let packet = [UInt8](repeating: 7, count: 4096)
        let count = 2_000  // 8 MB: far more than a Unix socket buffers
        let sender = Task { for _ in 0..<count { try await a.send(packet) } }
        var received = 0
        while received < count {
            let got = try #require(try await b.receive(maxBytes: 8192))
            #expect(got.count == packet.count)
            received += 1
        }
        try await sender.value
    }

    @Test("the peer's shutdown or close reads as the end; an empty message is refused")
    func endAndEmpty() async throws {
        let (a, b) = try SeqPacketSocket.pair()
        defer { b.close() }
        await #expect(throws: PeerSyncError.self) { try await a.send([]) }
        try await a.send([1, 2])
        a.shutdownOutput()
        #expect(try await b.receive(maxBytes: 10) == [1, 2])
        #expect(try await b.receive(maxBytes: 10) == nil)
        a.close()
        let (c, d) = try SeqPacketSocket.pair()
        d.close()
        #expect(try await c.receive(maxBytes: 10) == nil)
        c.close()
        await #expect(throws: PeerSyncError.self) { try await c.send([1]) }
    }
}
