/// The peers one browse has reported, turning sightings into well-formed ``PeerEvent``s
/// (`appeared (updated)* disappeared` per name, nothing for a sighting that changes nothing):
/// a building block for implementations. A value type; guard it as your state.
public struct PeerTable: Sendable, Hashable {
    /// The peers reported as visible, by name.
    public private(set) var peers: [String: DiscoveredPeer] = [:]

    /// A table with no peers.
    public init() {}

    /// Records `peer` as visible: `.appeared` if new, `.updated` if it changed, nil if the same.
    public mutating func upsert(_ peer: DiscoveredPeer) -> PeerEvent? {
        let old = peers.updateValue(peer, forKey: peer.name)
        guard let old else { return .appeared(peer) }
        return old == peer ? nil : .updated(peer)
    }

    /// Records that the peer `name` is gone: `.disappeared` with its last state, nil if unknown.
    public mutating func remove(name: String) -> PeerEvent? {
        peers.removeValue(forKey: name).map { .disappeared($0) }
    }

    /// Makes the table equal to `visible`: disappearances first (by name), then appearances
    /// and updates (by name).
    public mutating func reconcile(with visible: [DiscoveredPeer]) -> [PeerEvent] {
        let names = Set(visible.map(\.name))
        var events: [PeerEvent] = []
        for name in peers.keys.sorted() where !names.contains(name) {
            if let event = remove(name: name) { events.append(event) }
        }
        for peer in visible.sorted(by: { $0.name < $1.name }) {
            if let event = upsert(peer) { events.append(event) }
        }
        return events
    }
}
