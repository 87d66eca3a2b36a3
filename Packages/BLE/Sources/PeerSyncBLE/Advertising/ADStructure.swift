import PeerSyncCore

/// One AD structure of Bluetooth LE advertising data or scan response data (Core Spec Vol 3
/// Part C §11): a length byte (counting the type byte and the data), an AD type and its data.
/// Advertising data and scan response data are each a sequence of these, at most
/// ``maxPayloadSize`` bytes in all (legacy advertising PDUs).
public struct ADStructure: Sendable, Hashable, CustomStringConvertible {
    /// The AD types PeerSync writes and reads (Assigned Numbers §2.3); any other type is kept
    /// as it is and otherwise ignored.
    public enum KnownType {
        /// Flags: LE discoverable modes and BR/EDR support bits.
        public static let flags: UInt8 = 0x01
        /// Incomplete list of 128-bit service UUIDs.
        public static let incompleteServiceUUIDs128: UInt8 = 0x06
        /// Complete list of 128-bit service UUIDs.
        public static let completeServiceUUIDs128: UInt8 = 0x07
        /// Shortened local name (UTF-8).
        public static let shortenedLocalName: UInt8 = 0x08
        /// Complete local name (UTF-8).
        public static let completeLocalName: UInt8 = 0x09
    }

    /// The Flags bits PeerSync sets (Core Spec Supplement Part A §1.3).
    public enum Flag {
        /// LE General Discoverable Mode.
        public static let leGeneralDiscoverable: UInt8 = 0x02
        /// BR/EDR Not Supported.
        public static let brEDRNotSupported: UInt8 = 0x04
    }

    /// The largest advertising or scan response payload of a legacy advertising PDU.
    public static let maxPayloadSize = 31

    /// The AD type.
    public var type: UInt8
    /// The data (at most 254 bytes: the length byte counts the type too).
    public var data: [UInt8]

    /// An AD structure of `type` carrying `data`, taken as given: encoding checks the sizes.
    public init(type: UInt8, data: [UInt8]) {
        self.type = type
        self.data = data
    }

    /// The size on the air: length byte, type byte, data.
    public var encodedSize: Int { 2 + data.count }

    public var description: String {
        "AD(0x\(String(type, radix: 16)), \(data.count) bytes)"
    }

    /// Encodes `structures` back to back. Throws `PeerSyncError.Code.tooLarge` when they
    /// take more than `limit` bytes (default ``maxPayloadSize``) or one structure's data is
    /// over 254 bytes; the message names the sizes.
    public static func encode(_ structures: [ADStructure], limit: Int = maxPayloadSize) throws(PeerSyncError) -> [UInt8] {
        var bytes: [UInt8] = []
        for structure in structures {
            guard structure.data.count <= 254 else {
                throw PeerSyncError(.tooLarge, "an AD structure holds at most 254 data bytes, got \(structure.data.count)",
                                    context: ["adType": "\(structure.type)"])
            }
            bytes.append(UInt8(structure.data.count + 1))
            bytes.append(structure.type)
            bytes.append(contentsOf: structure.data)
        }
        guard bytes.count <= limit else {
            throw PeerSyncError(.tooLarge, "the AD structures take \(bytes.count) bytes; an advertising payload holds at most \(limit)",
                                context: ["types": structures.map { "0x" + String($0.type, radix: 16) }.joined(separator: ",")])
        }
        return bytes
    }

    /// Decodes advertising or scan response data. A length byte of 0 ends the significant
    /// part (the rest is padding and must be zeros, as controllers pad); any structure whose
    /// length runs past the end, or non-zero bytes after the end marker, is malformed:
    /// `PeerSyncError.Code.protocolError` with the offset in the context. Never traps.
    public static func decode(_ bytes: some Collection<UInt8>) throws(PeerSyncError) -> [ADStructure] {
        let bytes = Array(bytes)
        var structures: [ADStructure] = []
        var offset = 0
        while offset < bytes.count {
            let length = Int(bytes[offset])
            if length == 0 {
                guard bytes[offset...].allSatisfy({ $0 == 0 }) else {
                    throw PeerSyncError(.protocolError, "advertising data continues after its end marker (a zero length byte)",
                                        context: ["offset": "\(offset)"])
                }
                break
            }
            guard offset + 1 + length <= bytes.count else {
                throw PeerSyncError(.protocolError,
                                    "an AD structure of length \(length) at offset \(offset) runs past the end of the \(bytes.count)-byte advertising data",
                                    context: ["offset": "\(offset)", "length": "\(length)"])
            }
            structures.append(ADStructure(type: bytes[offset + 1], data: Array(bytes[(offset + 2)..<(offset + 1 + length)])))
            offset += 1 + length
        }
        return structures
    }
}
