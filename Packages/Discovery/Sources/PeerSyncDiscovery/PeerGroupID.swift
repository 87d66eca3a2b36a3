import PeerSyncCore

/// The peer group a peer belongs to: only peers of the same group see each other. Couchbase
/// Lite's rule: 1–63 bytes of UTF-8, without control characters, `.`, `,` or `\` (over DNS-SD
/// the group is one DNS label, the subtype `<group>._sub._couchbaseP2P._tcp`; over Bluetooth
/// LE it names a service UUID).
///
/// Compared exactly here, but DNS compares names without regard to ASCII case: over DNS-SD,
/// `Team` and `team` are one group. Do not run groups that differ only in case on one network.
public struct PeerGroupID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The group ID as given.
    public let rawValue: String

    /// The longest group ID in bytes (one DNS label).
    public static let maxLength = 63

    /// Validates `rawValue`. Throws `PeerSyncError.Code.invalidArgument` if it is empty,
    /// longer than ``maxLength`` bytes, or holds a control character, `.`, `,` or `\`.
    public init(_ rawValue: String) throws(PeerSyncError) {
        let count = rawValue.utf8.count
        guard count >= 1, count <= Self.maxLength else {
            throw PeerSyncError(.invalidArgument, "a peer group ID must be 1–\(Self.maxLength) bytes, got \(count)",
                                context: ["peerGroupID": rawValue])
        }
        for scalar in rawValue.unicodeScalars {
            if scalar.properties.generalCategory == .control || scalar == "." || scalar == "," || scalar == "\\" {
                throw PeerSyncError(.invalidArgument,
                                    "a peer group ID may not contain control characters, '.', ',' or '\\' (found U+\(String(scalar.value, radix: 16, uppercase: true)))",
                                    context: ["peerGroupID": rawValue])
            }
        }
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    public static func < (lhs: PeerGroupID, rhs: PeerGroupID) -> Bool { lhs.rawValue < rhs.rawValue }
}
