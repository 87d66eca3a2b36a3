import PeerSyncCore
import PeerSyncDiscovery

/// How a ``BLEDiscovery`` times its work.
public struct BLEDiscoveryConfiguration: Sendable, Hashable {
    /// A browsed peer whose advertisements have not been seen for this long disappears (its
    /// GATT connection ending makes it disappear at once). Default 10 s.
    public var advertisementTimeout: Duration = .seconds(10)
    /// How long ``BLEDiscovery/publish(_:)`` listens for other advertisers of the group before
    /// choosing its name, so that names stay unique (BLE has no name registry). Default 1 s.
    public var nameProbeDuration: Duration = .seconds(1)
    /// The ATT MTU the GATT client proposes and the server accepts, 23...517. Default 247.
    public var preferredMTU: Int = 247
    /// How long one ATT request may wait for its response (ATT's own is 30 s). Default 30 s.
    public var transactionTimeout: Duration = .seconds(30)
    /// The wait before connecting again to an advertiser whose GATT connection failed.
    /// Default 1 s.
    public var reconnectInterval: Duration = .seconds(1)

    /// The defaults listed with each property.
    public init() {}

    /// Throws `PeerSyncError.Code.invalidArgument` for a non-positive duration or an MTU
    /// outside 23...517.
    public func validate() throws(PeerSyncError) {
        for (name, value) in [("advertisementTimeout", advertisementTimeout), ("nameProbeDuration", nameProbeDuration),
                              ("transactionTimeout", transactionTimeout), ("reconnectInterval", reconnectInterval)]
        where value <= .zero {
            throw PeerSyncError(.invalidArgument, "BLEDiscoveryConfiguration.\(name) must be positive")
        }
        guard (23...517).contains(preferredMTU) else {
            throw PeerSyncError(.invalidArgument, "BLEDiscoveryConfiguration.preferredMTU must be in 23...517, got \(preferredMTU)")
        }
    }
}

/// BLE's announcement names: the local name in the scan response, so at most
/// ``BLEAdvertisement/maxLocalNameBytes`` bytes.
enum BLEAnnouncementName {
    /// `name` cut to fit.
    static func fitted(_ name: String) -> String {
        PeerAnnouncement.truncated(name, toBytes: BLEAdvertisement.maxLocalNameBytes)
    }

    /// The alternative after a conflict: ``PeerAnnouncement/alternativeName(after:)``'s rule
    /// (` #2`, ` #3`, …), the base cut so the result fits.
    static func alternative(after name: String) -> String {
        let longer = PeerAnnouncement.alternativeName(after: name)
        guard longer.utf8.count > BLEAdvertisement.maxLocalNameBytes else { return longer }
        // alternativeName always ends in " #N": split there.
        let bytes = Array(longer.utf8)
        var marker = bytes.count - 2
        while marker > 0, !(bytes[marker] == UInt8(ascii: " ") && bytes[marker + 1] == UInt8(ascii: "#")) { marker -= 1 }
        let suffix = String(decoding: bytes[marker...], as: UTF8.self)
        let base = String(decoding: bytes[..<marker], as: UTF8.self)
        return PeerAnnouncement.truncated(base, toBytes: BLEAdvertisement.maxLocalNameBytes - suffix.utf8.count) + suffix
    }
}
