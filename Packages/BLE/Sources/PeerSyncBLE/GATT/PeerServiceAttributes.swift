import PeerSyncCore

/// The attribute table of a PeerSync peer's GATT server, and how it answers each ATT request —
/// pure, no I/O (``GATTServer`` runs it over a socket).
///
/// | Handle | Type | Value | Permissions |
/// |---|---|---|---|
/// | 1 | Primary Service (0x2800) | the peer group's service UUID | read |
/// | 2 | Characteristic (0x2803) | read, → 3, PSM UUID `ABDD3056-…` | read |
/// | 3 | PSM | the L2CAP PSM, 16-bit little-endian | read |
/// | 4 | Characteristic (0x2803) | read + notify, → 5, metadata UUID `936D7669-…` | read |
/// | 5 | metadata | the DNS-SD TXT record, wire form | read |
/// | 6 | Client Characteristic Configuration (0x2902) | 0x0001 while notifications are on | read, write |
struct PeerServiceAttributes: Sendable {
    static let serviceHandle: UInt16 = 1
    static let psmDeclarationHandle: UInt16 = 2
    static let psmValueHandle: UInt16 = 3
    static let metadataDeclarationHandle: UInt16 = 4
    static let metadataValueHandle: UInt16 = 5
    static let metadataConfigurationHandle: UInt16 = 6

    /// Characteristic properties (Core Spec Vol 3 Part G §3.3.1.1).
    static let propertyRead: UInt8 = 0x02
    static let propertyNotify: UInt8 = 0x10
    /// CCCD bit: notifications enabled.
    static let notificationsEnabled: UInt16 = 0x0001

    /// The longest attribute value ATT allows (Core Spec Vol 3 Part F §3.2.9).
    static let maxValueLength = 512

    struct Attribute {
        let handle: UInt16
        let type: ATTUUID
        let value: [UInt8]
        let writable: Bool
    }

    let serviceUUID: BLEUUID
    var psm: UInt16
    var metadata: [UInt8]

    /// What one connection (one client) has set.
    struct Session: Sendable {
        var mtu = ATTPDU.defaultMTU
        var configuration: UInt16 = 0
        var notifying: Bool { configuration & PeerServiceAttributes.notificationsEnabled != 0 }
    }

    func attributes(_ session: Session) -> [Attribute] {
        func declaration(_ properties: UInt8, _ valueHandle: UInt16, _ uuid: BLEUUID) -> [UInt8] {
            [properties, UInt8(valueHandle & 0xFF), UInt8(valueHandle >> 8)] + uuid.littleEndianBytes
        }
        return [
            Attribute(handle: Self.serviceHandle, type: .primaryService, value: serviceUUID.littleEndianBytes, writable: false),
            Attribute(handle: Self.psmDeclarationHandle, type: .characteristic,
                      value: declaration(Self.propertyRead, Self.psmValueHandle, BLEServiceUUID.psmCharacteristic), writable: false),
            Attribute(handle: Self.psmValueHandle, type: .uuid128(BLEServiceUUID.psmCharacteristic),
                      value: [UInt8(psm & 0xFF), UInt8(psm >> 8)], writable: false),
            Attribute(handle: Self.metadataDeclarationHandle, type: .characteristic,
                      value: declaration(Self.propertyRead | Self.propertyNotify, Self.metadataValueHandle,
                                         BLEServiceUUID.metadataCharacteristic), writable: false),
            Attribute(handle: Self.metadataValueHandle, type: .uuid128(BLEServiceUUID.metadataCharacteristic),
                      value: metadata, writable: false),
            Attribute(handle: Self.metadataConfigurationHandle, type: .clientCharacteristicConfiguration,
                      value: [UInt8(session.configuration & 0xFF), UInt8(session.configuration >> 8)], writable: true),
        ]
    }

    /// The server's answer to one PDU from the client (nil: none is due — a command, a
    /// notification or a response sent to the server). `maxMTU` is the server's receive MTU.
    func respond(to bytes: [UInt8], session: inout Session, maxMTU: Int) -> ATTPDU? {
        // No command (opcode bit 6: Write Command, Signed Write) is supported, and a command
        // never gets an answer, not even an error.
        guard let opcode = bytes.first, opcode & ATTPDU.Opcode.commandFlag == 0 else { return nil }
        let pdu: ATTPDU
        do {
            pdu = try ATTPDU.decode(bytes)
        } catch {
            return .errorResponse(requestOpcode: opcode, handle: 0, error: .invalidPDU)
        }
        if bytes.count > session.mtu, opcode != ATTPDU.Opcode.exchangeMTURequest {
            return .errorResponse(requestOpcode: opcode, handle: 0, error: .invalidPDU)
        }
        let table = attributes(session)
        func failure(_ handle: UInt16, _ error: ATTErrorCode) -> ATTPDU {
            .errorResponse(requestOpcode: opcode, handle: handle, error: error)
        }
        func inRange(_ start: UInt16, _ end: UInt16) -> [Attribute]? {
            guard start != 0, start <= end else { return nil }
            return table.filter { $0.handle >= start && $0.handle <= end }
        }
        switch pdu {
        case .exchangeMTURequest(let clientMTU):
            session.mtu = max(ATTPDU.defaultMTU, min(Int(clientMTU), maxMTU))
            return .exchangeMTUResponse(serverRxMTU: UInt16(maxMTU))
        case .findInformationRequest(let start, let end):
            guard let found = inRange(start, end) else { return failure(start, .invalidHandle) }
            guard let first = found.first else { return failure(start, .attributeNotFound) }
            let size = first.type.littleEndianBytes.count
            let fitting = (session.mtu - 2) / (2 + size)
            let entries = found.prefix { $0.type.littleEndianBytes.count == size }.prefix(fitting)
            return .findInformationResponse(entries.map { ATTPDU.HandleUUID(handle: $0.handle, uuid: $0.type) })
        case .readByTypeRequest(let start, let end, let type):
            guard let found = inRange(start, end) else { return failure(start, .invalidHandle) }
            let matching = found.filter { $0.type == type }
            guard let first = matching.first else { return failure(start, .attributeNotFound) }
            let length = min(first.value.count, session.mtu - 4, 253)
            let fitting = (session.mtu - 2) / (2 + length)
            let entries = matching.prefix { min($0.value.count, session.mtu - 4, 253) == length }.prefix(fitting)
            return .readByTypeResponse(entries.map { ATTPDU.HandleValue(handle: $0.handle, value: Array($0.value.prefix(length))) })
        case .readByGroupTypeRequest(let start, let end, let groupType):
            guard let found = inRange(start, end) else { return failure(start, .invalidHandle) }
            guard groupType == .primaryService || groupType == .secondaryService else {
                return failure(start, .unsupportedGroupType)
            }
            guard groupType == .primaryService, let service = found.first(where: { $0.type == .primaryService }) else {
                return failure(start, .attributeNotFound)
            }
            let groupEnd = table.last?.handle ?? service.handle
            return .readByGroupTypeResponse([ATTPDU.GroupValue(handle: service.handle, endGroupHandle: groupEnd, value: service.value)])
        case .readRequest(let handle):
            guard let attribute = table.first(where: { $0.handle == handle }) else { return failure(handle, .invalidHandle) }
            return .readResponse(value: Array(attribute.value.prefix(session.mtu - 1)))
        case .readBlobRequest(let handle, let offset):
            guard let attribute = table.first(where: { $0.handle == handle }) else { return failure(handle, .invalidHandle) }
            guard Int(offset) <= attribute.value.count else { return failure(handle, .invalidOffset) }
            return .readBlobResponse(partValue: Array(attribute.value[Int(offset)...].prefix(session.mtu - 1)))
        case .writeRequest(let handle, let value):
            guard let attribute = table.first(where: { $0.handle == handle }) else { return failure(handle, .invalidHandle) }
            guard attribute.writable else { return failure(handle, .writeNotPermitted) }
            guard value.count == 2 else { return failure(handle, .invalidAttributeValueLength) }
            session.configuration = UInt16(value[0]) | UInt16(value[1]) << 8
            return .writeResponse
        case .errorResponse, .exchangeMTUResponse, .findInformationResponse, .readByTypeResponse, .readResponse,
             .readBlobResponse, .readByGroupTypeResponse, .writeResponse, .handleValueNotification:
            // Responses and notifications are not the client's to send; ATT gives them no answer.
            return nil
        case .unsupported:
            return failure(0, .requestNotSupported)
        }
    }
}
