import PeerSyncCore

/// The Bluetooth LE identifiers of a PeerSync / Couchbase Lite multipeer peer group.
///
/// Couchbase Lite derives the GATT primary service of a peer group from its ID: a name-based
/// UUID, version 5 (SHA-1, RFC 9562 §5.5), of the group ID's UTF-8 bytes under the namespace
/// ``peerGroupNamespace`` — so peers of one group find each other's advertisements without
/// exchanging anything first (`shared/reference/multipeer-protocol.md` §2).
public enum BLEServiceUUID {
    /// The namespace of peer-group service UUIDs.
    public static let peerGroupNamespace = BLEUUID(bytes: [0xE0, 0xC3, 0x79, 0x3A, 0x07, 0x39, 0x42, 0xA2,
                                                           0xA8, 0x00, 0x8B, 0xED, 0x23, 0x6D, 0x88, 0x15])
    /// The characteristic holding the L2CAP PSM of the peer's data channel (16-bit little-endian, read).
    public static let psmCharacteristic = BLEUUID(bytes: [0xAB, 0xDD, 0x30, 0x56, 0x28, 0xFA, 0x44, 0x1D,
                                                          0xA4, 0x70, 0x55, 0xA7, 0x5A, 0x52, 0x55, 0x3A])
    /// The characteristic holding the peer's metadata (DNS-SD TXT record encoding, read + notify).
    public static let metadataCharacteristic = BLEUUID(bytes: [0x93, 0x6D, 0x76, 0x69, 0xE5, 0x32, 0x42, 0xBF,
                                                               0x8B, 0x8D, 0x97, 0xE3, 0xC1, 0x07, 0x3F, 0x74])

    /// The primary service UUID of `peerGroupID`: UUIDv5 of its UTF-8 bytes under ``peerGroupNamespace``.
    public static func forPeerGroup(_ peerGroupID: String) -> BLEUUID {
        var sha = SHA1()
        sha.update(peerGroupNamespace.bytes)
        sha.update(Array(peerGroupID.utf8))
        var bytes = Array(sha.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50  // version 5
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC 9562 variant
        return BLEUUID(bytes: bytes)
    }
}

/// A 128-bit Bluetooth UUID, bytes in the textual (big-endian) order. On the air (advertising
/// data, ATT) UUIDs travel little-endian: ``littleEndianBytes``.
public struct BLEUUID: Hashable, Sendable, CustomStringConvertible {
    /// The 16 bytes, most significant first (the order of the text form).
    public let bytes: [UInt8]

    /// `bytes` must hold exactly 16 bytes (a precondition).
    public init(bytes: [UInt8]) {
        precondition(bytes.count == 16, "a 128-bit UUID has 16 bytes")
        self.bytes = bytes
    }

    /// Parses the text form `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX` (either case); nil otherwise.
    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 36, [8, 13, 18, 23].allSatisfy({ utf8[$0] == UInt8(ascii: "-") }) else { return nil }
        var bytes: [UInt8] = []
        var digits = utf8.enumerated().filter { ![8, 13, 18, 23].contains($0.offset) }.map(\.element)[...]
        while let high = digits.popFirst(), let low = digits.popFirst() {
            guard let h = Self.hexValue(high), let l = Self.hexValue(low) else { return nil }
            bytes.append(h << 4 | l)
        }
        self.init(bytes: bytes)
    }

    /// The bytes in the order they travel over the air.
    public var littleEndianBytes: [UInt8] { bytes.reversed() }

    /// The upper-case text form, e.g. `EA1B4C09-46F7-5522-9D31-A3855CC335FE`.
    public var description: String {
        let hex = bytes.map { byte in
            let digits = Array("0123456789ABCDEF")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]])
        }
        return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
