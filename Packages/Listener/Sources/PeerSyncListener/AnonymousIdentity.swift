import Foundation
import PeerSyncAuth
import PeerSyncCore

/// The self-signed identity a TLS listener without a configured identity presents, as
/// Couchbase Lite's listener does: created on first use, saved in the database folder
/// (`<db>.peersync/listener-identity/`, key encrypted as in `TLSKeyStore`) and reused while
/// valid, so clients that pinned it keep trusting it across restarts.
enum AnonymousIdentity {
    static let label = "anonymous"
    /// Renew when less than this is left.
    static let renewalMargin: TimeInterval = 24 * 3600

    static func loadOrCreate(databasePath: String) throws -> TLSIdentity {
        let store = TLSKeyStore(directory: URL(fileURLWithPath: databasePath).appendingPathComponent("listener-identity").path)
        if let existing = try? store.identity(withLabel: label),
           existing.expiration.timeIntervalSinceNow > renewalMargin {
            return existing
        }
        let host = ProcessInfo.processInfo.hostName
        let identity = try TLSIdentity.createIdentity(
            for: [.serverAuth],
            attributes: [certAttrCommonName: "PeerSync listener \(host.isEmpty ? "anonymous" : host)"])
        try store.save(identity, label: label, overwrite: true)
        return identity
    }
}
