internal import COpenSSL
import Foundation
import PeerSyncCore

/// A new certificate being filled in, then signed: the OpenSSL steps of
/// ``TLSIdentity/createIdentity(for:attributes:expiration:issuer:notBefore:keyType:)``.
///
/// Used by one thread for one certificate: no lock. Each method throws
/// ``PeerSyncError/Code/cryptoFailure`` when OpenSSL fails, except where it says otherwise.
final class X509Builder {
    /// The certificate under construction (version 3); handed out only by ``sign(with:)``.
    private let certificate: X509Handle
    /// The issuer's certificate, or nil while the certificate is its own issuer.
    private var issuer: X509Handle?

    init() throws(PeerSyncError) {
        OpenSSL.clearErrors()
        certificate = X509Handle(owning: try OpenSSL.check(X509_new(), "X509_new"))
        try OpenSSL.check(X509_set_version(certificate.pointer, 2), "X509_set_version")
    }

    /// Sets the serial number from big-endian bytes (the caller makes it positive).
    func setSerialNumber(_ bytes: [UInt8]) throws(PeerSyncError) {
        let bn = try OpenSSL.check(BN_bin2bn(bytes, Int32(bytes.count), nil), "BN_bin2bn")
        defer { BN_free(bn) }
        let serial = try OpenSSL.check(BN_to_ASN1_INTEGER(bn, nil), "BN_to_ASN1_INTEGER")
        defer { ASN1_INTEGER_free(serial) }
        try OpenSSL.check(X509_set_serialNumber(certificate.pointer, serial), "X509_set_serialNumber")
    }

    /// Sets the validity period (whole seconds).
    func setValidity(notBefore: Date, notAfter: Date) throws(PeerSyncError) {
        try OpenSSL.check(ASN1_TIME_set(X509_getm_notBefore(certificate.pointer), time_t(notBefore.timeIntervalSince1970)),
                          "ASN1_TIME_set(notBefore)")
        try OpenSSL.check(ASN1_TIME_set(X509_getm_notAfter(certificate.pointer), time_t(notAfter.timeIntervalSince1970)),
                          "ASN1_TIME_set(notAfter)")
    }

    /// Appends `field=value` (UTF-8) to the subject name. `field` is OpenSSL's short name
    /// (`CN`, `O`, `postalCode`, ...); `attribute` names the input in the error.
    /// - Throws: ``PeerSyncError/Code/invalidArgument`` when OpenSSL refuses the value
    ///   (e.g. a character the field's string type cannot hold).
    func addSubjectEntry(field: String, value: String, attribute: String) throws(PeerSyncError) {
        let name = try OpenSSL.check(X509_get_subject_name(certificate.pointer), "X509_get_subject_name")
        let bytes = Array(value.utf8)
        try OpenSSL.check(X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0),
                          "certificate attribute '\(attribute)' is not valid", code: .invalidArgument)
    }

    /// Puts the public half of `key` into the certificate.
    func setPublicKey(_ key: PrivateKey) throws(PeerSyncError) {
        try OpenSSL.check(X509_set_pubkey(certificate.pointer, key.pointer), "X509_set_pubkey")
    }

    /// Sets the issuer name from `issuer`'s subject, or from the certificate's own subject when
    /// `issuer` is nil (self-signed). Call after the subject entries; extensions added later
    /// refer to this issuer (authority key identifier).
    func setIssuer(_ issuer: X509Handle?) throws(PeerSyncError) {
        self.issuer = issuer
        let source = issuer?.pointer ?? certificate.pointer
        try OpenSSL.check(X509_set_issuer_name(certificate.pointer, X509_get_subject_name(source)), "X509_set_issuer_name")
    }

    /// Adds an extension written in OpenSSL's configuration syntax (`critical,CA:TRUE`,
    /// `serverAuth,clientAuth`, `DNS:host,IP:10.0.0.1`, `hash`, `keyid:always`, ...).
    /// - Throws: ``PeerSyncError/Code/invalidArgument`` when OpenSSL cannot parse `value`.
    func addExtension(_ kind: X509ExtensionKind, _ value: String) throws(PeerSyncError) {
        let issuerPointer = issuer?.pointer ?? certificate.pointer
        let ext = try OpenSSL.check(peersync_X509V3_ext(issuerPointer, certificate.pointer, kind.nid, value),
                                    "certificate extension '\(value)' is not valid", code: .invalidArgument)
        defer { X509_EXTENSION_free(ext) }
        try OpenSSL.check(X509_add_ext(certificate.pointer, ext, -1), "X509_add_ext")
    }

    /// Signs the certificate with SHA-256 and `key` (the issuer's key, or the certificate's own
    /// for a self-signed one) and returns it. The builder must not be used afterwards.
    func sign(with key: PrivateKey) throws(PeerSyncError) -> X509Handle {
        try OpenSSL.check(X509_sign(certificate.pointer, key.pointer, EVP_sha256()), "X509_sign", succeeded: { $0 > 0 })
        return certificate
    }
}

/// The X.509 v3 extensions PeerSync puts in the certificates it creates.
enum X509ExtensionKind: Sendable {
    case basicConstraints
    case keyUsage
    case extendedKeyUsage
    case subjectKeyIdentifier
    case authorityKeyIdentifier
    case subjectAlternativeName

    fileprivate var nid: Int32 {
        switch self {
        case .basicConstraints: return NID_basic_constraints
        case .keyUsage: return NID_key_usage
        case .extendedKeyUsage: return NID_ext_key_usage
        case .subjectKeyIdentifier: return NID_subject_key_identifier
        case .authorityKeyIdentifier: return NID_authority_key_identifier
        case .subjectAlternativeName: return NID_subject_alt_name
        }
    }
}
