import PeerSyncCore

/// Settings of a ``DNSSDDiscovery``. The defaults are Couchbase Lite's service type in the
/// `local` (mDNS) domain on every interface the Avahi daemon uses.
public struct DNSSDConfiguration: Sendable, Hashable {
    /// The DNS-SD service type: `_<name>._tcp`. Default `_couchbaseP2P._tcp`, Couchbase Lite's
    /// (the group is published as its subtype `<group>._sub._couchbaseP2P._tcp`).
    public var serviceType: String = "_couchbaseP2P._tcp"
    /// The DNS-SD domain. Default `local` (multicast DNS).
    public var domain: String = "local"
    /// The network interface to publish and browse on (e.g. `"wlan0"`, `"lo"`), or nil for
    /// every interface the daemon uses (its `allow-interfaces`). Default nil.
    public var interface: String?
    /// How long to wait before trying again to reach the system D-Bus when it is not there
    /// (`avahi-daemon` itself is waited for without polling), and before retrying a failed
    /// browse or resolve. Default 1 s.
    public var retryInterval: Duration = .seconds(1)
    /// After the daemon came back, a restarted browse reports the peers it knew but no longer
    /// sees as disappeared only this long after the daemon said it has answered what it
    /// knows ("all for now"): peers still re-announcing themselves after the same outage are
    /// not reported gone and back. Default 3 s.
    public var reconcileGrace: Duration = .seconds(3)

    /// The defaults listed with each property.
    public init() {}

    /// Throws `PeerSyncError.Code.invalidArgument` unless the service type is
    /// `_name._tcp` or `_name._udp` (name: 1–15 letters, digits and hyphens) and the domain
    /// and durations are sensible.
    public func validate() throws(PeerSyncError) {
        let parts = serviceType.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1] == "_tcp" || parts[1] == "_udp", parts[0].hasPrefix("_"),
              (2...16).contains(parts[0].utf8.count),
              parts[0].dropFirst().allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
            throw PeerSyncError(.invalidArgument, "a DNS-SD service type is _name._tcp or _name._udp (name: 1–15 letters, digits, hyphens); got '\(serviceType)'")
        }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.isEmpty, labels.allSatisfy({ (1...63).contains($0.utf8.count) }) else {
            throw PeerSyncError(.invalidArgument, "invalid DNS-SD domain '\(domain)'")
        }
        if let interface, interface.isEmpty || interface.utf8.count > 15 {
            throw PeerSyncError(.invalidArgument, "invalid network interface name '\(interface)'")
        }
        guard retryInterval > .zero, reconcileGrace >= .zero else {
            throw PeerSyncError(.invalidArgument, "retryInterval must be positive and reconcileGrace not negative")
        }
    }

    /// `<group>._sub.<serviceType>.<domain>`: the name of the subtype pointer records (the
    /// group needs no escaping: it holds no `.` or `\`).
    func subtypeName(for group: String) -> String {
        "\(group)._sub.\(serviceType).\(domain)"
    }
}
