import PeerSyncCore
@testable import PeerSyncBLE
import PeerSyncDiscovery
import Testing

@Suite("ATT PDUs and the TXT wire form")
struct ATTPDUTests {
    static let uuid = BLEServiceUUID.psmCharacteristic

    @Test("every PDU re-decodes to itself", arguments: [
        ATTPDU.errorResponse(requestOpcode: 0x0A, handle: 0x1234, error: .invalidHandle),
        .exchangeMTURequest(clientRxMTU: 247), .exchangeMTUResponse(serverRxMTU: 23),
        .findInformationRequest(startHandle: 1, endHandle: 0xFFFF),
        .findInformationResponse([.init(handle: 6, uuid: .clientCharacteristicConfiguration), .init(handle: 7, uuid: .uuid16(0x2901))]),
        .findInformationResponse([.init(handle: 3, uuid: .uuid128(uuid))]),
        .readByTypeRequest(startHandle: 1, endHandle: 6, type: .characteristic),
        .readByTypeRequest(startHandle: 1, endHandle: 6, type: .uuid128(uuid)),
        .readByTypeResponse([.init(handle: 2, value: [1, 2, 3]), .init(handle: 4, value: [4, 5, 6])]),
        .readRequest(handle: 3), .readResponse(value: []), .readResponse(value: [1, 2]),
        .readBlobRequest(handle: 5, offset: 22), .readBlobResponse(partValue: [9]),
        .readByGroupTypeRequest(startHandle: 1, endHandle: 0xFFFF, groupType: .primaryService),
        .readByGroupTypeResponse([.init(handle: 1, endGroupHandle: 6, value: uuid.littleEndianBytes)]),
        .writeRequest(handle: 6, value: [1, 0]), .writeResponse,
        .handleValueNotification(handle: 5, value: [7, 7]),
        .unsupported(opcode: 0x52, parameters: [1, 2]),
    ])
    func roundTrip(_ pdu: ATTPDU) throws {
        #expect(try ATTPDU.decode(pdu.encoded()) == pdu)
    }

    @Test("malformed PDUs are protocolError", arguments: [
        [], [0x01, 0x0A], [0x02], [0x03, 1, 2, 3], [0x04, 1, 0, 2], [0x05, 3, 1, 0, 0, 0x28], [0x05, 1, 1, 0, 0],
        [0x08, 1, 0, 2, 0, 3], [0x09, 1, 0, 0], [0x09, 3, 1, 0, 5, 1], [0x11, 3, 1, 0, 2, 0], [0x0A, 1], [0x0C, 1, 0, 2],
        [0x12, 1], [0x13, 0], [0x1B],
    ] as [[UInt8]])
    func malformed(_ bytes: [UInt8]) {
        let error = #expect(throws: PeerSyncError.self) { try ATTPDU.decode(bytes) }
        #expect(error?.code == .protocolError)
    }

    @Test("16-bit UUIDs equal their 128-bit form")
    func shortUUIDs() throws {
        let long = try #require(BLEUUID("00002902-0000-1000-8000-00805F9B34FB"))
        #expect(ATTUUID.uuid128(long) == .clientCharacteristicConfiguration)
        #expect(ATTUUID(littleEndian: [0x02, 0x29]) == .clientCharacteristicConfiguration)
        #expect(ATTUUID(littleEndian: [1, 2, 3]) == nil)
    }

    @Test("the metadata characteristic holds the DNS-SD TXT record in wire form")
    func txtWireForm() throws {
        let announcement = try PeerAnnouncement(peerID: PeerID("peer-1"), group: PeerGroupID("g"), port: 0x81,
                                                metadata: PeerMetadata(["color": "blue"]), protocolVersion: 3)
        let wire = TXTRecord.wireFormat(TXTRecord.entries(for: announcement))
        #expect(Array(wire.prefix(10)) == [9] + Array("txtvers=1".utf8))
        let decoded = try #require(TXTRecord.decode(try TXTRecord.entries(fromWireFormat: wire)))
        #expect(decoded == TXTRecord.Contents(peerID: announcement.peerID, protocolVersion: 3, metadata: announcement.metadata))
        #expect(TXTRecord.wireFormat([]) == [0])
        #expect(try TXTRecord.entries(fromWireFormat: [0]) == [[]])
        let cut = #expect(throws: PeerSyncError.self) { try TXTRecord.entries(fromWireFormat: [5, 1, 2]) }
        #expect(cut?.code == .protocolError)
    }
}
