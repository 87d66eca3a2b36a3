import PeerSyncBLE
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import Testing

/// L2CAPByteStream over a bare `AF_UNIX` seqpacket pair: what it puts in each packet, how it
/// reads them back, and how it ends.
@Suite struct L2CAPByteStreamTests {
    /// A stream on one end of a fresh pair (245-byte packets, 247-byte receive MTU), and the raw other end.
    static func streamAndPeer(fragmentSize: Int = 245, receiveMTU: Int = 247) throws -> (L2CAPByteStream, SeqPacketSocket) {
        let (near, far) = try SeqPacketSocket.pair()
        return (try L2CAPByteStream(socket: near, fragmentSize: fragmentSize, receiveMTU: receiveMTU, remoteAddress: "peer"), far)
    }

    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

    @Test func defaultFragmentSizeLeavesRoomForTheSDULength() async throws {
        #expect(L2CAPByteStream.defaultFragmentSize(forMTU: 247) == 245)
        #expect(L2CAPByteStream.defaultFragmentSize(forMTU: 2) == 1)
        let (socket, other) = try SeqPacketSocket.pair()
        defer { other.close() }
        let channel = L2CAPChannel(socket: socket, sendMTU: 247, receiveMTU: 300, remoteAddress: "AA:BB", psm: 0x80)
        let stream = try L2CAPByteStream(channel: channel)
        #expect(stream.fragmentSize == 245)
        #expect(stream.receiveMTU == 300)
        #expect(stream.remoteAddress == "AA:BB")
        // A requested size above the send MTU is capped to it.
        let capped = try L2CAPByteStream(channel: channel, fragmentSize: 1000)
        #expect(capped.fragmentSize == 247)
        await stream.close()
    }

    @Test func writesAreCutIntoPacketsOfTheFragmentSize() async throws {
        let (stream, peer) = try Self.streamAndPeer()
        defer { peer.close() }
        let data = Self.pattern(1000)
        try await stream.write(data)
        var sizes: [Int] = []
        var received: [UInt8] = []
        while received.count < data.count, let packet = try await peer.receive(maxBytes: 4096) {
            sizes.append(packet.count)
            received += packet
        }
        #expect(sizes == [245, 245, 245, 245, 20])
        #expect(received == data)
        await stream.close()
    }

    @Test func readsReturnPacketsAndKeepTheRestOfALongerOne() async throws {
        let (stream, peer) = try Self.streamAndPeer()
        defer { peer.close() }
        let first = Self.pattern(200), second = [UInt8](repeating: 9, count: 30)
        try await peer.send(first)
        try await peer.send(second)
        // A read smaller than the packet returns its start; the next reads its rest before the next packet.
        #expect(try await stream.read(maxBytes: 150) == Array(first[..<150]))
        #expect(try await stream.read(maxBytes: 4096) == Array(first[150...]))
        #expect(try await stream.read(maxBytes: 4096) == second)
        peer.shutdownOutput()
        #expect(try await stream.read(maxBytes: 4096) == nil)
        await stream.close()
    }

    @Test func aPacketOverTheReceiveMTUIsAProtocolError() async throws {
        let (stream, peer) = try Self.streamAndPeer(receiveMTU: 100)
        defer { peer.close() }
        try await peer.send(Self.pattern(100))
        #expect(try await stream.read(maxBytes: 4096)?.count == 100)
        try await peer.send(Self.pattern(101))
        await #expect { try await stream.read(maxBytes: 4096) } throws: { ($0 as? PeerSyncError)?.code == .protocolError }
        await stream.close()
    }

    @Test func shutdownOutputEndsThePeersReadsAfterTheData() async throws {
        let (stream, peer) = try Self.streamAndPeer()
        defer { peer.close() }
        try await stream.write([1, 2, 3])
        await stream.shutdownOutput()
        #expect(try await peer.receive(maxBytes: 100) == [1, 2, 3])
        #expect(try await peer.receive(maxBytes: 100) == nil)
        // The other direction still works (AF_UNIX keeps the half-close).
        try await peer.send([4])
        #expect(try await stream.read(maxBytes: 10) == [4])
        await stream.close()
    }

    @Test func closeEndsAPendingReadAndLaterWrites() async throws {
        let (stream, peer) = try Self.streamAndPeer()
        defer { peer.close() }
        let pending = Task { try await stream.read(maxBytes: 100) }
        await stream.close()
        await #expect { try await pending.value } throws: { ($0 as? PeerSyncError)?.code == .closed }
        await #expect { try await stream.write([1]) } throws: { ($0 as? PeerSyncError)?.code == .closed }
        // The peer sees the end.
        #expect(try await peer.receive(maxBytes: 10) == nil)
    }

    /// A write far larger than the socket buffers completes only as the peer reads, and every
    /// byte arrives in order: the stream waits for room instead of failing or dropping.
    @Test func aLargeWriteWaitsForTheReader() async throws {
        let (stream, peer) = try Self.streamAndPeer()
        let data = Self.pattern(4 << 20)
        let writer = Task { try await stream.write(data) }
        var received: [UInt8] = []
        received.reserveCapacity(data.count)
        while received.count < data.count, let packet = try await peer.receive(maxBytes: 4096) {
            #expect(packet.count <= 245)
            received += packet
        }
        try await writer.value
        #expect(received == data)
        await stream.close()
        peer.close()
    }

    @Test func invalidSizesAreRefused() throws {
        let (socket, other) = try SeqPacketSocket.pair()
        defer { socket.close(); other.close() }
        #expect(throws: PeerSyncError.self) { try L2CAPByteStream(socket: socket, fragmentSize: 0, receiveMTU: 10) }
        #expect(throws: PeerSyncError.self) { try L2CAPByteStream(socket: socket, fragmentSize: 10, receiveMTU: 0) }
    }
}
