import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncTransport

/// What the mesh's real link transports (Wi-Fi, Bluetooth) share when they dial a peer.
package enum MeshDialing {
    /// Calls `connect` with each of `peer`'s addresses in turn until one answers, and returns
    /// that link. A certificate refused by either side ends the dial at once with
    /// ``PeerSyncError/Code/certificateRejected`` (the TLS layer's reason kept, the peer and
    /// address added to the context): another address would meet the same verdict. `closed`
    /// (the transport stopped) also ends it. Otherwise throws the last address's error, or
    /// `connectionRefused` when the peer announced no address.
    package static func eachAddress(of peer: DiscoveredPeer,
                                    _ connect: (String) async throws -> any MessageConnection) async throws -> any MessageConnection {
        var lastError: any Error = PeerSyncError(.connectionRefused, "the peer announced no address",
                                                 context: ["peerID": peer.peerID.rawValue])
        for address in peer.addresses {
            do {
                return try await connect(address)
            } catch let error as PeerSyncError where error.isCertificateTrustFailure {
                var context = error.context
                context["peerID"] = peer.peerID.rawValue
                context["address"] = address
                context["port"] = "\(peer.port)"
                throw PeerSyncError(.certificateRejected, error.message, context: context)
            } catch let error as PeerSyncError where error.code == .closed {
                throw error
            } catch {
                lastError = error
            }
        }
        throw lastError
    }
}
