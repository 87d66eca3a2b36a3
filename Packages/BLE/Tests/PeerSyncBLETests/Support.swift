import Foundation
import PeerSyncAuth
import PeerSyncBLE
import PeerSyncCore
import PeerSyncTransport
import PeerSyncWebSocket

/// One self-signed identity for every TLS test of the target (made once: key generation is slow).
enum TestIdentity {
    private static let cache = LockedValue<TLSIdentity?>(nil)

    static func shared() throws -> TLSIdentity {
        try cache.withLock { cached in
            if let cached { return cached }
            let identity = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth],
                                                          attributes: [certAttrCommonName: "PeerSync BLE test"])
            cached = identity
            return identity
        }
    }

    /// Listen and connect options running TLS with the shared identity, the client pinning it.
    static func options() throws -> (BLEListenOptions, BLEConnectOptions) {
        let identity = try shared()
        var listen = BLEListenOptions()
        listen.tls = .server(identity: identity)
        var connect = BLEConnectOptions()
        connect.tls = .client(serverName: nil, serverTrust: .pinned(identity.certificate))
        return (listen, connect)
    }
}

/// Drops a BLE connection without a close handshake (the conformance suite's "peer vanishes").
@Sendable func abortBLE(_ connection: any MessageConnection) async {
    await (connection as? WebSocketConnection)?.abort()
}

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it), 1 otherwise.
let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline that assumes full speed, stretched by ``slowFactor``.
func slow(_ duration: Duration) -> Duration { duration * slowFactor }
