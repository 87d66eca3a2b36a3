internal import COpenSSL
import PeerSyncCore

/// An owned `EVP_PKEY*` (a private key), freed in `deinit`.
///
/// Not protected by a lock: never mutated after construction; OpenSSL allows concurrent
/// read-only use of an `EVP_PKEY` (signing, use in several `SSL_CTX`) from several threads.
final class PrivateKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(owning pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// Generates a new key pair.
    /// - Throws: ``PeerSyncError/Code/invalidArgument`` for an RSA size outside 2048...8192,
    ///   ``PeerSyncError/Code/cryptoFailure`` when OpenSSL fails.
    static func generate(_ type: KeyType) throws(PeerSyncError) -> PrivateKey {
        OpenSSL.clearErrors()
        let algorithm: String
        switch type {
        case .p256: algorithm = "EC"
        case .rsa: algorithm = "RSA"
        }
        let ctx = try OpenSSL.check(EVP_PKEY_CTX_new_from_name(nil, algorithm, nil), "EVP_PKEY_CTX_new_from_name")
        defer { EVP_PKEY_CTX_free(ctx) }
        try OpenSSL.check(EVP_PKEY_keygen_init(ctx), "EVP_PKEY_keygen_init")
        switch type {
        case .p256:
            try OpenSSL.check(EVP_PKEY_CTX_set_group_name(ctx, "P-256"), "EVP_PKEY_CTX_set_group_name")
        case .rsa(let bits):
            guard (2048...8192).contains(bits) else {
                throw PeerSyncError(.invalidArgument, "RSA key size must be 2048...8192 bits, got \(bits)")
            }
            try OpenSSL.check(EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, Int32(bits)), "EVP_PKEY_CTX_set_rsa_keygen_bits")
        }
        var key: OpaquePointer? = nil
        try OpenSSL.check(EVP_PKEY_generate(ctx, &key), "EVP_PKEY_generate")
        return PrivateKey(owning: try OpenSSL.check(key, "EVP_PKEY_generate returned no key"))
    }

    var isRSA: Bool { EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA }

    /// PEM text: PKCS#8, encrypted with AES-256-CBC (PBES2/PBKDF2) when `password` is given.
    func pem(password: String?) throws(PeerSyncError) -> String {
        let bio = try MemoryBIO()
        OpenSSL.clearErrors()
        let rc: Int32
        if let password {
            let bytes = Array(password.utf8)
            guard bytes.count < Int(Int32.max) else { throw PeerSyncError(.invalidArgument, "password too long") }
            rc = bytes.withUnsafeBufferPointer { buffer in
                // PEM_write_bio_PKCS8PrivateKey takes `const char *kstr` as non-const `char *`.
                let pass = UnsafeMutablePointer<CChar>(mutating: UnsafeRawPointer(buffer.baseAddress)?
                    .assumingMemoryBound(to: CChar.self))
                return PEM_write_bio_PKCS8PrivateKey(bio.pointer, pointer, EVP_aes_256_cbc(), pass,
                                                     Int32(buffer.count), nil, nil)
            }
        } else {
            rc = PEM_write_bio_PKCS8PrivateKey(bio.pointer, pointer, nil, nil, 0, nil, nil)
        }
        try OpenSSL.check(rc, "PEM_write_bio_PKCS8PrivateKey")
        return String(decoding: bio.readAll(), as: UTF8.self)
    }

    /// Reads the first private key of PEM text (PKCS#8, encrypted PKCS#8, or traditional
    /// EC/RSA). A missing password is treated as the empty password (never prompts).
    /// - Throws: ``PeerSyncError/Code/wrongPassword`` when the key is encrypted and `password`
    ///   does not decrypt it, ``PeerSyncError/Code/invalidCertificate`` when there is no
    ///   readable key.
    static func fromPEM(_ text: String, password: String?) throws(PeerSyncError) -> PrivateKey {
        let bio = try MemoryBIO(bytes: Array(text.utf8))
        OpenSSL.clearErrors()
        let key = (password ?? "").withCString { pass in
            PEM_read_bio_PrivateKey(bio.pointer, nil, nil, UnsafeMutableRawPointer(mutating: pass))
        }
        if let key { return PrivateKey(owning: key) }
        let encrypted = text.contains("ENCRYPTED") || text.contains("Proc-Type: 4,ENCRYPTED")
        if encrypted {
            throw OpenSSL.error(.wrongPassword,
                                password == nil ? "the private key is encrypted and no password was given"
                                                : "the password does not decrypt the private key")
        }
        throw OpenSSL.error(.invalidCertificate, "no readable private key in the PEM text")
    }

    /// True when `certificate` carries this key's public half.
    func matches(_ certificate: X509Handle) -> Bool {
        OpenSSL.clearErrors()
        let ok = X509_check_private_key(certificate.pointer, pointer) == 1
        OpenSSL.clearErrors()
        return ok
    }
}
