import PeerSyncCore

/// An attribute type or characteristic UUID as ATT carries it: 16-bit (a Bluetooth SIG
/// assigned number, short for `0000xxxx-0000-1000-8000-00805F9B34FB`) or 128-bit. Two UUIDs
/// are equal when their 128-bit forms are.
package enum ATTUUID: Sendable, Hashable, CustomStringConvertible {
    case uuid16(UInt16)
    case uuid128(BLEUUID)

    /// Primary Service declaration.
    package static let primaryService = ATTUUID.uuid16(0x2800)
    /// Secondary Service declaration.
    package static let secondaryService = ATTUUID.uuid16(0x2801)
    /// Characteristic declaration.
    package static let characteristic = ATTUUID.uuid16(0x2803)
    /// Client Characteristic Configuration descriptor (notifications on/off).
    package static let clientCharacteristicConfiguration = ATTUUID.uuid16(0x2902)

    /// The Bluetooth base UUID, `00000000-0000-1000-8000-00805F9B34FB`.
    static let baseBytes: [UInt8] = [0, 0, 0, 0, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]

    /// The 128-bit form.
    package var uuid128: BLEUUID {
        switch self {
        case .uuid128(let uuid): return uuid
        case .uuid16(let short):
            var bytes = Self.baseBytes
            bytes[2] = UInt8(short >> 8)
            bytes[3] = UInt8(short & 0xFF)
            return BLEUUID(bytes: bytes)
        }
    }

    /// The little-endian bytes ATT sends: 2 for a 16-bit UUID, 16 for a 128-bit one.
    package var littleEndianBytes: [UInt8] {
        switch self {
        case .uuid16(let short): [UInt8(short & 0xFF), UInt8(short >> 8)]
        case .uuid128(let uuid): uuid.littleEndianBytes
        }
    }

    /// From 2 or 16 little-endian bytes; nil for any other size.
    package init?(littleEndian bytes: some Collection<UInt8>) {
        let bytes = Array(bytes)
        switch bytes.count {
        case 2: self = .uuid16(UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        case 16: self = .uuid128(BLEUUID(bytes: bytes.reversed()))
        default: return nil
        }
    }

    package static func == (lhs: ATTUUID, rhs: ATTUUID) -> Bool { lhs.uuid128 == rhs.uuid128 }
    package func hash(into hasher: inout Hasher) { hasher.combine(uuid128) }

    package var description: String {
        switch self {
        case .uuid16(let short): "0x" + String(short, radix: 16, uppercase: true)
        case .uuid128(let uuid): uuid.description
        }
    }
}

/// An ATT error code (Core Spec Vol 3 Part F §3.4.1.1), sent in an Error Response.
package struct ATTErrorCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    package static let invalidHandle = Self(rawValue: 0x01)
    package static let readNotPermitted = Self(rawValue: 0x02)
    package static let writeNotPermitted = Self(rawValue: 0x03)
    package static let invalidPDU = Self(rawValue: 0x04)
    package static let requestNotSupported = Self(rawValue: 0x06)
    package static let invalidOffset = Self(rawValue: 0x07)
    package static let attributeNotFound = Self(rawValue: 0x0A)
    package static let invalidAttributeValueLength = Self(rawValue: 0x0D)
    package static let unsupportedGroupType = Self(rawValue: 0x10)

    package var description: String {
        let names: [UInt8: String] = [0x01: "Invalid Handle", 0x02: "Read Not Permitted", 0x03: "Write Not Permitted",
                                      0x04: "Invalid PDU", 0x06: "Request Not Supported", 0x07: "Invalid Offset",
                                      0x0A: "Attribute Not Found", 0x0D: "Invalid Attribute Value Length",
                                      0x10: "Unsupported Group Type"]
        return "\(names[rawValue] ?? "ATT error") (0x\(String(rawValue, radix: 16, uppercase: true)))"
    }
}

/// The ATT PDUs of PeerSync's minimal GATT (Core Spec Vol 3 Part F §3.4): what the client
/// needs to discover the peer service, read (also long values), subscribe, and be notified.
/// ``decode(_:)`` reads one PDU (one L2CAP SDU / seqpacket message); ``encoded()`` writes
/// one. Signed writes, prepared writes, indications and the other requests are not
/// supported: a server answers them with ``ATTErrorCode/requestNotSupported`` (decoded as
/// ``unsupported(opcode:parameters:)``).
package enum ATTPDU: Sendable, Hashable {
    /// One (handle, UUID) of a Find Information Response.
    package struct HandleUUID: Sendable, Hashable {
        package var handle: UInt16
        package var uuid: ATTUUID
        package init(handle: UInt16, uuid: ATTUUID) { self.handle = handle; self.uuid = uuid }
    }

    /// One (handle, value) of a Read By Type Response.
    package struct HandleValue: Sendable, Hashable {
        package var handle: UInt16
        package var value: [UInt8]
        package init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
    }

    /// One (handle, end group handle, value) of a Read By Group Type Response.
    package struct GroupValue: Sendable, Hashable {
        package var handle: UInt16
        package var endGroupHandle: UInt16
        package var value: [UInt8]
        package init(handle: UInt16, endGroupHandle: UInt16, value: [UInt8]) {
            self.handle = handle
            self.endGroupHandle = endGroupHandle
            self.value = value
        }
    }

    case errorResponse(requestOpcode: UInt8, handle: UInt16, error: ATTErrorCode)
    case exchangeMTURequest(clientRxMTU: UInt16)
    case exchangeMTUResponse(serverRxMTU: UInt16)
    case findInformationRequest(startHandle: UInt16, endHandle: UInt16)
    /// Every UUID of one response has the same size (the format byte says which).
    case findInformationResponse([HandleUUID])
    case readByTypeRequest(startHandle: UInt16, endHandle: UInt16, type: ATTUUID)
    /// Every value of one response has the same length (the length byte says it).
    case readByTypeResponse([HandleValue])
    case readRequest(handle: UInt16)
    case readResponse(value: [UInt8])
    case readBlobRequest(handle: UInt16, offset: UInt16)
    case readBlobResponse(partValue: [UInt8])
    case readByGroupTypeRequest(startHandle: UInt16, endHandle: UInt16, groupType: ATTUUID)
    /// Every value of one response has the same length.
    case readByGroupTypeResponse([GroupValue])
    case writeRequest(handle: UInt16, value: [UInt8])
    case writeResponse
    case handleValueNotification(handle: UInt16, value: [UInt8])
    /// Any other opcode, with its parameters (a server refuses a request it does not support).
    case unsupported(opcode: UInt8, parameters: [UInt8])

    /// The opcodes (Core Spec Vol 3 Part F §3.4.8).
    package enum Opcode {
        package static let errorResponse: UInt8 = 0x01
        package static let exchangeMTURequest: UInt8 = 0x02
        package static let exchangeMTUResponse: UInt8 = 0x03
        package static let findInformationRequest: UInt8 = 0x04
        package static let findInformationResponse: UInt8 = 0x05
        package static let readByTypeRequest: UInt8 = 0x08
        package static let readByTypeResponse: UInt8 = 0x09
        package static let readRequest: UInt8 = 0x0A
        package static let readResponse: UInt8 = 0x0B
        package static let readBlobRequest: UInt8 = 0x0C
        package static let readBlobResponse: UInt8 = 0x0D
        package static let readByGroupTypeRequest: UInt8 = 0x10
        package static let readByGroupTypeResponse: UInt8 = 0x11
        package static let writeRequest: UInt8 = 0x12
        package static let writeResponse: UInt8 = 0x13
        package static let handleValueNotification: UInt8 = 0x1B
        /// Bit 6 of an opcode: a command (no response is ever sent, not even an error).
        package static let commandFlag: UInt8 = 0x40
    }

    /// The default (and minimum) ATT MTU of an LE bearer.
    package static let defaultMTU = 23

    /// The PDU's opcode.
    package var opcode: UInt8 {
        switch self {
        case .errorResponse: Opcode.errorResponse
        case .exchangeMTURequest: Opcode.exchangeMTURequest
        case .exchangeMTUResponse: Opcode.exchangeMTUResponse
        case .findInformationRequest: Opcode.findInformationRequest
        case .findInformationResponse: Opcode.findInformationResponse
        case .readByTypeRequest: Opcode.readByTypeRequest
        case .readByTypeResponse: Opcode.readByTypeResponse
        case .readRequest: Opcode.readRequest
        case .readResponse: Opcode.readResponse
        case .readBlobRequest: Opcode.readBlobRequest
        case .readBlobResponse: Opcode.readBlobResponse
        case .readByGroupTypeRequest: Opcode.readByGroupTypeRequest
        case .readByGroupTypeResponse: Opcode.readByGroupTypeResponse
        case .writeRequest: Opcode.writeRequest
        case .writeResponse: Opcode.writeResponse
        case .handleValueNotification: Opcode.handleValueNotification
        case .unsupported(let opcode, _): opcode
        }
    }

    /// The bytes of the PDU. Lists in responses must be non-empty and uniform (one UUID size,
    /// one value length, each value at most 253 bytes — what the length byte can say): a
    /// precondition, as only this module's server builds them.
    package func encoded() -> [UInt8] {
        var out: [UInt8] = [opcode]
        func put16(_ value: UInt16) { out.append(UInt8(value & 0xFF)); out.append(UInt8(value >> 8)) }
        switch self {
        case .errorResponse(let request, let handle, let error):
            out.append(request); put16(handle); out.append(error.rawValue)
        case .exchangeMTURequest(let mtu), .exchangeMTUResponse(let mtu):
            put16(mtu)
        case .findInformationRequest(let start, let end):
            put16(start); put16(end)
        case .findInformationResponse(let entries):
            let size = entries.first?.uuid.littleEndianBytes.count ?? 2
            precondition(!entries.isEmpty && entries.allSatisfy { $0.uuid.littleEndianBytes.count == size })
            out.append(size == 2 ? 1 : 2)
            for entry in entries { put16(entry.handle); out += entry.uuid.littleEndianBytes }
        case .readByTypeRequest(let start, let end, let type), .readByGroupTypeRequest(let start, let end, let type):
            put16(start); put16(end); out += type.littleEndianBytes
        case .readByTypeResponse(let entries):
            let length = entries.first?.value.count ?? 0
            precondition(!entries.isEmpty && length <= 253 && entries.allSatisfy { $0.value.count == length })
            out.append(UInt8(2 + length))
            for entry in entries { put16(entry.handle); out += entry.value }
        case .readRequest(let handle):
            put16(handle)
        case .readResponse(let value), .readBlobResponse(let value):
            out += value
        case .readBlobRequest(let handle, let offset):
            put16(handle); put16(offset)
        case .readByGroupTypeResponse(let entries):
            let length = entries.first?.value.count ?? 0
            precondition(!entries.isEmpty && length <= 251 && entries.allSatisfy { $0.value.count == length })
            out.append(UInt8(4 + length))
            for entry in entries { put16(entry.handle); put16(entry.endGroupHandle); out += entry.value }
        case .writeRequest(let handle, let value), .handleValueNotification(let handle, let value):
            put16(handle); out += value
        case .writeResponse:
            break
        case .unsupported(_, let parameters):
            out += parameters
        }
        return out
    }

    /// Reads one PDU. Throws ``PeerSyncError/Code/protocolError`` (context: `opcode`) when the
    /// parameters of a known opcode are malformed — a wrong size, a list that does not divide
    /// into its entries, an unknown UUID format — or `bytes` is empty. Never traps.
    package static func decode(_ bytes: some Collection<UInt8>) throws(PeerSyncError) -> ATTPDU {
        let bytes = Array(bytes)
        guard let opcode = bytes.first else { throw PeerSyncError(.protocolError, "an empty ATT PDU") }
        let p = bytes[1...]
        func malformed(_ why: String) -> PeerSyncError {
            PeerSyncError(.protocolError, "malformed ATT PDU 0x\(String(opcode, radix: 16)): \(why)",
                          context: ["opcode": "\(opcode)", "size": "\(bytes.count)"])
        }
        func u16(_ at: Int) -> UInt16 { UInt16(p[p.startIndex + at]) | UInt16(p[p.startIndex + at + 1]) << 8 }
        func exactly(_ count: Int) throws(PeerSyncError) {
            guard p.count == count else { throw malformed("\(p.count) parameter bytes, expected \(count)") }
        }
        func handleRangeAndType() throws(PeerSyncError) -> (UInt16, UInt16, ATTUUID) {
            guard p.count == 6 || p.count == 20, let type = ATTUUID(littleEndian: p.dropFirst(4)) else {
                throw malformed("\(p.count) parameter bytes, expected 6 or 20")
            }
            return (u16(0), u16(2), type)
        }
        switch opcode {
        case Opcode.errorResponse:
            try exactly(4)
            return .errorResponse(requestOpcode: p[p.startIndex], handle: u16(1), error: ATTErrorCode(rawValue: p[p.startIndex + 3]))
        case Opcode.exchangeMTURequest:
            try exactly(2)
            return .exchangeMTURequest(clientRxMTU: u16(0))
        case Opcode.exchangeMTUResponse:
            try exactly(2)
            return .exchangeMTUResponse(serverRxMTU: u16(0))
        case Opcode.findInformationRequest:
            try exactly(4)
            return .findInformationRequest(startHandle: u16(0), endHandle: u16(2))
        case Opcode.findInformationResponse:
            guard let format = p.first, format == 1 || format == 2 else { throw malformed("unknown UUID format") }
            let entrySize = format == 1 ? 4 : 18
            let data = p.dropFirst()
            guard !data.isEmpty, data.count % entrySize == 0 else {
                throw malformed("\(data.count) bytes of information data, not a multiple of \(entrySize)")
            }
            var entries: [HandleUUID] = []
            var index = data.startIndex
            while index < data.endIndex {
                let handle = UInt16(data[index]) | UInt16(data[index + 1]) << 8
                // Cannot fail: the slice is 2 or 16 bytes.
                guard let uuid = ATTUUID(littleEndian: data[(index + 2)..<(index + entrySize)]) else { throw malformed("UUID") }
                entries.append(HandleUUID(handle: handle, uuid: uuid))
                index += entrySize
            }
            return .findInformationResponse(entries)
        case Opcode.readByTypeRequest:
            let (start, end, type) = try handleRangeAndType()
            return .readByTypeRequest(startHandle: start, endHandle: end, type: type)
        case Opcode.readByGroupTypeRequest:
            let (start, end, type) = try handleRangeAndType()
            return .readByGroupTypeRequest(startHandle: start, endHandle: end, groupType: type)
        case Opcode.readByTypeResponse, Opcode.readByGroupTypeResponse:
            let headerSize = opcode == Opcode.readByTypeResponse ? 2 : 4
            guard let length = p.first.map(Int.init), length >= headerSize else {
                throw malformed("an entry length below \(headerSize)")
            }
            let data = p.dropFirst()
            guard !data.isEmpty, data.count % length == 0 else {
                throw malformed("\(data.count) bytes of attribute data, not a multiple of the entry length \(length)")
            }
            var index = data.startIndex
            var plain: [HandleValue] = []
            var grouped: [GroupValue] = []
            while index < data.endIndex {
                let handle = UInt16(data[index]) | UInt16(data[index + 1]) << 8
                let value = Array(data[(index + headerSize)..<(index + length)])
                if headerSize == 2 {
                    plain.append(HandleValue(handle: handle, value: value))
                } else {
                    let end = UInt16(data[index + 2]) | UInt16(data[index + 3]) << 8
                    grouped.append(GroupValue(handle: handle, endGroupHandle: end, value: value))
                }
                index += length
            }
            return headerSize == 2 ? .readByTypeResponse(plain) : .readByGroupTypeResponse(grouped)
        case Opcode.readRequest:
            try exactly(2)
            return .readRequest(handle: u16(0))
        case Opcode.readResponse:
            return .readResponse(value: Array(p))
        case Opcode.readBlobRequest:
            try exactly(4)
            return .readBlobRequest(handle: u16(0), offset: u16(2))
        case Opcode.readBlobResponse:
            return .readBlobResponse(partValue: Array(p))
        case Opcode.writeRequest, Opcode.handleValueNotification:
            guard p.count >= 2 else { throw malformed("\(p.count) parameter bytes, expected a handle") }
            let value = Array(p.dropFirst(2))
            return opcode == Opcode.writeRequest ? .writeRequest(handle: u16(0), value: value)
                : .handleValueNotification(handle: u16(0), value: value)
        case Opcode.writeResponse:
            try exactly(0)
            return .writeResponse
        default:
            return .unsupported(opcode: opcode, parameters: Array(p))
        }
    }
}
