internal import COpenSSL
import PeerSyncCore

/// PKCS#12 files (a private key with its certificate chain, password-protected): reading and
/// writing with OpenSSL 3's defaults.
enum PKCS12File {
    /// The contents of a PKCS#12 file: its private key (if any) and its certificates, the one
    /// OpenSSL pairs with the key first.
    struct Contents {
        var key: PrivateKey?
        var certificates: [X509Handle]
    }

    /// Parses DER PKCS#12 bytes and decrypts them with `password`.
    /// - Throws: ``PeerSyncError/Code/invalidCertificate`` when the bytes are not PKCS#12 or
    ///   cannot be read, ``PeerSyncError/Code/wrongPassword`` when the MAC does not verify
    ///   with `password`.
    static func parse(_ data: [UInt8], password: String) throws(PeerSyncError) -> Contents {
        OpenSSL.clearErrors()
        let parsed: OpaquePointer? = data.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PKCS12(nil, &cursor, buffer.count)
        }
        let p12 = try OpenSSL.check(parsed, "not a PKCS#12 file (nor PEM text)", code: .invalidCertificate)
        defer { PKCS12_free(p12) }
        if PKCS12_mac_present(p12) == 1 {
            try OpenSSL.check(PKCS12_verify_mac(p12, password, -1), "the password does not open the PKCS#12 file",
                              code: .wrongPassword)
        }
        var keyPointer: OpaquePointer? = nil
        var certPointer: OpaquePointer? = nil
        var caPointer: OpaquePointer? = nil
        let rc = PKCS12_parse(p12, password, &keyPointer, &certPointer, &caPointer)
        let key = keyPointer.map(PrivateKey.init(owning:))
        let leaf = certPointer.map(X509Handle.init(owning:))
        let extra = X509Stack.handles(of: caPointer)
        if let caPointer { X509Stack.free(caPointer) }
        try OpenSSL.check(rc, "cannot read the PKCS#12 contents (unsupported encryption or corrupt file)",
                          code: .invalidCertificate)
        return Contents(key: key, certificates: (leaf.map { [$0] } ?? []) + extra)
    }

    /// A DER PKCS#12 file with `key`, `leaf` and `extras`, protected by `password`
    /// (AES-256-CBC, PBKDF2, HMAC-SHA256 MAC); `friendlyName` labels the key bag.
    static func create(password: String, friendlyName: String, key: PrivateKey, leaf: X509Handle,
                       extras: [X509Handle]) throws(PeerSyncError) -> [UInt8] {
        let stack = try X509Stack(extras)
        OpenSSL.clearErrors()
        let p12 = try OpenSSL.check(PKCS12_create(password, friendlyName, key.pointer, leaf.pointer, stack.pointer,
                                                  0, 0, 0, 0, 0), "PKCS12_create")
        defer { PKCS12_free(p12) }
        let length = i2d_PKCS12(p12, nil)
        try OpenSSL.check(length, "i2d_PKCS12", succeeded: { $0 > 0 })
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return i2d_PKCS12(p12, &cursor)
        }
        try OpenSSL.check(written, "i2d_PKCS12", succeeded: { $0 == length })
        return out
    }
}
