internal import COpenSSL
import PeerSyncCore

/// An X.509 verification result (OpenSSL's `X509_V_OK` / `X509_V_ERR_*` codes) as a Swift
/// value. Reported back to OpenSSL from the verification callback, it picks the TLS alert the
/// peer receives.
struct X509VerificationCode: Sendable, Hashable {
    let rawValue: Int32

    static let ok = Self(rawValue: X509_V_OK)
    static let unspecified = Self(rawValue: X509_V_ERR_UNSPECIFIED)
    /// "application verification failure": our own check refused the certificate.
    static let applicationVerification = Self(rawValue: X509_V_ERR_APPLICATION_VERIFICATION)
    static let certificateRejected = Self(rawValue: X509_V_ERR_CERT_REJECTED)
    static let certificateUntrusted = Self(rawValue: X509_V_ERR_CERT_UNTRUSTED)
    static let notYetValid = Self(rawValue: X509_V_ERR_CERT_NOT_YET_VALID)
    static let expired = Self(rawValue: X509_V_ERR_CERT_HAS_EXPIRED)
    static let invalidPurpose = Self(rawValue: X509_V_ERR_INVALID_PURPOSE)

    var isOK: Bool { rawValue == X509_V_OK }

    /// OpenSSL's description, e.g. `certificate has expired`.
    var text: String { String(cString: X509_verify_cert_error_string(Int(rawValue))) }

    /// Why a certificate with this verification result is not trusted.
    var trustFailure: CertificateTrustFailure {
        switch rawValue {
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

/// The name a certificate must be valid for in path validation.
enum X509ExpectedName: Sendable {
    /// A DNS host name (no partial wildcards such as `f*.example.com`).
    case host(String)
    /// A textual IPv4 or IPv6 address.
    case ipAddress(String)
}

/// X.509 path validation (`X509_verify_cert`).
enum X509PathValidation {
    /// Validates `leaf` (with the peer's other certificates `untrusted`) to one of `anchors`
    /// (each one a trust anchor, intermediates included) or, with `systemRoots`, to the system
    /// CA bundle. Checks `purpose` and `expectedName` when given, and the validity periods
    /// unless `checkTime` is false.
    /// - Returns: ``X509VerificationCode/ok`` or the first verification error.
    /// - Throws: ``PeerSyncError/Code/invalidArgument`` for an unusable IP address,
    ///   ``PeerSyncError/Code/cryptoFailure`` when OpenSSL fails to set up the check.
    static func verify(leaf: X509Handle, untrusted: [X509Handle], anchors: [X509Handle], systemRoots: Bool,
                       purpose: X509Purpose?, expectedName: X509ExpectedName?,
                       checkTime: Bool) throws(PeerSyncError) -> X509VerificationCode {
        OpenSSL.clearErrors()
        defer { OpenSSL.clearErrors() }
        let store = try TrustAnchorStore(anchors: anchors, systemRoots: systemRoots)
        let chain = try X509Stack(untrusted)
        let ctx = try OpenSSL.check(X509_STORE_CTX_new(), "X509_STORE_CTX_new")
        defer { X509_STORE_CTX_free(ctx) }
        try OpenSSL.check(X509_STORE_CTX_init(ctx, store.pointer, leaf.pointer, chain.pointer), "X509_STORE_CTX_init")
        var flags: UInt = 0
        if !systemRoots { flags |= UInt(X509_V_FLAG_PARTIAL_CHAIN) }
        if !checkTime { flags |= UInt(X509_V_FLAG_NO_CHECK_TIME) }
        X509_STORE_CTX_set_flags(ctx, flags)
        if let purpose {
            try OpenSSL.check(X509_STORE_CTX_set_purpose(ctx, purpose.openSSLValue), "X509_STORE_CTX_set_purpose")
        }
        if let expectedName {
            let param = try OpenSSL.check(X509_STORE_CTX_get0_param(ctx), "X509_STORE_CTX_get0_param")
            switch expectedName {
            case .ipAddress(let address):
                try OpenSSL.check(X509_VERIFY_PARAM_set1_ip_asc(param, address), "'\(address)' is not a valid IP address",
                                  code: .invalidArgument)
            case .host(let host):
                X509_VERIFY_PARAM_set_hostflags(param, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
                try OpenSSL.check(X509_VERIFY_PARAM_set1_host(param, host, 0), "X509_VERIFY_PARAM_set1_host")
            }
        }
        if X509_verify_cert(ctx) == 1 { return .ok }
        return X509VerificationCode(rawValue: X509_STORE_CTX_get_error(ctx))
    }
}

/// An owned `X509_STORE` of trust anchors, freed in `deinit`. Used by one validation only.
private final class TrustAnchorStore {
    let pointer: OpaquePointer

    init(anchors: [X509Handle], systemRoots: Bool) throws(PeerSyncError) {
        pointer = try OpenSSL.check(X509_STORE_new(), "X509_STORE_new")
        if systemRoots {
            try OpenSSL.check(X509_STORE_set_default_paths(pointer), "cannot load the system CA certificates")
        }
        for anchor in anchors {
            try OpenSSL.check(X509_STORE_add_cert(pointer, anchor.pointer), "X509_STORE_add_cert")
        }
    }

    deinit { X509_STORE_free(pointer) }
}
