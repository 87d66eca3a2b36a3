import PeerSyncCore
import PeerSyncTransport

/// Options for ``LoopbackTransport/connect(to:options:)``.
public struct LoopbackConnectOptions: TransportOptions {
    /// The link's conditions; `nil` takes the network's for this pair of hosts
    /// (``LoopbackNetwork/conditions(between:and:)``).
    public var conditions: LinkConditions?
    /// Records the simulated wire's events (conditioned links only).
    public var trace: LinkTrace?
    /// The largest message this end sends or receives; the link uses the smaller of this and
    /// the listener's. Default 64 MiB.
    public var maxMessageSize: Int = 64 << 20
    /// Receive buffer of this end, in messages. Default 64.
    public var receiveBufferMessages: Int = 64
    /// Receive buffer of this end, in bytes (a single larger message still fits alone).
    /// Default 4 MiB.
    public var receiveBufferBytes: Int = 4 << 20

    public init() {}

    /// Options shaping the link with `conditions` (nil: an ideal link) and recording it in `trace`
    /// (default none); buffers and message size keep their defaults.
    public init(conditions: LinkConditions?, trace: LinkTrace? = nil) {
        self.conditions = conditions
        self.trace = trace
    }
}

/// Options for ``LoopbackTransport/listen(on:options:)``.
public struct LoopbackListenOptions: TransportOptions {
    /// Connections waiting for `TransportListener.accept()`; more are refused. Default 128.
    public var backlog: Int = 128
    /// The largest message accepted connections send or receive. Default 64 MiB.
    public var maxMessageSize: Int = 64 << 20
    /// Receive buffer of each accepted connection, in messages. Default 64.
    public var receiveBufferMessages: Int = 64
    /// Receive buffer of each accepted connection, in bytes. Default 4 MiB.
    public var receiveBufferBytes: Int = 4 << 20

    public init() {}
}

/// An in-process `Transport`: connections between tasks of one process over a
/// ``LoopbackNetwork``, optionally through a simulated link (``LinkConditions``: latency,
/// jitter, bandwidth, MTU, disconnects) and subject to the network's partitions. The test bed
/// for replication, mesh and BLE-like links.
///
/// Endpoints are `loopback://host[:port][/path]`: listening binds `host` and `port` (`0` picks a
/// free port; no port is a port of its own), and the path is passed to the accepting side in
/// ``LoopbackConnection/requestedEndpoint``. The transport's ``host`` names the connecting
/// side for partitions and per-host conditions.
///
/// A value type; copies share the network. All methods are safe from any task.
public struct LoopbackTransport: Transport {
    /// Link conditions, trace, buffers and message size of an outgoing connection.
    public typealias ConnectOptions = LoopbackConnectOptions
    /// Backlog, buffers and message size of a listener.
    public typealias ListenOptions = LoopbackListenOptions

    /// The network this transport connects and listens on.
    public let network: LoopbackNetwork
    /// The name of the host this transport connects from.
    public let host: String
    /// How long `MessageConnection.close(code:reason:)` waits for the peer's answer before
    /// dropping the link (the peer may not be reading). Default 5 seconds.
    public var closeTimeout: Duration

    /// A transport on `network` connecting from `host` (default: a fresh unique name such as
    /// `host-3`).
    public init(network: LoopbackNetwork = .shared, host: String? = nil, closeTimeout: Duration = .seconds(5)) {
        self.network = network
        self.host = host ?? network.makeHostName()
        self.closeTimeout = closeTimeout
    }

    public var kind: TransportKind { .loopback }
    public var schemes: Set<String> { ["loopback"] }

    /// Connects to the listener at `endpoint`. Throws `PeerSyncError.Code.connectionRefused`
    /// if nothing listens there, a partition separates the hosts, or the backlog is full;
    /// `PeerSyncError.Code.invalidArgument` for another scheme, port 0 or invalid conditions;
    /// `PeerSyncError.Code.cancelled` if cancelled during the simulated handshake (one
    /// round trip of the link's latency).
    public func connect(to endpoint: Endpoint, options: LoopbackConnectOptions) async throws -> any MessageConnection {
        try await connectLoopback(to: endpoint, options: options)
    }

    /// ``connect(to:options:)`` returning the concrete ``LoopbackConnection``.
    public func connectLoopback(to endpoint: Endpoint, options: LoopbackConnectOptions = .init()) async throws -> LoopbackConnection {
        try checkScheme(of: endpoint)
        if endpoint.port == 0 {
            throw PeerSyncError(.invalidArgument, "cannot connect to port 0", context: ["endpoint": endpoint.description])
        }
        let conditions = options.conditions ?? network.conditions(between: host, and: endpoint.host)
        try conditions.validate()
        if conditions.latency > .zero {
            do {
                try await Task.sleep(for: conditions.latency * 2)
            } catch {
                throw PeerSyncError(.cancelled, "connect was cancelled", context: ["endpoint": endpoint.description])
            }
        }
        return try network.connect(from: host, to: endpoint, options: options, conditions: conditions,
                                   closeTimeout: closeTimeout)
    }

    /// Listens on `endpoint` (`loopback://host[:port]`). Throws
    /// `PeerSyncError.Code.addressInUse` if another listener of the network holds it.
    public func listen(on endpoint: Endpoint, options: LoopbackListenOptions) async throws -> any TransportListener {
        try listenLoopback(on: endpoint, options: options)
    }

    /// ``listen(on:options:)`` returning the concrete ``LoopbackListener``.
    public func listenLoopback(on endpoint: Endpoint, options: LoopbackListenOptions = .init()) throws -> LoopbackListener {
        try checkScheme(of: endpoint)
        let options = options
        let closeTimeout = self.closeTimeout
        let network = self.network
        return try network.register(endpoint) { bound in
            LoopbackListener(endpoint: bound, network: network, options: options, closeTimeout: closeTimeout)
        }
    }
}

/// Accepts connections at a loopback endpoint; see `TransportListener` for the contract.
public final class LoopbackListener: TransportListener {
    public let endpoint: Endpoint
    let options: LoopbackListenOptions
    let closeTimeout: Duration
    let pending: AsyncMessageQueue<LoopbackConnection>
    private let network: LoopbackNetwork

    init(endpoint: Endpoint, network: LoopbackNetwork, options: LoopbackListenOptions, closeTimeout: Duration) {
        self.endpoint = endpoint
        self.network = network
        self.options = options
        self.closeTimeout = closeTimeout
        self.pending = AsyncMessageQueue(maxCount: options.backlog)
    }

    public func accept() async throws -> (any MessageConnection)? {
        try await pending.receive()
    }

    /// ``accept()`` returning the concrete ``LoopbackConnection``.
    public func acceptLoopback() async throws -> LoopbackConnection? {
        try await pending.receive()
    }

    public func close() async {
        network.unregister(self)
        let waiting = pending.finish(discardingBuffered: true)
        for connection in waiting {
            await connection.close(code: .goingAway, reason: "the listener closed")
        }
    }
}
