import PeerSyncCore

/// What a peer publishes: "peer X of group G, reachable on this port (and these addresses),
/// with this metadata". Passed to ``Discovery/publish(_:)``.
public struct PeerAnnouncement: Sendable, Hashable {
    /// Who the peer is.
    public var peerID: PeerID
    /// The group it belongs to.
    public var group: PeerGroupID
    /// The name to announce it under (DNS-SD: the service instance name). If another
    /// announcement already uses it, the discovery picks another one (DNS-SD and the in-process
    /// registry append ` #2`, ` #3`, …); ``PeerPublication/name`` holds the name in use.
    /// 1–63 bytes of UTF-8 without control characters. Default: the peer ID, cut to 63 bytes.
    public var name: String
    /// The port of the peer's listener (the mesh: its own TLS listener).
    public var port: UInt16
    /// Addresses the peer is reachable at, for discoveries that carry them (the in-process
    /// registry). Empty: the discovery supplies the host's addresses. DNS-SD always announces
    /// the host's own addresses (the daemon's address records) and ignores this list.
    public var addresses: [String]
    /// Key/value metadata (TXT-record-like), updatable with ``PeerPublication/updateMetadata(_:)``.
    public var metadata: PeerMetadata
    /// The version of the protocol the peer speaks over its listener (the mesh's); browsers
    /// report it so a peer can skip versions it does not speak. Default 1.
    public var protocolVersion: Int

    /// The longest ``name`` in bytes.
    public static let maxNameLength = 63

    /// Throws `PeerSyncError.Code.invalidArgument` for an invalid `name` or a
    /// `protocolVersion` outside 0...999_999.
    public init(peerID: PeerID, group: PeerGroupID, name: String? = nil, port: UInt16, addresses: [String] = [],
                metadata: PeerMetadata = PeerMetadata(), protocolVersion: Int = 1) throws(PeerSyncError) {
        let name = name ?? Self.truncated(peerID.rawValue, toBytes: Self.maxNameLength)
        try Self.validate(name: name)
        guard (0...999_999).contains(protocolVersion) else {
            throw PeerSyncError(.invalidArgument, "protocolVersion must be in 0...999999, got \(protocolVersion)")
        }
        self.peerID = peerID
        self.group = group
        self.name = name
        self.port = port
        self.addresses = addresses
        self.metadata = metadata
        self.protocolVersion = protocolVersion
    }

    /// Throws `PeerSyncError.Code.invalidArgument` unless `name` is 1–63 bytes of UTF-8
    /// without control characters.
    public static func validate(name: String) throws(PeerSyncError) {
        let count = name.utf8.count
        guard count >= 1, count <= maxNameLength else {
            throw PeerSyncError(.invalidArgument, "an announcement name must be 1–\(maxNameLength) bytes, got \(count)",
                                context: ["name": name])
        }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw PeerSyncError(.invalidArgument, "an announcement name may not contain control characters",
                                context: ["name": name])
        }
    }

    /// The longest prefix of `text` of at most `limit` UTF-8 bytes that ends on a Unicode
    /// scalar boundary (as Avahi cuts names: no incomplete UTF-8 sequence at the end).
    public static func truncated(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var result = String.UnicodeScalarView()
        var size = 0
        for scalar in text.unicodeScalars {
            size += String(scalar).utf8.count
            if size > limit { break }
            result.append(scalar)
        }
        return String(result)
    }

    /// The alternative to try after `name` collided, exactly as Avahi picks it
    /// (`avahi_alternative_service_name`): a name ending in ` #N` (N a decimal number without a
    /// leading zero) becomes ` #N+1`, any other gets ` #2`; the rest is cut so the result stays
    /// within ``maxNameLength`` bytes.
    public static func alternativeName(after name: String) -> String {
        let bytes = Array(name.utf8)
        var suffixStart: Int?
        var index = 0
        while index + 1 < bytes.count {
            if bytes[index] == UInt8(ascii: " ") && bytes[index + 1] == UInt8(ascii: "#") { suffixStart = index }
            index += 1
        }
        if let start = suffixStart {
            let digits = bytes[(start + 2)...]
            if let first = digits.first, first != UInt8(ascii: "0"),
               digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
               let number = Int(String(decoding: digits, as: UTF8.self)) {
                let suffix = " #\(number + 1)"
                let base = String(decoding: bytes[..<start], as: UTF8.self)
                return truncated(base, toBytes: maxNameLength - suffix.utf8.count) + suffix
            }
        }
        return truncated(name, toBytes: maxNameLength - 3) + " #2"
    }
}
