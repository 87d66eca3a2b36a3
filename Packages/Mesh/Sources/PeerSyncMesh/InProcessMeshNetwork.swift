import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncLoopback

/// One simulated network for many mesh peers in one process: an `InProcessDiscoveryRegistry`
/// (discovery) and a `LoopbackNetwork` (links), with partitions applied to both, as a real
/// network split hides peers from discovery and cuts their links alike. Each peer is a host
/// name; ``network(host:transport:)`` gives its ``MeshNetwork``.
///
/// For tests, simulations and `peersync bench mesh`. Threading: any task.
public final class InProcessMeshNetwork: Sendable {
    /// Where the peers discover each other.
    public let registry: InProcessDiscoveryRegistry
    /// Where their links run.
    public let links: LoopbackNetwork
    /// The hosts ``network(host:transport:)`` was asked for.
    private let hosts = LockedValue<Set<String>>([])

    /// Throws `PeerSyncError.Code.invalidArgument` for invalid discovery conditions.
    public init(discovery: SimulatedDiscoveryConditions = .perfect, links: LinkConditions = .perfect) throws(PeerSyncError) {
        registry = try InProcessDiscoveryRegistry(conditions: discovery)
        self.links = LoopbackNetwork(conditions: links)
    }

    /// The discovery and links of the peer on `host` (a host name unique on this network).
    public func network(host: String, transport: MultipeerTransport = .wifi) -> MeshNetwork {
        hosts.withLock { _ = $0.insert(host) }
        return MeshNetwork(discovery: InProcessDiscovery(registry: registry, hostName: host),
                    links: InProcessMeshLinks(network: links, host: host, transport: transport))
    }

    /// Splits the hosts into groups that neither discover nor reach each other (links across
    /// groups break, new ones are refused); the hosts not listed form one more group. Replaces
    /// any earlier partition.
    public func partition(_ groups: [[String]]) {
        var groups = groups.filter { !$0.isEmpty }
        let rest = hosts.withLock { $0 }.subtracting(groups.joined())
        if !rest.isEmpty { groups.append(rest.sorted()) }
        registry.partition(groups)
        links.heal()
        for i in groups.indices {
            for j in groups.indices where j > i { links.partition(groups[i], groups[j]) }
        }
    }

    /// Ends every partition.
    public func heal() {
        registry.heal()
        links.heal()
    }
}
