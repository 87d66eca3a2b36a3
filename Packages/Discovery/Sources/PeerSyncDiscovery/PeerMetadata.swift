import PeerSyncCore

/// Key/value metadata a peer announces beside its address, shaped like a DNS-SD TXT record
/// (RFC 6763 §6) so every discovery can carry it: over DNS-SD each entry is one TXT string
/// `key=value`; over Bluetooth LE the same encoding fills the metadata characteristic.
///
/// - Keys: 1–32 bytes of lowercase ASCII letters, digits, `-`, `_` and `.` (DNS-SD compares
///   keys without regard to case; allowing only lowercase keeps one spelling). The keys in
///   ``reservedKeys`` belong to the discoveries themselves.
/// - Values: any bytes (UTF-8 text through the `String` accessors), at most 255 bytes per
///   `key=value` entry.
/// - Size: the encoded form (one length byte plus `key=value` per entry) is at most
///   ``maxEncodedSize`` bytes, which keeps a whole announcement in one mDNS packet.
///
/// Setters validate and throw `PeerSyncError.Code.invalidArgument` (bad key, reserved key)
/// or `PeerSyncError.Code.tooLarge` (entry or total too long), leaving the value unchanged.
public struct PeerMetadata: Sendable, Hashable, CustomStringConvertible {
    /// The entries, by key.
    public private(set) var entries: [String: [UInt8]] = [:]

    /// The largest encoded size of all entries together.
    public static let maxEncodedSize = 1024
    /// The largest `key=value` entry.
    public static let maxEntrySize = 255
    /// The longest key.
    public static let maxKeyLength = 32
    /// Keys the discoveries use for their own fields (the TXT record's version, the peer ID
    /// and the protocol version); metadata may not set them.
    public static let reservedKeys: Set<String> = ["txtvers", "peerid", "protovers"]

    /// No entries.
    public init() {}

    /// Text entries. Throws as the setters do.
    public init(_ strings: [String: String]) throws(PeerSyncError) {
        for (key, value) in strings.sorted(by: { $0.key < $1.key }) {
            try set(value, forKey: key)
        }
    }

    /// The value of `key` as UTF-8 text (invalid sequences repaired), or nil if absent.
    public subscript(key: String) -> String? {
        entries[key].map { String(decoding: $0, as: UTF8.self) }
    }

    /// The raw value of `key`, or nil if absent.
    public func bytes(forKey key: String) -> [UInt8]? { entries[key] }

    /// The keys, sorted.
    public var keys: [String] { entries.keys.sorted() }

    /// Whether there are no entries.
    public var isEmpty: Bool { entries.isEmpty }

    /// Sets a text value.
    public mutating func set(_ value: String, forKey key: String) throws(PeerSyncError) {
        try set(bytes: Array(value.utf8), forKey: key)
    }

    /// Sets a raw value.
    public mutating func set(bytes value: [UInt8], forKey key: String) throws(PeerSyncError) {
        try Self.validate(key: key)
        guard !Self.reservedKeys.contains(key) else {
            throw PeerSyncError(.invalidArgument, "the metadata key '\(key)' is reserved for the discovery itself",
                                context: ["key": key])
        }
        let entrySize = key.utf8.count + 1 + value.count
        guard entrySize <= Self.maxEntrySize else {
            throw PeerSyncError(.tooLarge, "the metadata entry '\(key)' is \(entrySize) bytes; the limit is \(Self.maxEntrySize)",
                                context: ["key": key])
        }
        var copy = entries
        copy[key] = value
        let total = Self.encodedSize(of: copy)
        guard total <= Self.maxEncodedSize else {
            throw PeerSyncError(.tooLarge, "the metadata would be \(total) bytes encoded; the limit is \(Self.maxEncodedSize)",
                                context: ["key": key])
        }
        entries = copy
    }

    /// Removes `key` (nothing if absent).
    public mutating func removeValue(forKey key: String) {
        entries[key] = nil
    }

    /// The size of the TXT-style encoding: one length byte plus `key=value` per entry.
    public var encodedSize: Int { Self.encodedSize(of: entries) }

    /// Whether `key` is a valid metadata key (reserved keys included).
    public static func isValidKey(_ key: String) -> Bool {
        (try? validate(key: key)) != nil
    }

    public var description: String {
        "[" + keys.map { "\($0)=\(self[$0] ?? "")" }.joined(separator: ", ") + "]"
    }

    private static func validate(key: String) throws(PeerSyncError) {
        let bytes = key.utf8
        guard !bytes.isEmpty, bytes.count <= maxKeyLength else {
            throw PeerSyncError(.invalidArgument, "a metadata key must be 1–\(maxKeyLength) bytes, got \(bytes.count)",
                                context: ["key": key])
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                continue
            default:
                throw PeerSyncError(.invalidArgument,
                                    "a metadata key may only hold lowercase ASCII letters, digits and - _ . (found byte \(byte))",
                                    context: ["key": key])
            }
        }
    }

    private static func encodedSize(of entries: [String: [UInt8]]) -> Int {
        entries.reduce(0) { $0 + 1 + $1.key.utf8.count + 1 + $1.value.count }
    }
}
