import PeerSyncCore
import PeerSyncDiscovery

/// The transport choice of a run (module README, "Transports"): which of the networks that see
/// a peer to link over, when to fall back to a less preferred one, and when to move a link back
/// to the preferred one (make before break).
///
/// - **Preference**: ``MultipeerTransport/wifi`` over ``MultipeerTransport/bluetooth``
///   (``preference(of:)``); between networks of one transport, the order given.
/// - **Fallback**: a new link goes over the most preferred transport that sees the peer and
///   has failed it fewer than ``MultipeerReplicatorConfiguration/transportFallbackFailures``
///   times in a row (dials that failed, links that broke); when every transport has, the one
///   with the fewest failures.
/// - **Upgrade**: while the link to a peer runs over a less preferred transport and a more
///   preferred one sees the peer, the pair's designated dialler (the other side too after a
///   handshake timeout) dials the preferred transport — no sooner than that transport's own
///   back-off allows. The new link is adopted first and only then the old one closed
///   (``adopt`` lets the preferred transport win), so the peers are never without a link; the
///   new link's replication compares from scratch and asks only for revisions the database
///   lacks, so nothing is fetched twice and nothing in flight on the old link is lost.
/// - **Health** per peer and transport: failures in a row, and when the transport may be
///   dialled again for an upgrade (exponential from ``MultipeerReplicatorConfiguration/retryDelay``
///   to ``MultipeerReplicatorConfiguration/maximumRetryDelay``, as the peer's own back-off). A
///   link that lived ``healthyLinkAge`` before breaking starts the count again; a transport on
///   which the peer reappears (discovery saw it go and come back) is forgiven at once.
extension MeshRun {
    struct TransportHealth {
        var failures = 0
        var notBefore: ContinuousClock.Instant?
    }

    /// Lower is preferred.
    static func preference(of transport: MultipeerTransport) -> Int {
        switch transport {
        case .wifi: 0
        case .bluetooth: 1
        }
    }

    /// The sightings of `known`, most preferred first (transport, then network order, then name).
    func rankedSightings(_ known: KnownPeer?) -> [(network: Int, peer: DiscoveredPeer)] {
        guard let known else { return [] }
        return known.sightings.values.sorted {
            (Self.preference(of: networks[$0.network].links.transport), $0.network, $0.peer.name)
                < (Self.preference(of: networks[$1.network].links.transport), $1.network, $1.peer.name)
        }
    }

    /// The sighting to dial for a new link to `peerID` (see the fallback rule above).
    func sightingToDial(_ peerID: PeerID, _ s: RunState) -> (network: Int, peer: DiscoveredPeer)? {
        let ranked = rankedSightings(s.peers[peerID])
        let health = s.transportHealth[peerID] ?? [:]
        func failures(_ sighting: (network: Int, peer: DiscoveredPeer)) -> Int {
            health[networks[sighting.network].links.transport]?.failures ?? 0
        }
        if let healthy = ranked.first(where: { failures($0) < config.transportFallbackFailures }) { return healthy }
        return ranked.enumerated().min { (failures($0.element), $0.offset) < (failures($1.element), $1.offset) }?.element
    }

    /// A sighting of `link`'s peer on a more preferred transport than the link's, due for an
    /// upgrade dial at `now`; nil when there is none.
    func upgradeSighting(for link: Link, _ s: RunState, now: ContinuousClock.Instant) -> (network: Int, peer: DiscoveredPeer)? {
        let current = Self.preference(of: link.transport)
        let health = s.transportHealth[link.peerID] ?? [:]
        return rankedSightings(s.peers[link.peerID]).first { sighting in
            let transport = networks[sighting.network].links.transport
            return Self.preference(of: transport) < current && (health[transport]?.notBefore ?? now) <= now
        }
    }

    /// One more failure in a row of `transport` for `peerID` (a dial, or a link that broke;
    /// `healthy`: the link had lived ``healthyLinkAge``, so the count starts again).
    func recordTransportFailure(_ transport: MultipeerTransport, of peerID: PeerID, healthy: Bool = false, _ s: inout RunState) {
        var health = s.transportHealth[peerID]?[transport] ?? TransportHealth()
        if healthy { health.failures = 0 }
        health.failures += 1
        var delay = config.retryDelay * (1 << min(health.failures - 1, 20))
        if delay > config.maximumRetryDelay { delay = config.maximumRetryDelay }
        let fraction = 0.5 + Double(s.random.next() >> 11) / Double(1 << 53) * 0.5
        health.notBefore = clock.now + delay * fraction
        s.transportHealth[peerID, default: [:]][transport] = health
    }

    /// `peerID` appeared on `transport` (again): its failures there are forgiven.
    func transportAppeared(_ transport: MultipeerTransport, for peerID: PeerID, _ s: inout RunState) {
        s.transportHealth[peerID]?[transport] = nil
    }

    /// Upgrade dials due at `now` (see the type's notes), marked as dialling in `s`.
    func upgradesDue(_ s: inout RunState, now: ContinuousClock.Instant) -> [(PeerID, DiscoveredPeer, Int)] {
        var dials: [(PeerID, DiscoveredPeer, Int)] = []
        for (peerID, link) in s.links.sorted(by: { $0.key < $1.key }) {
            guard !link.closing, !s.dialing.contains(peerID), let sighting = upgradeSighting(for: link, s, now: now) else {
                s.upgradeWantedSince[peerID] = nil
                continue
            }
            let since = s.upgradeWantedSince[peerID] ?? now
            s.upgradeWantedSince[peerID] = since
            guard MeshTopology.dialler(me, peerID) == me || now - since >= handshakeTimeout else { continue }
            s.dialing.insert(peerID)
            s.upgradeWantedSince[peerID] = nil
            dials.append((peerID, sighting.peer, sighting.network))
        }
        for peerID in Array(s.upgradeWantedSince.keys) where s.links[peerID] == nil { s.upgradeWantedSince[peerID] = nil }
        return dials
    }

    /// Whether a new link over `new` replaces an existing one over `existing` (one link per
    /// pair): the preferred transport wins; on one transport, the designated dialler's link,
    /// else the newer one. Both peers apply the same rule, so they keep the same link.
    static func replaces(new: MultipeerTransport, newDesignated: Bool, existing: Link) -> Bool {
        let (newRank, oldRank) = (preference(of: new), preference(of: existing.transport))
        if newRank != oldRank { return newRank < oldRank }
        return newDesignated || !existing.designated
    }
}
