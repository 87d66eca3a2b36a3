import PeerSyncCore

extension PeerSyncError.Code {
    /// The TLS handshake failed for a reason other than certificate trust: no common protocol
    /// version or cipher, a malformed or unexpected message, the peer closed the connection.
    /// May be retried.
    public static let tlsHandshakeFailed = Self(rawValue: "tlsHandshakeFailed")
    /// We did not trust the peer's certificate (or the peer sent none where one is required).
    /// The reason is in ``PeerSyncError/trustFailure``. A retry will fail the same way.
    public static let untrustedCertificate = Self(rawValue: "untrustedCertificate")
    /// The peer refused our certificate (a TLS alert such as `bad_certificate`, `unknown_ca`
    /// or `certificate_required`). A retry will fail the same way.
    public static let certificateRejected = Self(rawValue: "certificateRejected")
    /// A TLS error after the handshake: a corrupt record, an alert from the peer, or the
    /// connection closed without a TLS `close_notify` (possible truncation).
    public static let tlsError = Self(rawValue: "tlsError")
    /// Bytes that should be a certificate, a private key, PEM text or a PKCS#12 file do not
    /// parse, or a key does not match its certificate.
    public static let invalidCertificate = Self(rawValue: "invalidCertificate")
    /// A password does not decrypt a PKCS#12 file or an encrypted private key.
    public static let wrongPassword = Self(rawValue: "wrongPassword")
    /// A keystore already holds an identity under this label.
    public static let identityExists = Self(rawValue: "identityExists")
    /// OpenSSL failed an operation that should not fail (key generation, signing, allocation).
    public static let cryptoFailure = Self(rawValue: "cryptoFailure")
}

/// Why a certificate (chain) was not trusted. Carried by errors with code
/// `PeerSyncError.Code.untrustedCertificate` in the context entry `reason`; read it with
/// `PeerSyncError.trustFailure`.
public enum CertificateTrustFailure: String, Sendable, Hashable, CaseIterable {
    /// The certificate's `notAfter` is in the past.
    case expired
    /// The certificate's `notBefore` is in the future.
    case notYetValid
    /// The certificate is not valid for the expected host name or IP address.
    case hostnameMismatch
    /// The chain does not lead to a trusted root (unknown or untrusted issuer).
    case unknownCA
    /// A self-signed certificate was presented where a CA-issued one is required.
    case selfSignedNotAllowed
    /// Only self-signed certificates are accepted (`.selfSignedOnly`) and this one is CA-issued.
    case caIssuedNotAllowed
    /// The pinned certificate is not in the presented chain.
    case pinMismatch
    /// The certificate's extended key usage does not allow this role (server or client auth).
    case missingKeyUsage
    /// A signature in the chain does not verify.
    case invalidSignature
    /// The peer presented no certificate although one is required.
    case noCertificate
    /// The application's certificate callback returned `false`.
    case rejectedByCallback
    /// Any other X.509 verification failure; the message has OpenSSL's description.
    case other
}

extension PeerSyncError {
    /// For ``PeerSyncError/Code/untrustedCertificate`` errors: why the certificate was not
    /// trusted. `nil` for other errors.
    public var trustFailure: CertificateTrustFailure? {
        guard code == .untrustedCertificate, let raw = context["reason"] else { return nil }
        return CertificateTrustFailure(rawValue: raw) ?? .other
    }

    /// True when the failure is about certificate trust on either side
    /// (``PeerSyncError/Code/untrustedCertificate`` or ``PeerSyncError/Code/certificateRejected``):
    /// retrying the same connection cannot succeed, so a replicator must not retry it.
    public var isCertificateTrustFailure: Bool {
        code == .untrustedCertificate || code == .certificateRejected
    }

    static func untrusted(_ reason: CertificateTrustFailure, _ message: String,
                          context: [String: String] = [:]) -> PeerSyncError {
        var ctx = context
        ctx["reason"] = reason.rawValue
        return PeerSyncError(.untrustedCertificate, message, context: ctx)
    }
}
