import PeerSyncDiscovery

/// The mesh's topology rules, as pure functions of peer IDs: every peer evaluates them over its
/// own view of the group, and peers with the same view reach the same answers without talking.
///
/// - **Dialler.** For a pair of peers, ``dialler(_:_:)`` names the side that dials: the lower
///   ID when the pair's hash is even, the higher one when it is odd — so every peer dials
///   about half of its links (a plain "lower ID dials" rule would make the lowest ID dial
///   everything), and both sides agree without a message.
/// - **Desired graph.** ``desiredGraph(of:targetDegree:maximumDegree:)``: the peers sorted by
///   ID form a ring (each linked to the next; the ring keeps the mesh connected with two
///   disjoint paths everywhere); then, in ``chordsPerPeer(targetDegree:)`` rounds, each peer in
///   ring order that still has fewer than the target adds one chord to the peer with the
///   smallest pair hash that also has fewer than the target and no link to it yet
///   (rendezvous hashing: random-looking, stable while the group is stable, and a join or
///   leave moves only the chords of the peers it touches). Random chords on a ring give a
///   diameter of about log₂ N. No peer ever gets more than `maximumDegree` links.
enum MeshTopology {
    /// A hash of the unordered pair: the same for `(a, b)` and `(b, a)`, on every peer and in
    /// every process (FNV-1a 64 over the two IDs in order, then the SplitMix64 finaliser).
    static func pairHash(_ a: PeerID, _ b: PeerID) -> UInt64 {
        let (low, high) = a < b ? (a, b) : (b, a)
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in low.rawValue.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        hash = (hash ^ 0x7c) &* 0x0000_0100_0000_01b3  // a separator ('|') no ID contains
        for byte in high.rawValue.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        var z = hash &+ 0x9e37_79b9_7f4a_7c15
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    /// The side of the pair that dials the link between them (see the type's comment).
    static func dialler(_ a: PeerID, _ b: PeerID) -> PeerID {
        let (low, high) = a < b ? (a, b) : (b, a)
        return pairHash(a, b) & 1 == 0 ? low : high
    }

    /// How many chord rounds a target degree asks for: the ring gives 2 links, each chord 2
    /// link ends, so `(target - 1) / 2` rounds bring the average near the target.
    static func chordsPerPeer(targetDegree: Int) -> Int { max(0, (targetDegree - 1) / 2) }

    /// The links every peer of `peers` should have (symmetric: `b ∈ graph[a]` ⇔ `a ∈ graph[b]`).
    static func desiredGraph(of peers: some Sequence<PeerID>, targetDegree: Int, maximumDegree: Int) -> [PeerID: Set<PeerID>] {
        let sorted = Set(peers).sorted()
        let count = sorted.count
        var adjacency = [Set<Int>](repeating: [], count: count)
        func link(_ i: Int, _ j: Int, limit: Int) {
            guard i != j, !adjacency[i].contains(j), adjacency[i].count < limit, adjacency[j].count < limit else { return }
            adjacency[i].insert(j)
            adjacency[j].insert(i)
        }
        if count >= 2 {
            for i in 0..<count { link(i, (i + 1) % count, limit: maximumDegree) }
            for _ in 0..<chordsPerPeer(targetDegree: targetDegree) {
                for i in 0..<count where adjacency[i].count < targetDegree {
                    var best: (hash: UInt64, index: Int)?
                    for j in 0..<count where j != i && !adjacency[i].contains(j) && adjacency[j].count < targetDegree {
                        let hash = pairHash(sorted[i], sorted[j])
                        if best == nil || hash < best!.hash { best = (hash, j) }
                    }
                    if let best { link(i, best.index, limit: targetDegree) }
                }
            }
        }
        var graph: [PeerID: Set<PeerID>] = [:]
        for i in 0..<count { graph[sorted[i]] = Set(adjacency[i].map { sorted[$0] }) }
        return graph
    }

    /// The pair that joins two parts of a mesh: of all pairs with one peer in `part` and one in
    /// `other`, the one with the smallest pair hash (both parts compute the same pair).
    static func bridge(between part: Set<PeerID>, and other: Set<PeerID>) -> (PeerID, PeerID)? {
        var best: (hash: UInt64, pair: (PeerID, PeerID))?
        for a in part {
            for b in other {
                let hash = pairHash(a, b)
                if best == nil || hash < best!.hash { best = (hash, (a, b)) }
            }
        }
        return best?.pair
    }
}

/// An undirected graph of peers: the mesh as one peer knows it (``MultipeerReplicator/graph``),
/// with what tests and benchmarks measure. Built from directed neighbour lists: a link counts
/// when either end lists it.
public struct MeshGraph: Sendable, Hashable {
    /// Every peer's neighbours (symmetric).
    public private(set) var adjacency: [PeerID: Set<PeerID>]

    /// `lists` holds each peer's neighbours as that peer announced them; peers named only as
    /// neighbours are added.
    public init(neighborLists lists: [PeerID: Set<PeerID>]) {
        var adjacency = lists
        for (peer, neighbors) in lists {
            for neighbor in neighbors where neighbor != peer {
                adjacency[neighbor, default: []].insert(peer)
            }
            adjacency[peer]?.remove(peer)
        }
        self.adjacency = adjacency
    }

    /// The peers.
    public var peers: Set<PeerID> { Set(adjacency.keys) }

    /// The number of links.
    public var linkCount: Int { adjacency.values.reduce(0) { $0 + $1.count } / 2 }

    /// The largest number of links of any peer (0 when empty).
    public var maximumDegree: Int { adjacency.values.map(\.count).max() ?? 0 }

    /// Hops from `source` to every peer it reaches (itself at 0).
    public func distances(from source: PeerID) -> [PeerID: Int] {
        guard adjacency[source] != nil else { return [:] }
        var distances = [source: 0]
        var frontier = [source]
        while !frontier.isEmpty {
            var next: [PeerID] = []
            for peer in frontier {
                for neighbor in adjacency[peer] ?? [] where distances[neighbor] == nil {
                    distances[neighbor] = distances[peer]! + 1
                    next.append(neighbor)
                }
            }
            frontier = next
        }
        return distances
    }

    /// The connected parts, largest first.
    public var components: [Set<PeerID>] {
        var remaining = peers
        var parts: [Set<PeerID>] = []
        while let start = remaining.min() {
            let part = Set(distances(from: start).keys)
            parts.append(part)
            remaining.subtract(part)
        }
        return parts.sorted { $0.count != $1.count ? $0.count > $1.count : $0.min()! < $1.min()! }
    }

    /// Whether every peer reaches every other (true for zero or one peer).
    public var isConnected: Bool { components.count <= 1 }

    /// The longest shortest path, in hops; nil when the graph is not connected.
    public var diameter: Int? {
        guard isConnected else { return nil }
        return adjacency.keys.map { distances(from: $0).values.max() ?? 0 }.max() ?? 0
    }
}
