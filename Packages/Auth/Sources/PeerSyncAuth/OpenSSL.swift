// The OpenSSL wrapper core: error checking and owned handles. Every other file of this module
// calls OpenSSL only through these helpers or directly with results passed to `OpenSSL.check`.
internal import COpenSSL
import PeerSyncCore

/// The one place where OpenSSL return codes become typed ``PeerSyncError``s.
///
/// OpenSSL keeps its error queue per thread: callers check a result in the same synchronous
/// stretch of code that made the call (never across an `await`).
enum OpenSSL {
    /// One entry of OpenSSL's error queue.
    struct QueuedError {
        var library: Int32
        var reason: Int32
        var text: String
    }

    /// Empties the calling thread's error queue, returning its entries (oldest first).
    static func drainErrors() -> [QueuedError] {
        var out: [QueuedError] = []
        while true {
            let e = ERR_get_error()
            if e == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(e, &buffer, buffer.count)
            let text = buffer.withUnsafeBufferPointer { ptr in
                String(decoding: UnsafeRawBufferPointer(ptr).prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            out.append(QueuedError(library: peersync_ERR_GET_LIB(e), reason: peersync_ERR_GET_REASON(e), text: text))
        }
        return out
    }

    /// Discards stale entries before a call whose failure will be inspected.
    static func clearErrors() { ERR_clear_error() }

    /// Builds the error for a failed call: `what` plus OpenSSL's queued reasons.
    static func failure(_ code: PeerSyncError.Code, _ what: String,
                        context: [String: String] = [:]) -> PeerSyncError {
        let queued = drainErrors()
        var ctx = context
        if let last = queued.last { ctx["openssl"] = last.text }
        return PeerSyncError(code, what, context: ctx)
    }

    /// Checks an `int` result: success when `succeeded(rc)` (default: `rc == 1`, OpenSSL's
    /// usual convention); otherwise throws `code` with the error queue attached.
    @discardableResult
    static func check(_ rc: Int32, _ what: @autoclosure () -> String, code: PeerSyncError.Code = .cryptoFailure,
                      succeeded: (Int32) -> Bool = { $0 == 1 }) throws(PeerSyncError) -> Int32 {
        if succeeded(rc) { return rc }
        throw failure(code, what())
    }

    /// Checks a pointer result: throws `code` when it is NULL.
    @discardableResult
    static func check<T>(_ pointer: T?, _ what: @autoclosure () -> String,
                         code: PeerSyncError.Code = .cryptoFailure) throws(PeerSyncError) -> T {
        if let pointer { return pointer }
        throw failure(code, what())
    }
}

/// An owned `X509*`, freed in `deinit`.
///
/// Not protected by a lock: it is never mutated after construction, and OpenSSL documents
/// concurrent read-only use of an `X509` (verification, encoding, use in several `SSL_CTX`)
/// as thread-safe (extension caching inside is locked by OpenSSL itself).
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
    var der: [UInt8] { X509Handle.der(of: pointer) }

    static func der(of pointer: OpaquePointer) -> [UInt8] {
        let length = i2d_X509(pointer, nil)
        guard length > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(length))
        out.withUnsafeMutableBufferPointer { buffer in
            var cursor = buffer.baseAddress
            _ = i2d_X509(pointer, &cursor)
        }
        return out
    }
}

/// An owned `EVP_PKEY*` (a private key), freed in `deinit`.
///
/// Not protected by a lock: never mutated after construction; OpenSSL allows concurrent
/// read-only use of an `EVP_PKEY` (signing, use in several `SSL_CTX`) from several threads.
final class PrivateKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(owning pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// Generates a new key pair.
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
    static func fromPEM(_ text: String, password: String?) throws(PeerSyncError) -> PrivateKey {
        let bio = try MemoryBIO(bytes: Array(text.utf8))
        OpenSSL.clearErrors()
        let key = (password ?? "").withCString { pass in
            PEM_read_bio_PrivateKey(bio.pointer, nil, nil, UnsafeMutableRawPointer(mutating: pass))
        }
        if let key { return PrivateKey(owning: key) }
        let encrypted = text.contains("ENCRYPTED") || text.contains("Proc-Type: 4,ENCRYPTED")
        if encrypted {
            throw OpenSSL.failure(.wrongPassword,
                                  password == nil ? "the private key is encrypted and no password was given"
                                                  : "the password does not decrypt the private key")
        }
        throw OpenSSL.failure(.invalidCertificate, "no readable private key in the PEM text")
    }

    /// True when `certificate` carries this key's public half.
    func matches(_ certificate: X509Handle) -> Bool {
        OpenSSL.clearErrors()
        let ok = X509_check_private_key(certificate.pointer, pointer) == 1
        OpenSSL.clearErrors()
        return ok
    }
}

/// An owned memory `BIO*`, freed in `deinit`; used only within one synchronous call.
final class MemoryBIO {
    let pointer: OpaquePointer

    init() throws(PeerSyncError) {
        pointer = try OpenSSL.check(BIO_new(BIO_s_mem()), "BIO_new")
    }

    convenience init(bytes: [UInt8]) throws(PeerSyncError) {
        try self.init()
        if !bytes.isEmpty {
            guard bytes.count < Int(Int32.max) else { throw PeerSyncError(.tooLarge, "input too large") }
            let written = bytes.withUnsafeBytes { BIO_write(pointer, $0.baseAddress, Int32($0.count)) }
            try OpenSSL.check(written, "BIO_write", succeeded: { $0 == Int32(bytes.count) })
        }
    }

    deinit { BIO_free(pointer) }

    /// Reads everything pending.
    func readAll() -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { BIO_read(pointer, $0.baseAddress, Int32($0.count)) }
            if n <= 0 { break }
            out.append(contentsOf: chunk[0..<Int(n)])
        }
        return out
    }
}

/// An owned `STACK_OF(X509)` whose entries hold their own references; freed with them.
final class X509Stack {
    let pointer: OpaquePointer

    init(_ certificates: [X509Handle]) throws(PeerSyncError) {
        pointer = try OpenSSL.check(peersync_sk_X509_new_null(), "sk_X509_new_null")
        for cert in certificates {
            try OpenSSL.check(peersync_sk_X509_push_ref(pointer, cert.pointer), "sk_X509_push")
        }
    }

    deinit { peersync_sk_X509_pop_free(pointer) }
}

extension X509Stack {
    /// The entries of a borrowed stack, each with a new reference.
    static func handles(of stack: OpaquePointer?) -> [X509Handle] {
        guard let stack else { return [] }
        var out: [X509Handle] = []
        let count = peersync_sk_X509_num(stack)
        for i in 0..<count {
            if let x = peersync_sk_X509_value(stack, i) { out.append(X509Handle(retaining: x)) }
        }
        return out
    }
}

/// Secure random bytes from OpenSSL's CSPRNG.
func randomBytes(_ count: Int) throws(PeerSyncError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    let rc = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) }
    try OpenSSL.check(rc, "RAND_bytes")
    return out
}

/// SHA-256 of bytes.
func sha256(_ bytes: [UInt8]) throws(PeerSyncError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    let rc = bytes.withUnsafeBytes { input in
        out.withUnsafeMutableBufferPointer { output in
            EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, EVP_sha256(), nil)
        }
    }
    try OpenSSL.check(rc, "EVP_Digest(SHA-256)", succeeded: { $0 == 1 && length == 32 })
    return out
}
