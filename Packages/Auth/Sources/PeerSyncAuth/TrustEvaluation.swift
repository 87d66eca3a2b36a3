internal import COpenSSL
import Foundation
import PeerSyncCore

/// What to check about a peer's chain.
enum TrustMode: Sendable {
    /// We are the client; the peer is a server.
    case server(ServerTrust, hostname: String?)
    /// We are the server; the peer is a client.
    case client(ClientCertificateValidation)
}

/// The outcome of a trust evaluation: `nil` failure means trusted.
struct TrustOutcome {
    var failure: PeerSyncError?
    /// The X.509 error code to report to OpenSSL (it picks the TLS alert from it).
    var x509Error: Int32
}

/// Our trust decisions, implemented with OpenSSL's X.509 verification. Pure functions of
/// their inputs; every pointer is borrowed for the duration of the call.
enum TrustEvaluator {
    /// Evaluates `chain` (leaf first; `leaf` and `untrusted` are the same certificates as
    /// OpenSSL handles).
    static func evaluate(chain: [Certificate], leaf: OpaquePointer, untrusted: OpaquePointer?,
                         mode: TrustMode) -> TrustOutcome {
        defer { OpenSSL.clearErrors() }
        guard let leafCert = chain.first else {
            return fail(.noCertificate, "the peer presented no certificate", X509_V_ERR_APPLICATION_VERIFICATION)
        }
        switch mode {
        case .server(.pinned(let pin), _):
            guard let index = chain.firstIndex(of: pin) else {
                return fail(.pinMismatch, "the server's certificate chain does not contain the pinned certificate",
                            X509_V_ERR_CERT_REJECTED, leafCert)
            }
            if index == 0 { return TrustOutcome(failure: nil, x509Error: X509_V_OK) }
            // The pin is an issuer in the chain: the leaf must chain up to it by signature.
            let result = verifyPath(leaf: leaf, untrusted: untrusted, anchors: [pin], system: false,
                                    purpose: nil, hostname: nil, checkTime: false)
            if result.failure == nil { return result }
            return fail(.pinMismatch, "the server's certificate does not chain to the pinned certificate",
                        X509_V_ERR_CERT_REJECTED, leafCert)

        case .server(.selfSignedOnly, _):
            guard leafCert.isSelfSigned else {
                return fail(.caIssuedNotAllowed,
                            "only self-signed server certificates are accepted and this one is CA-issued",
                            X509_V_ERR_CERT_UNTRUSTED, leafCert)
            }
            let now = Date()
            if now < leafCert.notBefore {
                return fail(.notYetValid, "the server's certificate is not valid yet", X509_V_ERR_CERT_NOT_YET_VALID, leafCert)
            }
            if now > leafCert.notAfter {
                return fail(.expired, "the server's certificate has expired", X509_V_ERR_CERT_HAS_EXPIRED, leafCert)
            }
            guard X509_check_purpose(leaf, X509_PURPOSE_SSL_SERVER, 0) == 1 else {
                return fail(.missingKeyUsage, "the server's certificate does not allow TLS server authentication",
                            X509_V_ERR_INVALID_PURPOSE, leafCert)
            }
            return TrustOutcome(failure: nil, x509Error: X509_V_OK)

        case .server(.roots(let roots), let hostname):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: roots, system: false,
                              purpose: X509_PURPOSE_SSL_SERVER, hostname: hostname, checkTime: true, leafCert: leafCert)

        case .server(.systemRoots, let hostname):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: [], system: true,
                              purpose: X509_PURPOSE_SSL_SERVER, hostname: hostname, checkTime: true, leafCert: leafCert)

        case .client(.roots(let roots)):
            return verifyPath(leaf: leaf, untrusted: untrusted, anchors: roots, system: false,
                              purpose: X509_PURPOSE_SSL_CLIENT, hostname: nil, checkTime: true, leafCert: leafCert)

        case .client(.callback(let accept)):
            if accept(chain) { return TrustOutcome(failure: nil, x509Error: X509_V_OK) }
            return fail(.rejectedByCallback, "the certificate callback rejected the client's certificate",
                        X509_V_ERR_CERT_REJECTED, leafCert)
        }
    }

    private static func fail(_ reason: CertificateTrustFailure, _ message: String, _ x509Error: Int32,
                             _ leaf: Certificate? = nil) -> TrustOutcome {
        var context: [String: String] = [:]
        if let leaf {
            context["subject"] = leaf.subjectName
            context["peerID"] = leaf.peerID
        }
        return TrustOutcome(failure: .untrusted(reason, message, context: context), x509Error: x509Error)
    }

    /// X.509 path validation with `X509_verify_cert`.
    private static func verifyPath(leaf: OpaquePointer, untrusted: OpaquePointer?, anchors: [Certificate],
                                   system: Bool, purpose: Int32?, hostname: String?, checkTime: Bool,
                                   leafCert: Certificate? = nil) -> TrustOutcome {
        do {
            let store = try TrustStore(anchors: anchors, system: system)
            let ctx = try OpenSSL.check(X509_STORE_CTX_new(), "X509_STORE_CTX_new")
            defer { X509_STORE_CTX_free(ctx) }
            try OpenSSL.check(X509_STORE_CTX_init(ctx, store.pointer, leaf, untrusted), "X509_STORE_CTX_init")
            var flags: UInt = 0
            if !system { flags |= UInt(X509_V_FLAG_PARTIAL_CHAIN) }
            if !checkTime { flags |= UInt(X509_V_FLAG_NO_CHECK_TIME) }
            X509_STORE_CTX_set_flags(ctx, flags)
            if let purpose {
                try OpenSSL.check(X509_STORE_CTX_set_purpose(ctx, purpose), "X509_STORE_CTX_set_purpose")
            }
            if let hostname {
                let param = try OpenSSL.check(X509_STORE_CTX_get0_param(ctx), "X509_STORE_CTX_get0_param")
                var host = hostname
                if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
                if IPAddress.isLiteral(host) {
                    try OpenSSL.check(X509_VERIFY_PARAM_set1_ip_asc(param, host), "'\(host)' is not a valid IP address",
                                      code: .invalidArgument)
                } else {
                    X509_VERIFY_PARAM_set_hostflags(param, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
                    try OpenSSL.check(X509_VERIFY_PARAM_set1_host(param, host, 0), "X509_VERIFY_PARAM_set1_host")
                }
            }
            if X509_verify_cert(ctx) == 1 { return TrustOutcome(failure: nil, x509Error: X509_V_OK) }
            let code = X509_STORE_CTX_get_error(ctx)
            let text = String(cString: X509_verify_cert_error_string(Int(code)))
            let reason = reason(forX509Error: code)
            var outcome = fail(reason, "certificate verification failed: \(text)", code, leafCert)
            outcome.failure = outcome.failure?.with("x509", text)
            return outcome
        } catch {
            return TrustOutcome(failure: error, x509Error: X509_V_ERR_UNSPECIFIED)
        }
    }

    static func reason(forX509Error code: Int32) -> CertificateTrustFailure {
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED: return .expired
        case X509_V_ERR_CERT_NOT_YET_VALID: return .notYetValid
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH, X509_V_ERR_EMAIL_MISMATCH:
            return .hostnameMismatch
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT: return .selfSignedNotAllowed
        case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
             X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE,
             X509_V_ERR_CERT_UNTRUSTED, X509_V_ERR_CERT_REJECTED, X509_V_ERR_INVALID_CA:
            return .unknownCA
        case X509_V_ERR_INVALID_PURPOSE: return .missingKeyUsage
        case X509_V_ERR_CERT_SIGNATURE_FAILURE, X509_V_ERR_UNABLE_TO_DECRYPT_CERT_SIGNATURE,
             X509_V_ERR_UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY:
            return .invalidSignature
        default: return .other
        }
    }
}

/// An owned `X509_STORE` of trust anchors, freed in `deinit`. Used by one evaluation only.
private final class TrustStore {
    let pointer: OpaquePointer

    init(anchors: [Certificate], system: Bool) throws(PeerSyncError) {
        pointer = try OpenSSL.check(X509_STORE_new(), "X509_STORE_new")
        if system {
            try OpenSSL.check(X509_STORE_set_default_paths(pointer), "cannot load the system CA certificates")
        }
        for anchor in anchors {
            let handle = try anchor.handle()
            try OpenSSL.check(X509_STORE_add_cert(pointer, handle.pointer), "X509_STORE_add_cert")
        }
    }

    deinit { X509_STORE_free(pointer) }
}

/// Per-connection state shared with OpenSSL's certificate-verification callback: the trust
/// mode going in, the peer's chain and our verdict coming out.
final class TrustSession: Sendable {
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
    func noteCertificateRequested() { requested.withLock { $0 = true } }

    /// Called by OpenSSL during the handshake (via ``certificateVerifyCallback``).
    func verify(_ storeContext: OpaquePointer) -> Int32 {
        guard let leaf = X509_STORE_CTX_get0_cert(storeContext) else {
            let failure = PeerSyncError.untrusted(.noCertificate, "the peer presented no certificate")
            record.withLock { $0.failure = failure }
            X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
            return 0
        }
        let untrusted = X509_STORE_CTX_get0_untrusted(storeContext)
        var chain: [Certificate] = []
        do {
            let leafCert = try Certificate(handle: X509Handle(retaining: leaf))
            chain.append(leafCert)
            for handle in X509Stack.handles(of: untrusted) {
                let cert = try Certificate(handle: handle)
                if !chain.contains(cert) { chain.append(cert) }
            }
        } catch {
            let failure = PeerSyncError.untrusted(.other, "the peer's certificate cannot be parsed: \(error.message)")
            record.withLock { $0.failure = failure }
            X509_STORE_CTX_set_error(storeContext, X509_V_ERR_UNSPECIFIED)
            return 0
        }
        let outcome = TrustEvaluator.evaluate(chain: chain, leaf: leaf, untrusted: untrusted, mode: mode)
        record.withLock { $0 = (chain, outcome.failure) }
        X509_STORE_CTX_set_error(storeContext, outcome.x509Error)
        return outcome.failure == nil ? 1 : 0
    }
}

/// OpenSSL's `SSL_CTX_set_cert_verify_callback` hook: finds the connection's
/// ``TrustSession`` through the SSL object's app data (ex_data index 0) and lets it decide.
/// A file-scope function (no captures), as C callbacks must be.
func certificateVerifyCallback(_ storeContext: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
    guard let storeContext else { return 0 }
    guard let ssl = X509_STORE_CTX_get_ex_data(storeContext, SSL_get_ex_data_X509_STORE_CTX_idx()),
          let sessionPointer = SSL_get_ex_data(OpaquePointer(ssl), 0) else {
        X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
        return 0
    }
    return Unmanaged<TrustSession>.fromOpaque(sessionPointer).takeUnretainedValue().verify(storeContext)
}

/// OpenSSL's `SSL_CTX_set_client_cert_cb` hook, installed on clients without an identity:
/// it is called only when the server requests a certificate. It notes the request (so a
/// TLS 1.2 `handshake_failure` alert can be explained) and supplies no certificate.
func clientCertificateRequestedCallback(_ ssl: OpaquePointer?, _ certificate: UnsafeMutablePointer<OpaquePointer?>?,
                                        _ key: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    if let ssl, let sessionPointer = SSL_get_ex_data(ssl, 0) {
        Unmanaged<TrustSession>.fromOpaque(sessionPointer).takeUnretainedValue().noteCertificateRequested()
    }
    return 0
}
