import PeerSyncCore
import PeerSyncPosix
@testable import PeerSyncBLE
import Testing

/// The GATT server and client over `SeqPacketSocket.pair()` — the ATT bearer's stand-in.
@Suite("GATT over a seqpacket pair")
struct GATTTests {
    let service = BLEServiceUUID.forPeerGroup("com.myapp")

    func bytes(_ count: Int, seed: UInt8 = 0) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) } }

    /// A server on one end of a pair, serving in a task; the other end.
    func serve(_ server: GATTServer) throws -> SeqPacketSocket {
        let (client, far) = try SeqPacketSocket.pair()
        Task { await server.serve(far) }
        return client
    }

    /// One request on a raw socket and its answer.
    func exchange(_ socket: SeqPacketSocket, _ request: [UInt8]) async throws -> [UInt8]? {
        try await socket.send(request)
        return try await socket.receive(maxBytes: 600)
    }

    @Test("full exchange: MTU, service discovery, PSM, metadata")
    func fullExchange() async throws {
        let server = try GATTServer(serviceUUID: service, psm: 0x0081, metadata: bytes(40))
        let client = try await GATTClient.connect(over: try serve(server), serviceUUID: service, preferredMTU: 185)
        #expect(client.mtu == 185)
        #expect(try await client.readPSM() == 0x0081)
        #expect(try await client.readMetadata() == bytes(40))
        #expect(server.connectionCount == 1)
        client.close()
        await #expect(throws: PeerSyncError.self) { try await client.readPSM() }
    }

    @Test("metadata longer than the MTU is read whole with Read Blob, at the minimum MTU")
    func longMetadata() async throws {
        let value = bytes(PeerServiceAttributes.maxValueLength, seed: 3)
        let server = try GATTServer(serviceUUID: service, psm: 0x0080, metadata: value, maxMTU: 23)
        let client = try await GATTClient.connect(over: try serve(server), serviceUUID: service, preferredMTU: 247)
        #expect(client.mtu == 23)
        #expect(try await client.readMetadata() == value)
        // Exactly a multiple of MTU - 1: the last Read Blob returns an empty part.
        try await server.updateMetadata(bytes(22 * 3))
        #expect(try await client.readMetadata() == bytes(22 * 3))
        #expect(throws: PeerSyncError.self) { try GATTServer(serviceUUID: service, psm: 1, metadata: bytes(513)) }
    }

    @Test("updating the metadata notifies subscribed clients (long values read in full)")
    func notifyAfterUpdate() async throws {
        let server = try GATTServer(serviceUUID: service, psm: 0x0080, metadata: bytes(10), maxMTU: 23)
        let first = try await GATTClient.connect(over: try serve(server), serviceUUID: service)
        let second = try await GATTClient.connect(over: try serve(server), serviceUUID: service)
        var firstUpdates = try await first.metadataUpdates().makeAsyncIterator()
        var secondUpdates = try await second.metadataUpdates().makeAsyncIterator()
        try await server.updateMetadata(bytes(12, seed: 1))
        #expect(try await firstUpdates.next() == bytes(12, seed: 1))
        #expect(try await secondUpdates.next() == bytes(12, seed: 1))
        // Over MTU - 3 bytes: the notification is cut, the client reads the value.
        try await server.updateMetadata(bytes(300, seed: 2))
        #expect(try await firstUpdates.next() == bytes(300, seed: 2))
        first.close()
        #expect(try await firstUpdates.next() == nil)
        try await server.updateMetadata(bytes(5, seed: 4))
        // The second client did not read its 300-byte update: only the latest value is
        // buffered, so it sees that one (if it got there yet), then the 5-byte one.
        var latest = try await secondUpdates.next()
        if latest == bytes(300, seed: 2) { latest = try await secondUpdates.next() }
        #expect(latest == bytes(5, seed: 4))
        second.close()
    }

    @Test("malformed and unsupported requests get ATT error responses; the server keeps serving")
    func malformedRequests() async throws {
        let server = try GATTServer(serviceUUID: service, psm: 0x0080, metadata: bytes(4))
        let socket = try serve(server)
        func error(_ opcode: UInt8, _ handle: UInt16, _ code: ATTErrorCode) -> [UInt8] {
            ATTPDU.errorResponse(requestOpcode: opcode, handle: handle, error: code).encoded()
        }
        #expect(try await exchange(socket, [0x0A]) == error(0x0A, 0, .invalidPDU))                  // Read without a handle
        #expect(try await exchange(socket, [0x0A, 99, 0]) == error(0x0A, 99, .invalidHandle))
        #expect(try await exchange(socket, [0x0E, 1, 0, 3, 0]) == error(0x0E, 0, .requestNotSupported))  // Read Multiple
        #expect(try await exchange(socket, [0x12, 3, 0, 1, 0]) == error(0x12, 3, .writeNotPermitted))  // write the PSM
        #expect(try await exchange(socket, [0x12, 6, 0, 1]) == error(0x12, 6, .invalidAttributeValueLength))
        #expect(try await exchange(socket, [0x0C, 5, 0, 9, 0]) == error(0x0C, 5, .invalidOffset))    // Read Blob past the end
        #expect(try await exchange(socket, [0x04, 0, 0, 6, 0]) == error(0x04, 0, .invalidHandle))    // handle 0
        #expect(try await exchange(socket, [0x04, 7, 0, 0xFF, 0xFF]) == error(0x04, 7, .attributeNotFound))
        #expect(try await exchange(socket, [0x10, 1, 0, 0xFF, 0xFF, 0x03, 0x28]) == error(0x10, 1, .unsupportedGroupType))
        #expect(try await exchange(socket, [0x08, 1, 0, 0xFF, 0xFF, 0x03]) == error(0x08, 0, .invalidPDU)) // a 1-byte UUID
        // A command (bit 6) gets no answer, not even an error: the next answer is the next request's.
        try await socket.send([0x52, 1, 0, 9, 9])
        #expect(try await exchange(socket, [0x0A, 3, 0]) == [0x0B, 0x80, 0x00])
        // A PDU over the MTU (23 before any exchange) is refused.
        #expect(try await exchange(socket, [0x12, 6, 0] + [UInt8](repeating: 0, count: 30)) == error(0x12, 0, .invalidPDU))
        socket.close()
    }

    @Test("a server that answers garbage or out of turn: the client closes with protocolError")
    func malformedResponses() async throws {
        for answer: [UInt8] in [[0x03, 1], [0x0B, 1, 2], [0x01, 0x02, 0, 0]] {
            let (client, far) = try SeqPacketSocket.pair()
            let fake = Task {
                _ = try await far.receive(maxBytes: 100)
                try await far.send(answer)
                _ = try await far.receive(maxBytes: 100)  // until the client closes
            }
            let error = await #expect(throws: PeerSyncError.self) { try await GATTClient.connect(over: client, serviceUUID: service) }
            #expect(error?.code == .protocolError, "answer \(answer)")
            _ = try? await fake.value
            far.close()
        }
    }

    @Test("the server closing mid-exchange fails the call and ends the notifications")
    func peerClosesMidExchange() async throws {
        let (client, far) = try SeqPacketSocket.pair()
        let fake = Task {
            _ = try await far.receive(maxBytes: 100)  // the MTU request, never answered
            far.close()
        }
        let error = await #expect(throws: PeerSyncError.self) { try await GATTClient.connect(over: client, serviceUUID: service) }
        #expect(error?.code == .connectionClosed)
        try await fake.value

        let server = try GATTServer(serviceUUID: service, psm: 0x0080, metadata: bytes(4))
        let connected = try await GATTClient.connect(over: try serve(server), serviceUUID: service)
        let updates = try await connected.metadataUpdates()
        server.stop()
        let ended = await #expect(throws: PeerSyncError.self) { for try await _ in updates {} }
        #expect(ended?.code == .connectionClosed)
        let later = await #expect(throws: PeerSyncError.self) { try await connected.readPSM() }
        #expect(later?.code == .connectionClosed)
    }

    @Test("another group's service is not found; a silent server times out")
    func notFoundAndTimeout() async throws {
        let server = try GATTServer(serviceUUID: BLEServiceUUID.forPeerGroup("other"), psm: 0x0080, metadata: bytes(4))
        let missing = await #expect(throws: PeerSyncError.self) { try await GATTClient.connect(over: try serve(server), serviceUUID: service) }
        #expect(missing?.code == .notFound)

        let (client, far) = try SeqPacketSocket.pair()
        let silent = await #expect(throws: PeerSyncError.self) {
            try await GATTClient.connect(over: client, serviceUUID: service, transactionTimeout: .milliseconds(100))
        }
        #expect(silent?.code == .timeout)
        far.close()
    }
}
