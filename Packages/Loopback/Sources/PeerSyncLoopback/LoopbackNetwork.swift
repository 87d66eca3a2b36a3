import PeerSyncCore
import PeerSyncTransport

/// An in-process network: a registry of listening endpoints (`loopback://host[:port]`), the
/// live links between hosts, the link conditions between hosts, and partitions.
///
/// Networks are isolated from each other: a transport only reaches listeners of its own
/// network, so parallel tests each make their own. Hosts are plain names; a
/// ``LoopbackTransport``'s ``LoopbackTransport/host`` names the connecting side, and the
/// endpoint's host names the listening side.
///
/// Thread-safe: one lock guards the registry; links are never called with it held.
public final class LoopbackNetwork: Sendable {
    /// A network for code that does not make its own.
    public static let shared = LoopbackNetwork()

    struct LinkRecord {
        let link: Link
        let hosts: (client: String, server: String)
    }

    struct State {
        var listeners: [String: LoopbackListener] = [:]
        var nextPort: [String: Int] = [:]
        var links: [Int: LinkRecord] = [:]
        var nextLinkID = 0
        var nextHostID = 0
        var nextClientPort = 49152
        var defaultConditions: LinkConditions
        var pairConditions: [HostPair: LinkConditions] = [:]
        var partitions: [(Set<String>, Set<String>)] = []

        func isPartitioned(_ a: String, _ b: String) -> Bool {
            partitions.contains { (x, y) in (x.contains(a) && y.contains(b)) || (x.contains(b) && y.contains(a)) }
        }
    }

    /// An unordered pair of host names.
    struct HostPair: Hashable {
        let first: String
        let second: String
        init(_ a: String, _ b: String) {
            (first, second) = a <= b ? (a, b) : (b, a)
        }
    }

    private let state: LockedValue<State>

    /// Creates an empty network whose links have `conditions` unless set otherwise per pair of
    /// hosts or per connection.
    public init(conditions: LinkConditions = .perfect) {
        state = LockedValue(State(defaultConditions: conditions))
    }

    // MARK: Conditions

    /// The conditions of links between hosts that have none set with
    /// ``setConditions(_:between:and:)``.
    public var defaultConditions: LinkConditions {
        get { state.withLock { $0.defaultConditions } }
        set { state.withLock { $0.defaultConditions = newValue } }
    }

    /// Sets the conditions of new links between hosts `a` and `b` (either direction).
    /// Existing links keep theirs. `nil` removes the setting.
    public func setConditions(_ conditions: LinkConditions?, between a: String, and b: String) {
        state.withLock { $0.pairConditions[HostPair(a, b)] = conditions }
    }

    /// The conditions new links between `a` and `b` get.
    public func conditions(between a: String, and b: String) -> LinkConditions {
        state.withLock { $0.pairConditions[HostPair(a, b)] ?? $0.defaultConditions }
    }

    // MARK: Partitions and disconnects

    /// Separates the hosts of `groupA` from those of `groupB`: links between them break at once
    /// (both ends see `PeerSyncError.Code.connectionReset`) and new connections between them
    /// are refused (`PeerSyncError.Code.connectionRefused`) until ``heal()``. Hosts inside one
    /// group still reach each other.
    public func partition(_ groupA: some Sequence<String>, _ groupB: some Sequence<String>) {
        let a = Set(groupA)
        let b = Set(groupB)
        let cut: [Link] = state.withLock { s in
            s.partitions.append((a, b))
            return s.links.values.filter { s.isPartitioned($0.hosts.client, $0.hosts.server) }.map(\.link)
        }
        for link in cut { link.breakLink("a network partition separated the hosts") }
    }

    /// Removes every partition. Links that were cut stay broken; new connections work again.
    public func heal() {
        state.withLock { $0.partitions.removeAll() }
    }

    /// Whether a partition separates hosts `a` and `b`.
    public func isPartitioned(_ a: String, _ b: String) -> Bool {
        state.withLock { $0.isPartitioned(a, b) }
    }

    /// Breaks every live link that has `host` at either end, as if its network went down.
    /// Listeners stay, so new connections work.
    public func disconnect(host: String) {
        let cut: [Link] = state.withLock { s in
            s.links.values.filter { $0.hosts.client == host || $0.hosts.server == host }.map(\.link)
        }
        for link in cut { link.breakLink("the host \(host) was disconnected from the network") }
    }

    /// The number of links that have not ended (for tests that check clean-up).
    public var liveLinkCount: Int { state.withLock { $0.links.count } }

    /// The endpoints being listened on.
    public var listenerEndpoints: [Endpoint] { state.withLock { $0.listeners.values.map(\.endpoint) } }

    // MARK: Internals

    func makeHostName() -> String {
        state.withLock { s in
            s.nextHostID += 1
            return "host-\(s.nextHostID)"
        }
    }

    static func key(host: String, port: Int?) -> String {
        port.map { "\(host):\($0)" } ?? host
    }

    /// Registers `make(endpoint)` at `endpoint`, choosing a port if it asks for 0.
    func register(_ endpoint: Endpoint, _ make: (Endpoint) -> LoopbackListener) throws -> LoopbackListener {
        try state.withLock { s in
            var bound = endpoint
            if endpoint.port == 0 {
                var port = s.nextPort[endpoint.host] ?? 49152
                while s.listeners[Self.key(host: endpoint.host, port: port)] != nil {
                    port = port >= 65535 ? 1 : port + 1
                }
                s.nextPort[endpoint.host] = port >= 65535 ? 1 : port + 1
                bound = endpoint.with(port: port)
            }
            let key = Self.key(host: bound.host, port: bound.port)
            if s.listeners[key] != nil {
                throw PeerSyncError(.addressInUse, "a listener already holds this endpoint", context: ["endpoint": bound.description])
            }
            let listener = make(bound)
            s.listeners[key] = listener
            return listener
        }
    }

    func unregister(_ listener: LoopbackListener) {
        state.withLock { s in
            let key = Self.key(host: listener.endpoint.host, port: listener.endpoint.port)
            if s.listeners[key] === listener { s.listeners[key] = nil }
        }
    }

    /// Connects `clientHost` to the listener at `endpoint`.
    func connect(from clientHost: String, to endpoint: Endpoint, options: LoopbackConnectOptions,
                 conditions: LinkConditions, closeTimeout: Duration) throws -> LoopbackConnection {
        let refused = { (why: String) in
            PeerSyncError(.connectionRefused, why, context: ["endpoint": endpoint.description])
        }
        let key = Self.key(host: endpoint.host, port: endpoint.port)
        let (listener, id, clientPort) = try state.withLock { s -> (LoopbackListener, Int, Int) in
            guard let listener = s.listeners[key] else { throw refused("nothing listens at this endpoint") }
            if s.isPartitioned(clientHost, endpoint.host) { throw refused("a network partition separates the hosts") }
            s.nextLinkID += 1
            s.nextClientPort = s.nextClientPort >= 65535 ? 49152 : s.nextClientPort + 1
            return (listener, s.nextLinkID, s.nextClientPort)
        }
        let listenOptions = listener.options
        let link = Link(
            id: id,
            client: LinkEnd(bufferMessages: options.receiveBufferMessages, bufferBytes: options.receiveBufferBytes,
                            closeTimeout: closeTimeout),
            server: LinkEnd(bufferMessages: listenOptions.receiveBufferMessages, bufferBytes: listenOptions.receiveBufferBytes,
                            closeTimeout: listener.closeTimeout),
            conditions: conditions,
            maxMessageSize: Swift.min(options.maxMessageSize, listenOptions.maxMessageSize),
            trace: options.trace,
            onEnd: { [weak self] id in self?.linkEnded(id) })
        let listenerAddress = "loopback://\(endpoint.authority)"
        let client = LoopbackConnection(link: link, side: 0, localHost: clientHost, remoteHost: endpoint.host,
                                        requestedEndpoint: endpoint, remoteAddress: listenerAddress)
        let server = LoopbackConnection(link: link, side: 1, localHost: endpoint.host, remoteHost: clientHost,
                                        requestedEndpoint: endpoint, remoteAddress: "loopback://\(clientHost):\(clientPort)")
        // Register before handing the server end to the listener, re-checking the partition so
        // a concurrent partition() cannot miss this link.
        let registered = state.withLock { s in
            if s.isPartitioned(clientHost, endpoint.host) { return false }
            s.links[id] = LinkRecord(link: link, hosts: (clientHost, endpoint.host))
            return true
        }
        guard registered else {
            link.breakLink("refused")
            throw refused("a network partition separates the hosts")
        }
        let queued = (try? listener.pending.trySend(server)) ?? false
        guard queued else {
            link.breakLink("refused")
            throw refused("the listener's backlog is full or it is closing")
        }
        link.start()
        return client
    }

    private func linkEnded(_ id: Int) {
        _ = state.withLock { $0.links.removeValue(forKey: id) }
    }
}
