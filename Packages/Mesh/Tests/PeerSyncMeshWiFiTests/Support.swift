import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncMeshWiFi
import PeerSyncTransport

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it: 30 under TSan, 3 under ASan), 1 otherwise.
let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline that assumes full speed, stretched by ``slowFactor``.
func slow(_ duration: Duration) -> Duration { duration * slowFactor }

/// Identities with both key usages, as mesh peers need; made once (key generation is slow).
enum TestPeers {
    static let identities: [TLSIdentity] = (0..<4).map { index in
        // swiftlint:disable:next force_try — a test fixture: failing here fails every test loudly.
        try! TLSIdentity.createIdentity(for: [.clientAuth, .serverAuth],
                                        attributes: [certAttrCommonName: "mesh-peer-\(index)"])
    }
    static var alice: TLSIdentity { identities[0] }
    static var bob: TLSIdentity { identities[1] }
    static var carol: TLSIdentity { identities[2] }
    /// Nobody trusts this one.
    static var mallory: TLSIdentity { identities[3] }
}

/// The certificates an authenticator saw, in order.
final class SeenCertificates: Sendable {
    private let seen = LockedValue<[Certificate]>([])
    func record(_ chain: [Certificate]) { if let leaf = chain.first { seen.withLock { $0.append(leaf) } } }
    var leaves: [Certificate] { seen.withLock { $0 } }
}

/// A context trusting exactly the leaves of `trusted`, recording every chain it is asked about.
func context(_ identity: TLSIdentity, trusting trusted: [TLSIdentity], seen: SeenCertificates = SeenCertificates(),
             handshakeTimeout: Duration = slow(.seconds(10))) -> MeshLinkContext {
    let leaves = Set(trusted.map(\.certificate))
    return MeshLinkContext(identity: identity, authenticate: { chain in
        seen.record(chain)
        return chain.first.map { leaves.contains($0) } ?? false
    }, handshakeTimeout: handshakeTimeout)
}

/// What a browser would report for a transport listening on 127.0.0.1.
func discovered(_ identity: TLSIdentity, port: UInt16, addresses: [String] = ["127.0.0.1"]) throws -> DiscoveredPeer {
    DiscoveredPeer(name: identity.peerID, peerID: try PeerID(identity.peerID), group: try PeerGroupID("test"),
                   addresses: addresses, port: port, metadata: PeerMetadata(), protocolVersion: 1, discovery: .dnssd)
}

/// A transport bound to 127.0.0.1 only (tests never listen on other interfaces).
func loopbackTransport() throws -> WiFiMeshLinkTransport {
    try WiFiMeshLinkTransport(options: MultipeerWiFiOptions(bindAddress: "127.0.0.1"))
}

/// Drains a transport's ``MeshLinkTransport/incomingLinks()`` into a list the test reads
/// (one consumer task per stream, as AsyncStream wants).
final class IncomingLinks: Sendable {
    private let received = LockedValue<(links: [any MessageConnection], ended: Bool)>(([], false))
    private let task: Task<Void, Never>

    init(_ transport: some MeshLinkTransport) {
        let stream = transport.incomingLinks()
        let received = self.received
        task = Task {
            for await link in stream { received.withLock { $0.links.append(link) } }
            received.withLock { $0.ended = true }
        }
    }

    deinit { task.cancel() }

    var links: [any MessageConnection] { received.withLock { $0.links } }
    var ended: Bool { received.withLock { $0.ended } }

    /// The `index`th link (0-based), waiting for it up to `timeout`; nil if it does not come.
    func link(_ index: Int, timeout: Duration = slow(.seconds(30))) async -> (any MessageConnection)? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let links = self.links
            if links.count > index { return links[index] }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let links = self.links
        return links.count > index ? links[index] : nil
    }

    /// Waits up to `timeout` for the stream to end; whether it did.
    func waitForEnd(timeout: Duration = slow(.seconds(30))) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline && !ended { try? await Task.sleep(for: .milliseconds(10)) }
        return ended
    }
}

/// The error `body` throws, as a `PeerSyncError` (nil if it returned).
func peerSyncError<T>(_ body: () async throws -> T) async -> PeerSyncError? {
    do {
        _ = try await body()
        return nil
    } catch let error as PeerSyncError {
        return error
    } catch {
        return PeerSyncError(.internalError, "not a PeerSyncError: \(error)")
    }
}
