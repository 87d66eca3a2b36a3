import PeerSyncCore

/// The identity of a peer, as discovery announces it: 1–64 bytes of ASCII letters, digits and
/// `-`, `_`, `.`, `:`. The mesh uses the lowercase hex text of the SHA-256 digest of the
/// peer's DER certificate (64 characters, ``init(digest:)``); tests may use any short name.
///
/// Compared exactly (case-sensitive). The same peer ID may be announced more than once in a
/// group (the same peer on several interfaces or discoveries, or a misconfigured duplicate):
/// browsers report each announcement separately, by its name (``DiscoveredPeer/name``).
public struct PeerID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The textual form.
    public let rawValue: String

    /// The longest peer ID in bytes.
    public static let maxLength = 64

    /// Validates `rawValue`. Throws `PeerSyncError.Code.invalidArgument` if it is empty,
    /// longer than ``maxLength`` bytes or holds a character outside `[A-Za-z0-9._:-]`.
    public init(_ rawValue: String) throws(PeerSyncError) {
        let bytes = rawValue.utf8
        guard !bytes.isEmpty, bytes.count <= Self.maxLength else {
            throw PeerSyncError(.invalidArgument, "a peer ID must be 1–\(Self.maxLength) bytes, got \(bytes.count)",
                                context: ["peerID": rawValue])
        }
        for byte in bytes where !Self.isAllowed(byte) {
            throw PeerSyncError(.invalidArgument,
                                "a peer ID may only hold ASCII letters, digits and - _ . : (found byte \(byte))",
                                context: ["peerID": rawValue])
        }
        self.rawValue = rawValue
    }

    /// The peer ID of a digest (e.g. SHA-256 of a certificate, 32 bytes): its lowercase hex
    /// text. Throws `PeerSyncError.Code.invalidArgument` for an empty digest or one longer
    /// than 32 bytes.
    public init(digest: [UInt8]) throws(PeerSyncError) {
        guard !digest.isEmpty, digest.count * 2 <= Self.maxLength else {
            throw PeerSyncError(.invalidArgument, "a peer ID digest must be 1–\(Self.maxLength / 2) bytes, got \(digest.count)")
        }
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(digest.count * 2)
        for byte in digest {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0x0F)])
        }
        self.rawValue = String(decoding: text, as: UTF8.self)
    }

    public var description: String { rawValue }

    public static func < (lhs: PeerID, rhs: PeerID) -> Bool { lhs.rawValue < rhs.rawValue }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"):
            true
        default:
            false
        }
    }
}
