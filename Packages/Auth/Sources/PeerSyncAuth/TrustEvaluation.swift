import Foundation
import PeerSyncCore

/// What to check about a peer's chain.
enum TrustMode: Sendable {
    /// We are the client; the peer is a server.
    case server(ServerTrust, hostname: String?)
    /// We are the client; the application decides about the server's chain
    /// (``TLSConfiguration/serverCertificateCallback``).
    case serverCallback(@Sendable ([Certificate]) -> Bool)
    /// We are the server; the peer is a client.
    case client(ClientCertificateValidation)
}

/// The outcome of a trust evaluation: `nil` failure means trusted.
struct TrustOutcome {
    var failure: PeerSyncError?
    /// The verification code to report to OpenSSL (it picks the TLS alert from it).
    var x509Error: X509VerificationCode
}

/// Our trust decisions, built on X.509 path validation (``X509PathValidation``). Pure
/// functions of their inputs.
enum TrustEvaluator {
    /// Evaluates `chain` (leaf first; `leaf` and `untrusted` are the same certificates as
    /// OpenSSL handles, `untrusted` being everything the peer sent).
    static func evaluate(chain: [Certificate], leaf: X509Handle, untrusted: [X509Handle],
                         mode: TrustMode) -> TrustOutcome {
        guard let leafCert = chain.first else {
            return fail(.noCertificate, "the peer presented no certificate", .applicationVerification)
        }
        switch mode {
        case .server(.pinned(let pin), _):
            guard let index = chain.firstIndex(of: pin) else {
                return fail(.pinMismatch, "the server's certificate chain does not contain the pinned certificate",
                            .certificateRejected, leafCert)
            }
            if index == 0 { return TrustOutcome(failure: nil, x509Error: .ok) }
            // The pin is an issuer in the chain: the leaf must chain up to it by signature.
            let result = verifyPath(leaf: leaf, untrusted: untrusted, anchors: [pin], system: false,
                                    purpose: nil, hostname: nil, checkTime: false)
            if result.failure == nil { return result }
            return fail(.pinMismatch, "the server's certificate does not chain to the pinned certificate",
                        .certificateRejected, leafCert)

        case .server(.selfSignedOnly, _):
            guard leafCert.isSelfSigned else {
                return fail(.caIssuedNotAllowed,
                            "only self-signed server certificates are accepted and this one is CA-issued",
                            .certificateUntrusted, leafCert)
            }
            let now = Date()
            if now < leafCert.notBefore {
                return fail(.notYetValid, "the server's certificate is not valid yet", .notYetValid, leafCert)
            }
            if now > leafCert.notAfter {
                return fail(.expired, "the server's certificate has expired", .expired, leafCert)
            }
            guard leaf.allows(.tlsServer) else {
                return fail(.missingKeyUsage, "the server's certificate does not allow TLS server authentication",
                            .invalidPurpose, leafCert)
            }
            return TrustOutcome(failure: nil, x509Error: .ok)

        case .server(.roots(let roots), let hostname):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: roots, system: false,
                              purpose: .tlsServer, hostname: hostname, checkTime: true, leafCert: leafCert)

        case .server(.systemRoots, let hostname):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: [], system: true,
                              purpose: .tlsServer, hostname: hostname, checkTime: true, leafCert: leafCert)

        case .client(.roots(let roots)):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: roots, system: false,
                              purpose: .tlsClient, hostname: nil, checkTime: true, leafCert: leafCert)

        case .serverCallback(let accept):
            if accept(chain) { return TrustOutcome(failure: nil, x509Error: .ok) }
            return fail(.rejectedByCallback, "the certificate callback rejected the server's certificate",
                        .certificateRejected, leafCert)

        case .client(.callback(let accept)):
            if accept(chain) { return TrustOutcome(failure: nil, x509Error: .ok) }
            return fail(.rejectedByCallback, "the certificate callback rejected the client's certificate",
                        .certificateRejected, leafCert)
        }
    }

    private static func fail(_ reason: CertificateTrustFailure, _ message: String, _ x509Error: X509VerificationCode,
                             _ leaf: Certificate? = nil) -> TrustOutcome {
        var context: [String: String] = [:]
        if let leaf {
            context["subject"] = leaf.subjectName
            context["peerID"] = leaf.peerID
        }
        return TrustOutcome(failure: .untrusted(reason, message, context: context), x509Error: x509Error)
    }

    /// X.509 path validation to `anchors` (or the system roots).
    private static func verifyPath(leaf: X509Handle, untrusted: [X509Handle], anchors: [Certificate],
                                   system: Bool, purpose: X509Purpose?, hostname: String?, checkTime: Bool,
                                   leafCert: Certificate? = nil) -> TrustOutcome {
        do {
            var anchorHandles: [X509Handle] = []
            for anchor in anchors { anchorHandles.append(try anchor.handle()) }
            var expectedName: X509ExpectedName? = nil
            if var host = hostname {
                if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
                expectedName = IPAddress.isLiteral(host) ? .ipAddress(host) : .host(host)
            }
            let code = try X509PathValidation.verify(leaf: leaf, untrusted: untrusted, anchors: anchorHandles,
                                                     systemRoots: system, purpose: purpose,
                                                     expectedName: expectedName, checkTime: checkTime)
            if code.isOK { return TrustOutcome(failure: nil, x509Error: .ok) }
            let text = code.text
            var outcome = fail(code.trustFailure, "certificate verification failed: \(text)", code, leafCert)
            outcome.failure = outcome.failure?.with("x509", text)
            return outcome
        } catch {
            return TrustOutcome(failure: error, x509Error: .unspecified)
        }
    }
}

/// Per-connection state shared with OpenSSL's certificate-verification callback: the trust
/// mode going in, the peer's chain and our verdict coming out.
final class TrustSession: TLSHandshakeDelegate {
    let mode: TrustMode
    private let record = LockedValue<(chain: [Certificate], failure: PeerSyncError?)>(([], nil))
    private let requested = LockedValue(false)

    init(mode: TrustMode) { self.mode = mode }

    /// The peer's chain as presented (leaf first); empty before verification.
    var peerChain: [Certificate] { record.withLock { $0.chain } }
    /// Our rejection, if we rejected the peer.
    var failure: PeerSyncError? { record.withLock { $0.failure } }

    /// Client side: whether the server asked for a client certificate we do not have.
    var certificateRequestedButMissing: Bool { requested.withLock { $0 } }
    func serverRequestedClientCertificate() { requested.withLock { $0 = true } }

    /// Called by OpenSSL during the handshake (see ``TLSHandshakeDelegate``).
    func verifyPeer(leaf: X509Handle?, presented: [X509Handle]) -> X509VerificationCode {
        guard let leaf else {
            let failure = PeerSyncError.untrusted(.noCertificate, "the peer presented no certificate")
            record.withLock { $0.failure = failure }
            return .applicationVerification
        }
        var chain: [Certificate] = []
        do {
            chain.append(try Certificate(handle: leaf))
            for handle in presented {
                let cert = try Certificate(handle: handle)
                if !chain.contains(cert) { chain.append(cert) }
            }
        } catch {
            let failure = PeerSyncError.untrusted(.other, "the peer's certificate cannot be parsed: \(error.message)")
            record.withLock { $0.failure = failure }
            return .unspecified
        }
        let outcome = TrustEvaluator.evaluate(chain: chain, leaf: leaf, untrusted: presented, mode: mode)
        record.withLock { $0 = (chain, outcome.failure) }
        return outcome.x509Error
    }
}
