import PeerSyncCore

/// Per-transport options for ``Transport/connect(to:options:)`` or ``Transport/listen(on:options:)``.
///
/// Each transport defines its own options types (WebSocket: subprotocols, headers, TLS,
/// heartbeat; loopback: link conditions), so options stay typed and extensible without a
/// stringly-typed dictionary. The only common requirement is a default value, so code that
/// holds just `any Transport` can still connect with ``Transport/connect(to:)``.
public protocol TransportOptions: Sendable {
    /// The default options.
    init()
}

/// Options for transports that have none.
public struct NoTransportOptions: TransportOptions, Hashable {
    public init() {}
}

/// Makes ``MessageConnection``s: connects to endpoints and listens for peers.
///
/// Design: options are associated types (``ConnectOptions``, ``ListenOptions``) so each
/// transport has its own typed options; generic code takes `some Transport` with
/// `T.ConnectOptions`, and code holding `any Transport` uses the defaults through
/// ``connect(to:)`` / ``listen(on:)``.
///
/// Contract: `connect` returns an open connection or throws a `PeerSyncError`
/// (`PeerSyncError.Code.connectionRefused`, `PeerSyncError.Code.hostNotFound`,
/// `PeerSyncError.Code.timeout`, `PeerSyncError.Code.invalidArgument` for an endpoint
/// whose scheme the transport does not handle, ...). It honours task cancellation.
/// `listen` binds the endpoint (throws `PeerSyncError.Code.addressInUse` if taken) and
/// returns a listener whose ``TransportListener/endpoint`` is the address actually bound.
/// Both are safe to call from any task, concurrently.
public protocol Transport: Sendable {
    /// The options of ``connect(to:options:)``; ``NoTransportOptions`` by default.
    associatedtype ConnectOptions: TransportOptions = NoTransportOptions
    /// The options of ``listen(on:options:)``; ``NoTransportOptions`` by default.
    associatedtype ListenOptions: TransportOptions = NoTransportOptions

    /// The kind of the connections this transport makes.
    var kind: TransportKind { get }

    /// The URL schemes this transport handles, lowercased (e.g. `["ws", "wss"]`).
    var schemes: Set<String> { get }

    /// Opens a connection to `endpoint`.
    func connect(to endpoint: Endpoint, options: ConnectOptions) async throws -> any MessageConnection

    /// Starts accepting connections on `endpoint`.
    func listen(on endpoint: Endpoint, options: ListenOptions) async throws -> any TransportListener
}

extension Transport {
    /// Opens a connection to `endpoint` with default options.
    public func connect(to endpoint: Endpoint) async throws -> any MessageConnection {
        try await connect(to: endpoint, options: ConnectOptions())
    }

    /// Starts accepting connections on `endpoint` with default options.
    public func listen(on endpoint: Endpoint) async throws -> any TransportListener {
        try await listen(on: endpoint, options: ListenOptions())
    }

    /// Throws `PeerSyncError.Code.invalidArgument` unless this transport handles
    /// `endpoint`'s scheme. A helper for implementations.
    public func checkScheme(of endpoint: Endpoint) throws {
        guard schemes.contains(endpoint.scheme) else {
            throw PeerSyncError(.invalidArgument, "this transport does not handle the URL scheme",
                                context: ["endpoint": endpoint.description, "transport": kind.description])
        }
    }
}

/// Accepts incoming connections on a bound endpoint.
///
/// Contract: ``accept()`` returns the next incoming connection, suspending until one arrives,
/// and `nil` once the listener is closed. Incoming connections wait in a bounded backlog; when
/// it is full, further peers are refused. ``close()`` stops listening, frees the endpoint,
/// closes (``CloseCode/goingAway``) connections still waiting in the backlog, and makes
/// pending and later ``accept()`` calls return `nil`; it does not close connections that were
/// already accepted. `close` is idempotent.
public protocol TransportListener: AnyObject, Sendable {
    /// The endpoint actually bound (a requested port `0` is replaced by the real port).
    var endpoint: Endpoint { get }

    /// The next incoming connection, or `nil` once the listener is closed. Throws
    /// `PeerSyncError.Code.cancelled` if the task is cancelled while waiting.
    func accept() async throws -> (any MessageConnection)?

    /// Stops listening. Idempotent.
    func close() async
}

extension TransportListener {
    /// The incoming connections as an `AsyncSequence` built on ``accept()``; it ends when the
    /// listener is closed.
    public var connections: TransportConnectionSequence { TransportConnectionSequence(listener: self) }
}

/// The incoming connections of a ``TransportListener``; see ``TransportListener/connections``.
public struct TransportConnectionSequence: AsyncSequence, Sendable {
    public typealias Element = any MessageConnection
    public typealias Failure = any Error

    let listener: any TransportListener

    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let listener: any TransportListener
        public mutating func next() async throws -> (any MessageConnection)? { try await listener.accept() }
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> (any MessageConnection)? {
            try await listener.accept()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(listener: listener) }
}
