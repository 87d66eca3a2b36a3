import PeerSyncDiscovery

/// How a mesh peer shares its direct links: in its discovery metadata, so every peer of the
/// group learns the whole graph from discovery alone, with no message of our own on the links
/// (a plain Couchbase Lite listener would answer an unknown BLIP profile with an error), and
/// so a change reaches peers that have no link to this one.
///
/// Keys `nb0`, `nb1`, `nb2`: each value is up to ``idsPerEntry`` neighbours separated by `,`,
/// each neighbour the first ``prefixLength`` characters of its peer ID (64 bits of a SHA-256
/// digest: a collision within one group is negligible). A reader resolves prefixes against the
/// peers it discovered; one it cannot resolve is a peer it does not see and is left out.
/// Together at most ``maximumNeighbors`` neighbours, ≤ 675 bytes, within the discovery
/// limits (key=value ≤ 255 bytes, ≤ 1024 in all). Absent keys mean no links.
public enum MeshNeighborMetadata {
    /// Characters of a peer ID published per neighbour.
    public static let prefixLength = 16
    /// Neighbours per metadata entry: `nbN=` (4 bytes) + 13 × 16 + 12 separators = 224 ≤ 255.
    public static let idsPerEntry = 13
    /// The entry keys, in order.
    public static let keys = ["nb0", "nb1", "nb2"]
    /// The most neighbours that fit: 3 × 13.
    public static let maximumNeighbors = 39

    /// The prefix of `peerID` that is published.
    public static func prefix(of peerID: PeerID) -> String { String(peerID.rawValue.prefix(prefixLength)) }

    /// Metadata listing `neighbors` (sorted; at most ``maximumNeighbors``, the rest left out).
    public static func metadata(listing neighbors: some Sequence<PeerID>) -> PeerMetadata {
        let prefixes = neighbors.sorted().prefix(maximumNeighbors).map(prefix(of:))
        var metadata = PeerMetadata()
        for (index, start) in stride(from: 0, to: prefixes.count, by: idsPerEntry).enumerated() {
            let chunk = prefixes[start..<min(start + idsPerEntry, prefixes.count)].joined(separator: ",")
            // Within the limits by construction (see the type's comment).
            try? metadata.set(chunk, forKey: keys[index])
        }
        return metadata
    }

    /// The neighbour prefixes listed in `metadata`.
    public static func neighborPrefixes(in metadata: PeerMetadata) -> [String] {
        keys.flatMap { key in (metadata[key] ?? "").split(separator: ",").map(String.init) }
    }
}
