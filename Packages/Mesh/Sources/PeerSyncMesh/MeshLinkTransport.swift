import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncTransport

/// A way the mesh reaches peers, as Couchbase Lite's `MultipeerTransport` names them: Wi-Fi
/// (DNS-SD discovery + WebSocket over mutual TLS) and Bluetooth LE (BLE discovery + an L2CAP
/// channel carrying mutual TLS). Wi-Fi is preferred where both reach a peer.
public enum MultipeerTransport: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// DNS-SD discovery and WebSocket over mutual TLS on the local network.
    case wifi
    /// Bluetooth LE discovery and an L2CAP channel carrying mutual TLS (`PeerSyncMeshBluetooth`).
    case bluetooth

    public var description: String { rawValue }
}

/// What a ``MeshLinkTransport`` needs from the mesh to start: who we are and who we trust.
public struct MeshLinkContext: Sendable {
    /// This peer's identity: presented as the TLS server certificate on incoming links and
    /// as the client certificate on outgoing ones (it carries both key usages).
    public var identity: TLSIdentity
    /// Decides whether a peer is trusted, given its certificate chain (leaf first). The
    /// transport calls it on **every** link, in both directions, during the handshake (before
    /// any replication message); a link it rejects fails with
    /// `PeerSyncError/Code/certificateRejected` on the dialling side and never appears in
    /// ``MeshLinkTransport/incomingLinks()`` on the accepting side. Must not block.
    public var authenticate: @Sendable ([Certificate]) -> Bool
    /// Time a dial or an accepted link may take from the first byte to an authenticated,
    /// ready connection; a peer that stalls longer is dropped. Default 10 s.
    ///
    /// Read it at **each** handshake: while a mesh runs, the value it returns is the configured
    /// one (what was set) times a factor the mesh raises after a handshake timed out — ×2 per
    /// timeout, up to ×8 — and lowers again after a dial that took under half the configured
    /// time. A loaded device (every handshake slow) thus still forms links instead of timing
    /// out forever. Copies of one run's context share the factor. (The Wi-Fi and Bluetooth
    /// link transports configure their listeners when they start: their accepting side keeps
    /// the value of that moment; their dials and the in-process links follow the factor.)
    public var handshakeTimeout: Duration {
        get { configuredHandshakeTimeout * stretch.factor }
        set { configuredHandshakeTimeout = newValue }
    }
    /// The handshake timeout as configured, before ``stretch``.
    package var configuredHandshakeTimeout: Duration
    /// The factor ``handshakeTimeout`` is stretched by; the mesh run owns and moves it.
    package var stretch = HandshakeStretch()

    /// The mesh identity (client and server key usage), the check of a peer's certificate chain
    /// (true: trusted) and how long a link's TLS and replication handshake may take.
    public init(identity: TLSIdentity, authenticate: @escaping @Sendable ([Certificate]) -> Bool,
                handshakeTimeout: Duration = .seconds(10)) {
        self.identity = identity
        self.authenticate = authenticate
        self.configuredHandshakeTimeout = handshakeTimeout
    }

    /// Mutual TLS for accepting links: presents ``identity``, requires a client certificate
    /// and lets ``authenticate`` alone judge it, within ``handshakeTimeout``.
    package var serverTLS: TLSConfiguration {
        var tls = TLSConfiguration.server(identity: identity, clientCertificateValidation: .callback(authenticate))
        tls.handshakeTimeout = handshakeTimeout
        return tls
    }

    /// Mutual TLS for dialling: presents ``identity`` as the client certificate and lets
    /// ``authenticate`` alone judge the server's (no host name check), within ``handshakeTimeout``.
    package var clientTLS: TLSConfiguration {
        var tls = TLSConfiguration.client(serverName: nil, identity: identity)
        tls.serverCertificateCallback = authenticate
        tls.handshakeTimeout = handshakeTimeout
        return tls
    }
}

/// How many times the configured handshake timeout a mesh run currently allows (1, 2, 4 or 8):
/// doubled when a handshake timed out, halved when a dial took under half the configured time.
/// Thread-safe; shared by reference between a run and the contexts it hands out.
package final class HandshakeStretch: Sendable {
    /// The largest factor: a handshake never gets more than 8 × the configured timeout.
    package static let maximum = 8
    private let value = LockedValue(1)

    package init() {}

    /// The current factor.
    package var factor: Int { value.withLock { $0 } }

    /// A handshake timed out: allow twice as long, up to ``maximum``.
    package func timedOut() { value.withLock { $0 = min($0 * 2, Self.maximum) } }

    /// A dial succeeded after `elapsed`; one under half of `configured` halves the factor.
    package func succeeded(after elapsed: Duration, configured: Duration) {
        guard elapsed < configured / 2 else { return }
        value.withLock { $0 = max(1, $0 / 2) }
    }
}

/// Where a started ``MeshLinkTransport`` accepts links: what the mesh publishes through its
/// `Discovery` (port, and addresses when the transport binds specific ones).
public struct MeshListeningAddress: Sendable, Hashable {
    /// The port to announce (for transports without ports, a channel number such as an L2CAP PSM).
    public var port: UInt16
    /// The addresses to announce; empty means "the host's addresses" (the discovery fills them in).
    public var addresses: [String]

    /// A listener on `port` at `addresses` (empty: every address of the host).
    public init(port: UInt16, addresses: [String] = []) {
        self.port = port
        self.addresses = addresses
    }
}

/// The plug-in point between the mesh and a network: accepts authenticated links from peers
/// and dials peers found by a `Discovery`. Wi-Fi's is WebSocket over mutual TLS
/// (`PeerSyncMeshWiFi`), Bluetooth LE's an L2CAP channel carrying mutual TLS
/// (`PeerSyncMeshBluetooth`), and tests and simulations use an in-process one over loopback links. The mesh owns the topology (whom to dial, duplicates,
/// back-off); a transport only moves bytes and proves identities.
///
/// Contract:
/// - Every connection it returns or yields is **authenticated**: its
///   `MessageConnection/peerCertificateChain` is the peer's chain (leaf first, never empty)
///   and ``MeshLinkContext/authenticate`` accepted it. The mesh derives the peer ID from the
///   leaf (`Certificate/peerID`) and drops a dialled link whose ID is not the one discovered.
/// - ``start(_:)`` begins accepting and returns the address to publish; it throws if it cannot
///   listen. ``stop()`` stops accepting, closes every link it made or accepted, ends
///   ``incomingLinks()`` and is idempotent. A transport may be started again after stop.
/// - ``dial(_:)`` connects to a discovered peer of this transport's kind, or throws
///   (`PeerSyncError/Code/connectionRefused`, `PeerSyncError/Code/timeout`,
///   `PeerSyncError/Code/certificateRejected`, …); it never hangs past
///   ``MeshLinkContext/handshakeTimeout`` plus the connect time.
/// - Threading: every method from any task, concurrently; nothing blocks a thread.
public protocol MeshLinkTransport: AnyObject, Sendable {
    /// Which transport this is; stamped on events and ``PeerInfo``.
    var transport: MultipeerTransport { get }

    /// Starts accepting links; returns what to publish.
    func start(_ context: MeshLinkContext) async throws -> MeshListeningAddress

    /// The authenticated links peers opened to us, in the order they became ready. One stream
    /// per start; it ends on ``stop()``.
    func incomingLinks() -> AsyncStream<any MessageConnection>

    /// Opens an authenticated link to `peer` (a peer its discovery reported).
    func dial(_ peer: DiscoveredPeer) async throws -> any MessageConnection

    /// Stops accepting and closes every link. Idempotent.
    func stop() async
}

/// One way of finding and reaching peers, as the mesh uses it: a `Discovery` that finds the
/// peers of the group and the ``MeshLinkTransport`` that connects to what it finds. Wi-Fi is
/// DNS-SD + WebSocket/TLS; an in-process network pairs `InProcessDiscovery` with loopback links.
public struct MeshNetwork: Sendable {
    /// Finds the peers of the group, and publishes this one.
    public var discovery: any Discovery
    /// Connects to the peers the discovery finds, and accepts their links.
    public var links: any MeshLinkTransport

    /// A network of peers found by `discovery` and linked by `links`.
    public init(discovery: any Discovery, links: any MeshLinkTransport) {
        self.discovery = discovery
        self.links = links
    }
}
