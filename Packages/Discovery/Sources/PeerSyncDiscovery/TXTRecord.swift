import PeerSyncCore

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
///
/// Shared by the discoveries: PeerSyncDNSSD hands the entries to Avahi, PeerSyncBLE puts
/// their wire form (``wireFormat(_:)``, RFC 6763 §6.1) in the GATT metadata characteristic.
package enum TXTRecord {
    package static let layoutVersion = "1"

    /// What a record says.
    package struct Contents: Equatable, Sendable {
        package var peerID: PeerID
        package var protocolVersion: Int
        package var metadata: PeerMetadata

        package init(peerID: PeerID, protocolVersion: Int, metadata: PeerMetadata) {
            self.peerID = peerID
            self.protocolVersion = protocolVersion
            self.metadata = metadata
        }
    }

    /// The entries announcing `announcement` (our keys first, then metadata by key).
    package static func entries(for announcement: PeerAnnouncement) -> [[UInt8]] {
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
    package static func decode(_ entries: [[UInt8]]) -> Contents? {
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

    /// The DNS wire form of `entries` (RFC 6763 §6.1): each entry as one length byte and its
    /// bytes, back to back. Entries longer than 255 bytes are a precondition failure
    /// (``PeerMetadata`` never makes one); an empty list encodes as one empty string (a
    /// single 0 byte), as RFC 6763 §6.1 requires of a TXT record.
    package static func wireFormat(_ entries: [[UInt8]]) -> [UInt8] {
        guard !entries.isEmpty else { return [0] }
        var bytes: [UInt8] = []
        for entry in entries {
            precondition(entry.count <= 255, "a TXT string holds at most 255 bytes")
            bytes.append(UInt8(entry.count))
            bytes.append(contentsOf: entry)
        }
        return bytes
    }

    /// The entries of a TXT record in wire form (the inverse of ``wireFormat(_:)``; empty
    /// strings are kept, ``decode(_:)`` skips them). Throws ``PeerSyncError/Code/protocolError``
    /// when a length byte runs past the end of `bytes`.
    package static func entries(fromWireFormat bytes: some Collection<UInt8>) throws(PeerSyncError) -> [[UInt8]] {
        var entries: [[UInt8]] = []
        var rest = bytes[...]
        while let length = rest.popFirst() {
            guard rest.count >= Int(length) else {
                throw PeerSyncError(.protocolError, "a TXT record string of \(length) bytes runs past the end of the record",
                                    context: ["remaining": "\(rest.count)"])
            }
            entries.append(Array(rest.prefix(Int(length))))
            rest = rest.dropFirst(Int(length))
        }
        return entries
    }
}
