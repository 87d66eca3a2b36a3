import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncLoopback
import PeerSyncTransport

/// A ``MeshLinkTransport`` over `LoopbackNetwork` links, for tests, simulations and
/// `peersync bench mesh`: many mesh peers in one process, each a host of one loopback network
/// (pair it with an `InProcessDiscovery` of the same host name in a ``MeshNetwork``).
///
/// **A simulation of the TLS handshake, not TLS.** The link carries the peers' real
/// certificates (make identities with `TLSIdentity.createIdentity`), and each side calls
/// ``MeshLinkContext/authenticate`` on the other's chain exactly where a mutual-TLS handshake
/// verifies it: the dialler's chain on the accepting side first, then the acceptor's on the
/// dialler; a link is handed on (returned by ``dial(_:)``, yielded by ``incomingLinks()``) only
/// when both accepted. What it does not do: prove that a peer holds the private key of the
/// certificate it presents (anyone may replay a certificate here), encrypt, or check the
/// validity period beyond what the authenticator does. It is the transport the mesh's own
/// behaviour is tested on; the real mutual TLS is the Wi-Fi transport's.
///
/// Partitions and link conditions are the network's: `network.partition(...)` between host
/// names refuses dials and breaks the links across it, so partition tests are real.
///
/// Errors of ``dial(_:)``: `connectionRefused` (nobody listens, or a partition),
/// `PeerSyncError.Code.certificateRejected` (the peer refused our certificate),
/// `PeerSyncError.Code.untrustedCertificate` (we refused the peer's), `timeout` (the
/// handshake took longer than ``MeshLinkContext/handshakeTimeout``), `protocolError`,
/// `closed` (not started). Threading: any task; nothing blocks a thread.
public final class InProcessMeshLinks: MeshLinkTransport {
    /// The network the links run on.
    public let network: LoopbackNetwork
    /// This peer's host name on the network (its discovery's host name).
    public let host: String
    /// The transport it stands for on events and ``PeerInfo``. Default `.wifi`.
    public let transport: MultipeerTransport
    /// Conditions for the links this side dials (nil: the network's for the pair of hosts).
    public let conditions: LinkConditions?

    private struct State {
        var context: MeshLinkContext?
        var listener: LoopbackListener?
        var acceptTask: Task<Void, Never>?
        var incoming: AsyncStream<any MessageConnection>?
        var incomingContinuation: AsyncStream<any MessageConnection>.Continuation?
        /// Every link made or accepted since start (weakly: a link released by its user is gone).
        var links: [WeakLink] = []
    }

    private struct WeakLink {
        weak var connection: LoopbackConnection?
    }

    private let state = LockedValue(State())

    /// Links of host `host` on `network`, reported as `transport` (default `.wifi`), shaped by
    /// `conditions` (default none: instant, lossless).
    public init(network: LoopbackNetwork, host: String, transport: MultipeerTransport = .wifi,
                conditions: LinkConditions? = nil) {
        self.network = network
        self.host = host
        self.transport = transport
        self.conditions = conditions
    }

    /// Listens on `loopback://<host>:<free port>`; returns that port and `[host]`. Throws
    /// `invalidArgument` if already started.
    public func start(_ context: MeshLinkContext) async throws -> MeshListeningAddress {
        let (stream, continuation) = AsyncStream.makeStream(of: (any MessageConnection).self)
        let listener = try LoopbackTransport(network: network, host: host)
            .listenLoopback(on: Endpoint(url: "loopback://\(host):0"))
        let started = state.withLock { s -> Bool in
            guard s.context == nil else { return false }
            s.context = context
            s.listener = listener
            s.incoming = stream
            s.incomingContinuation = continuation
            s.links = []
            return true
        }
        guard started else {
            await listener.close()
            throw PeerSyncError(.invalidArgument, "the in-process mesh links of \(host) are already started")
        }
        let task = Task { [weak self] in
            await withTaskGroup(of: Void.self) { group in
                while let connection = try? await listener.acceptLoopback() {
                    group.addTask { await self?.accept(connection, context: context, into: continuation) }
                }
            }
        }
        state.withLock { $0.acceptTask = task }
        return MeshListeningAddress(port: UInt16(listener.endpoint.port ?? 0), addresses: [host])
    }

    public func incomingLinks() -> AsyncStream<any MessageConnection> {
        state.withLock { s in
            if let stream = s.incoming { return stream }
            let (stream, continuation) = AsyncStream.makeStream(of: (any MessageConnection).self)
            continuation.finish()
            return stream
        }
    }

    public func dial(_ peer: DiscoveredPeer) async throws -> any MessageConnection {
        guard let context = state.withLock({ $0.context }) else {
            throw PeerSyncError(.closed, "the in-process mesh links of \(host) are not started")
        }
        guard let address = peer.addresses.first else {
            throw PeerSyncError(.invalidArgument, "the peer has no address", context: ["peerID": peer.peerID.rawValue])
        }
        let endpoint = try Endpoint(url: "loopback://\(address):\(peer.port)")
        let connection = try await LoopbackTransport(network: network, host: host)
            .connectLoopback(to: endpoint, options: LoopbackConnectOptions(conditions: conditions))
        track(connection)
        return try await Self.withDeadline(context.handshakeTimeout, connection) {
            try await Self.dialHandshake(connection, context: context)
        }
    }

    public func stop() async {
        let (listener, task, continuation, links) = state.withLock { s in
            let result = (s.listener, s.acceptTask, s.incomingContinuation, s.links.compactMap(\.connection))
            s = State()
            return result
        }
        await listener?.close()
        task?.cancel()
        continuation?.finish()
        for link in links { link.abort() }
        await task?.value
    }

    // MARK: The simulated handshake

    private func accept(_ connection: LoopbackConnection, context: MeshLinkContext,
                        into continuation: AsyncStream<any MessageConnection>.Continuation) async {
        track(connection)
        do {
            let link = try await Self.withDeadline(context.handshakeTimeout, connection) {
                try await Self.acceptHandshake(connection, context: context)
            }
            if case .terminated = continuation.yield(link) { await link.close(code: .goingAway, reason: "stopped") }
        } catch {
            // Rejected, timed out or broken: the link never reaches the mesh. A timeout
            // stretches this run's handshakes as a dial's does (the accepting side waits one
            // message longer than the dialling one).
            if (error as? PeerSyncError)?.code == .timeout { context.stretch.timedOut() }
        }
    }

    private static func dialHandshake(_ connection: LoopbackConnection, context: MeshLinkContext) async throws -> any MessageConnection {
        try await connection.send(.binary(SimulatedHandshakeMessage.hello(chain: context.identity.certs.map(\.derBytes)).encoded))
        switch try SimulatedHandshakeMessage(decoding: try await connection.receive()) {
        case .reject(let reason):
            await connection.close(code: .policyViolation, reason: "certificate rejected")
            throw PeerSyncError(.certificateRejected, "the peer rejected our certificate: \(reason)")
        case .hello(let chain):
            guard let certificates = try? chain.map({ try Certificate(derBytes: $0) }),
                  context.authenticate(certificates) else {
                try? await connection.send(.binary(SimulatedHandshakeMessage.reject(reason: "untrusted certificate").encoded))
                await connection.close(code: .policyViolation, reason: "untrusted certificate")
                throw PeerSyncError(.untrustedCertificate, "the peer's certificate is not trusted",
                                    context: ["reason": "rejectedByCallback"])
            }
            try await connection.send(.binary(SimulatedHandshakeMessage.ready.encoded))
            return AuthenticatedLink(connection, peerCertificateChain: chain)
        case .ready:
            throw PeerSyncError(.protocolError, "the peer skipped its part of the mesh link handshake")
        }
    }

    private static func acceptHandshake(_ connection: LoopbackConnection, context: MeshLinkContext) async throws -> any MessageConnection {
        guard case .hello(let chain) = try SimulatedHandshakeMessage(decoding: try await connection.receive()) else {
            throw PeerSyncError(.protocolError, "the mesh link handshake must start with hello")
        }
        guard let certificates = try? chain.map({ try Certificate(derBytes: $0) }),
              context.authenticate(certificates) else {
            try? await connection.send(.binary(SimulatedHandshakeMessage.reject(reason: "untrusted certificate").encoded))
            await connection.close(code: .policyViolation, reason: "untrusted certificate")
            throw PeerSyncError(.untrustedCertificate, "the dialling peer's certificate is not trusted")
        }
        try await connection.send(.binary(SimulatedHandshakeMessage.hello(chain: context.identity.certs.map(\.derBytes)).encoded))
        guard case .ready = try SimulatedHandshakeMessage(decoding: try await connection.receive()) else {
            await connection.close(code: .policyViolation, reason: "certificate rejected")
            throw PeerSyncError(.certificateRejected, "the dialling peer rejected our certificate")
        }
        return AuthenticatedLink(connection, peerCertificateChain: chain)
    }

    /// Runs `body`; after `timeout` aborts `connection` (which ends the body's waits) and
    /// throws `timeout`.
    private static func withDeadline(_ timeout: Duration, _ connection: LoopbackConnection,
                                     _ body: @escaping @Sendable () async throws -> any MessageConnection) async throws -> any MessageConnection {
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            connection.abort()
        }
        defer { watchdog.cancel() }
        do {
            return try await body()
        } catch {
            // The watchdog's sleep completed: it aborted the link, which is why the body failed.
            watchdog.cancel()
            if (try? await watchdog.value) != nil {
                throw PeerSyncError(.timeout, "the mesh link handshake took longer than \(timeout)")
            }
            throw error
        }
    }

    private func track(_ connection: LoopbackConnection) {
        state.withLock { s in
            s.links.removeAll { $0.connection == nil }
            s.links.append(WeakLink(connection: connection))
        }
    }
}
