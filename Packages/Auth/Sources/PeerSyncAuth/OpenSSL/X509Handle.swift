internal import COpenSSL
import Foundation
import PeerSyncCore

/// An owned `X509*` (a parsed certificate), freed in `deinit`, with the reads
/// ``Certificate`` needs.
///
/// Not protected by a lock: it is never mutated after construction (``X509Builder`` fills a
/// new one before handing it out), and OpenSSL documents concurrent read-only use of an
/// `X509` (verification, encoding, use in several `SSL_CTX`) as thread-safe (extension
/// caching inside is locked by OpenSSL itself).
final class X509Handle: @unchecked Sendable {
    let pointer: OpaquePointer

    /// Takes ownership of `pointer` (one reference).
    init(owning pointer: OpaquePointer) { self.pointer = pointer }

    /// Takes a new reference on a borrowed pointer.
    init(retaining pointer: OpaquePointer) {
        X509_up_ref(pointer)
        self.pointer = pointer
    }

    /// Parses DER; throws ``PeerSyncError/Code/invalidCertificate``.
    convenience init(der: [UInt8]) throws(PeerSyncError) {
        guard !der.isEmpty, der.count < Int(Int32.max) else {
            throw PeerSyncError(.invalidCertificate, "certificate DER is empty or too large")
        }
        OpenSSL.clearErrors()
        var consumed = 0
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let x = d2i_X509(nil, &cursor, buffer.count)
            if let cursor, let base = buffer.baseAddress { consumed = cursor - base }
            return x
        }
        let x = try OpenSSL.check(parsed, "not a DER X.509 certificate", code: .invalidCertificate)
        guard consumed == der.count else {
            X509_free(x)
            throw PeerSyncError(.invalidCertificate, "trailing bytes after the DER certificate")
        }
        self.init(owning: x)
    }

    deinit { X509_free(pointer) }

    /// The DER encoding.
    var der: [UInt8] {
        let length = i2d_X509(pointer, nil)
        guard length > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(length))
        out.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_X509(pointer, &cursor)
        }
        return out
    }

    // MARK: Names

    /// The subject as an RFC 2253 string (UTF-8 kept as is).
    func subjectName() throws(PeerSyncError) -> String { try X509Handle.rfc2253(X509_get_subject_name(pointer)) }
    /// The issuer as an RFC 2253 string.
    func issuerName() throws(PeerSyncError) -> String { try X509Handle.rfc2253(X509_get_issuer_name(pointer)) }
    /// The subject's common name (CN), if any.
    var subjectCommonName: String? { X509Handle.commonName(X509_get_subject_name(pointer)) }
    /// The issuer's common name (CN), if any.
    var issuerCommonName: String? { X509Handle.commonName(X509_get_issuer_name(pointer)) }

    private static func rfc2253(_ name: OpaquePointer?) throws(PeerSyncError) -> String {
        guard let name else { return "" }
        let bio = try MemoryBIO()
        let rc = X509_NAME_print_ex(bio.pointer, name, 0, peersync_XN_FLAG_RFC2253_UTF8())
        try OpenSSL.check(rc, "X509_NAME_print_ex", code: .invalidCertificate, succeeded: { $0 >= 0 })
        return String(decoding: bio.readAll(), as: UTF8.self)
    }

    private static func commonName(_ name: OpaquePointer?) -> String? {
        guard let name else { return nil }
        let index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index),
              let data = X509_NAME_ENTRY_get_data(entry) else { return nil }
        return utf8String(UnsafePointer(data))
    }

    /// Converts any ASN.1 string type to Swift (nil on failure).
    private static func utf8String(_ string: UnsafePointer<ASN1_STRING>) -> String? {
        var out: UnsafeMutablePointer<UInt8>? = nil
        let length = ASN1_STRING_to_UTF8(&out, string)
        guard length >= 0, let out else { OpenSSL.clearErrors(); return nil }
        defer { peersync_OPENSSL_free(out) }
        return String(decoding: UnsafeBufferPointer(start: out, count: Int(length)), as: UTF8.self)
    }

    // MARK: Validity and serial number

    /// Start of the validity period; throws ``PeerSyncError/Code/invalidCertificate``.
    func notBefore() throws(PeerSyncError) -> Date { try X509Handle.date(X509_get0_notBefore(pointer), "notBefore") }
    /// End of the validity period; throws ``PeerSyncError/Code/invalidCertificate``.
    func notAfter() throws(PeerSyncError) -> Date { try X509Handle.date(X509_get0_notAfter(pointer), "notAfter") }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?, _ field: String) throws(PeerSyncError) -> Date {
        OpenSSL.clearErrors()
        var tm = tm()
        guard let time, ASN1_TIME_to_tm(time, &tm) == 1 else {
            throw OpenSSL.error(.invalidCertificate, "the certificate's \(field) time is malformed")
        }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tm)))
    }

    /// The serial number as uppercase hexadecimal ("" when absent).
    func serialNumberHex() throws(PeerSyncError) -> String {
        guard let integer = X509_get0_serialNumber(pointer) else { return "" }
        OpenSSL.clearErrors()
        let bn = try OpenSSL.check(ASN1_INTEGER_to_BN(integer, nil), "ASN1_INTEGER_to_BN", code: .invalidCertificate)
        defer { BN_free(bn) }
        let hex = try OpenSSL.check(BN_bn2hex(bn), "BN_bn2hex")
        defer { peersync_OPENSSL_free(hex) }
        return String(cString: hex)
    }

    // MARK: Extensions

    /// Subject alternative names of the kinds ``SubjectAlternativeName`` has; others are skipped.
    var subjectAlternativeNames: [SubjectAlternativeName] {
        guard let names = peersync_X509_get_subject_alt_names(pointer) else { OpenSSL.clearErrors(); return [] }
        defer { peersync_GENERAL_NAMES_free(names) }
        let stack = OpaquePointer(names)
        var out: [SubjectAlternativeName] = []
        for i in 0..<peersync_sk_GENERAL_NAME_num(stack) {
            guard let name = peersync_sk_GENERAL_NAME_value(stack, i),
                  let string = peersync_GENERAL_NAME_string(name) else { continue }
            let length = Int(ASN1_STRING_length(string))
            guard length >= 0, let data = ASN1_STRING_get0_data(string) else { continue }
            let bytes = Array(UnsafeBufferPointer(start: data, count: length))
            switch peersync_GENERAL_NAME_type(name) {
            case GEN_DNS: out.append(.dnsName(String(decoding: bytes, as: UTF8.self)))
            case GEN_EMAIL: out.append(.email(String(decoding: bytes, as: UTF8.self)))
            case GEN_URI: out.append(.uri(String(decoding: bytes, as: UTF8.self)))
            case GEN_IPADD:
                if let text = IPAddress.text(bytes) { out.append(.ipAddress(text)) }
            default: break
            }
        }
        return out
    }

    /// True when issuer and subject are the same and the signature verifies with the
    /// certificate's own public key.
    var isSelfSigned: Bool {
        OpenSSL.clearErrors()
        defer { OpenSSL.clearErrors() }
        return X509_self_signed(pointer, 1) == 1
    }

    /// True when the certificate may sign other certificates (basicConstraints CA).
    var isCertificateAuthority: Bool {
        defer { OpenSSL.clearErrors() }
        return X509_check_ca(pointer) >= 1
    }

    /// True when OpenSSL found invalid or duplicate extensions while caching them.
    var hasInvalidExtensions: Bool {
        defer { OpenSSL.clearErrors() }
        return X509_get_extension_flags(pointer) & UInt32(EXFLAG_INVALID) != 0
    }

    /// The TLS usages of the extended-key-usage extension; `nil` when the certificate has none.
    var extendedKeyUsages: KeyUsages? {
        defer { OpenSSL.clearErrors() }
        guard X509_get_extension_flags(pointer) & UInt32(EXFLAG_XKUSAGE) != 0 else { return nil }
        let eku = X509_get_extended_key_usage(pointer)
        var usages: KeyUsages = []
        if eku & UInt32(XKU_SSL_CLIENT) != 0 { usages.insert(.clientAuth) }
        if eku & UInt32(XKU_SSL_SERVER) != 0 { usages.insert(.serverAuth) }
        return usages
    }

    /// True when the certificate may be used for `purpose` (key usage, extended key usage and
    /// basic constraints, as OpenSSL's `X509_check_purpose` judges them).
    func allows(_ purpose: X509Purpose) -> Bool {
        defer { OpenSSL.clearErrors() }
        return X509_check_purpose(pointer, purpose.openSSLValue, 0) == 1
    }
}

/// What a certificate is checked for in path validation.
enum X509Purpose: Sendable {
    /// A TLS server's certificate (`id-kp-serverAuth`).
    case tlsServer
    /// A TLS client's certificate (`id-kp-clientAuth`).
    case tlsClient

    var openSSLValue: Int32 {
        switch self {
        case .tlsServer: return X509_PURPOSE_SSL_SERVER
        case .tlsClient: return X509_PURPOSE_SSL_CLIENT
        }
    }
}
