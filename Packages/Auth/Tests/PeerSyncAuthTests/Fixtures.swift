import Foundation
import PeerSyncAuth
import PeerSyncCore

/// Certificates for the trust matrix, created once per test process.
struct Fixtures: Sendable {
    static let shared = Result { () throws(PeerSyncError) in try Fixtures() }
    static func get() throws -> Fixtures { try shared.get() }

    let root: TLSIdentity          // the trusted CA
    let otherRoot: TLSIdentity     // a CA nobody trusts
    let unrelated: TLSIdentity     // a self-signed certificate that appears in no chain

    // Server identities (host "localhost").
    let valid: TLSIdentity
    let expired: TLSIdentity
    let notYetValid: TLSIdentity
    let wrongHost: TLSIdentity
    let untrustedCA: TLSIdentity
    let selfSigned: TLSIdentity
    let selfSignedExpired: TLSIdentity
    let selfSignedWrongHost: TLSIdentity
    let noServerUsage: TLSIdentity
    let validIP: TLSIdentity

    // Client identities.
    let client: TLSIdentity
    let clientServerOnly: TLSIdentity
    let clientUntrusted: TLSIdentity
    let clientExpired: TLSIdentity
    let clientSelfSigned: TLSIdentity

    init() throws(PeerSyncError) {
        let day: TimeInterval = 86400
        let past = Date(timeIntervalSinceNow: -30 * day), yesterday = Date(timeIntervalSinceNow: -day)
        let tomorrow = Date(timeIntervalSinceNow: day), later = Date(timeIntervalSinceNow: 30 * day)
        func attrs(_ cn: String, host: String? = "localhost") -> [String: String] {
            var a = [certAttrCommonName: cn, certAttrOrganization: "PeerSync Tests"]
            if let host { a[certAttrHostname] = host }
            return a
        }
        root = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Test Root CA"])
        otherRoot = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Other Root CA"])
        unrelated = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("unrelated"))

        valid = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("valid"), issuer: root)
        expired = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("expired"), expiration: yesterday,
                                                 issuer: root, notBefore: past)
        notYetValid = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("not-yet-valid"),
                                                     expiration: later, issuer: root, notBefore: tomorrow)
        wrongHost = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("wrong-host", host: "other.example"),
                                                   issuer: root)
        untrustedCA = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("untrusted"), issuer: otherRoot)
        selfSigned = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth], attributes: attrs("self-signed"))
        selfSignedExpired = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("self-signed-expired"),
                                                           expiration: yesterday, notBefore: past)
        selfSignedWrongHost = try TLSIdentity.createIdentity(for: .serverAuth,
                                                             attributes: attrs("self-signed-wrong-host", host: "other.example"))
        noServerUsage = try TLSIdentity.createIdentity(for: .clientAuth, attributes: attrs("client-usage-only"), issuer: root)
        validIP = try TLSIdentity.createIdentity(for: .serverAuth,
                                                 attributes: [certAttrCommonName: "ip", certAttrIPAddress: "127.0.0.1"],
                                                 issuer: root)

        client = try TLSIdentity.createIdentity(for: .clientAuth, attributes: attrs("client", host: nil), issuer: root)
        clientServerOnly = try TLSIdentity.createIdentity(for: .serverAuth, attributes: attrs("client-server-only", host: nil),
                                                          issuer: root)
        clientUntrusted = try TLSIdentity.createIdentity(for: .clientAuth, attributes: attrs("client-untrusted", host: nil),
                                                         issuer: otherRoot)
        clientExpired = try TLSIdentity.createIdentity(for: .clientAuth, attributes: attrs("client-expired", host: nil),
                                                       expiration: yesterday, issuer: root, notBefore: past)
        clientSelfSigned = try TLSIdentity.createIdentity(for: .clientAuth, attributes: attrs("client-self-signed", host: nil))
    }
}
