import PeerSyncCore
import PeerSyncDiscovery

/// Our DNS-SD TXT record (RFC 6763 §6): one `key=value` string per entry.
///
/// | Key | Value |
/// |---|---|
/// | `txtvers` | `1`, the version of this layout (RFC 6763 §6.7) |
/// | `peerid` | the peer ID (``PeerID``, e.g. 64 lowercase hex digits) |
/// | `protovers` | the protocol version the peer speaks (decimal) |
/// | anything else | the announcement's metadata (``PeerMetadata``) |
///
/// Reading is lenient, as RFC 6763 asks: keys are compared without regard to case, the first
/// of repeated keys wins, an entry without `=` is a key with an empty value, and entries that
/// are not valid metadata (bad key, over the size limit) are ignored. A record without a valid
/// `peerid` is not a PeerSync peer (e.g. another Couchbase Lite release's record): the browser
/// does not report it. A missing or unreadable `protovers` reads as 0.
enum TXTRecord {
    static let layoutVersion = "1"

    /// What a record says.
    struct Contents: Equatable {
        var peerID: PeerID
        var protocolVersion: Int
        var metadata: PeerMetadata
    }

    /// The entries announcing `announcement` (our keys first, then metadata by key).
    static func entries(for announcement: PeerAnnouncement) -> [[UInt8]] {
        var entries: [[UInt8]] = [
            Array("txtvers=\(layoutVersion)".utf8),
            Array("peerid=\(announcement.peerID.rawValue)".utf8),
            Array("protovers=\(announcement.protocolVersion)".utf8),
        ]
        for key in announcement.metadata.keys {
            entries.append(Array("\(key)=".utf8) + (announcement.metadata.bytes(forKey: key) ?? []))
        }
        return entries
    }

    /// Reads `entries`; nil without a valid `peerid`.
    static func decode(_ entries: [[UInt8]]) -> Contents? {
        var seen = Set<String>()
        var peerID: PeerID?
        var protocolVersion = 0
        var metadata = PeerMetadata()
        for entry in entries where !entry.isEmpty {
            let separator = entry.firstIndex(of: UInt8(ascii: "="))
            let keyBytes = entry[..<(separator ?? entry.endIndex)]
            let value = separator.map { Array(entry[($0 + 1)...]) } ?? []
            guard !keyBytes.isEmpty, keyBytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else { continue }
            let key = String(decoding: keyBytes, as: UTF8.self).lowercased()
            guard seen.insert(key).inserted else { continue }
            switch key {
            case "txtvers":
                continue
            case "peerid":
                peerID = try? PeerID(String(decoding: value, as: UTF8.self))
            case "protovers":
                protocolVersion = Int(String(decoding: value, as: UTF8.self)).flatMap { (0...999_999).contains($0) ? $0 : nil } ?? 0
            default:
                try? metadata.set(bytes: value, forKey: key)
            }
        }
        guard let peerID else { return nil }
        return Contents(peerID: peerID, protocolVersion: protocolVersion, metadata: metadata)
    }
}
