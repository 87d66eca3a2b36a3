internal import COpenSSL
import PeerSyncCore

/// What one `SSL_*` call did.
enum SSLResult {
    /// Success; the count of bytes read or written (1 for a handshake step).
    case done(Int)
    /// OpenSSL needs ciphertext from the peer (``SSLHandle/feed(_:)``) before it can go on.
    case wantRead
    /// OpenSSL needs its output sent first (``SSLHandle/takeOutput()``).
    case wantWrite
    /// The peer sent TLS `close_notify`.
    case closed
    /// A fatal error, with OpenSSL's error queue (drained, oldest first; may be empty when the
    /// transport ended unexpectedly).
    case failed([OpenSSLError])
}

/// An owned `SSL*` over two memory BIOs, freed in `deinit`: OpenSSL reads the peer's
/// ciphertext from the one (``feed(_:)``) and writes its own into the other
/// (``takeOutput()``). It never touches a socket.
///
/// Not thread-safe: the owner (``TLSEngine``) makes every call under one lock, synchronously,
/// so OpenSSL's per-thread error queue is read by the call that filled it.
final class SSLHandle {
    private let ssl: OpaquePointer
    /// Ciphertext from the peer goes in here (owned by `ssl`).
    private let networkIn: OpaquePointer
    /// Ciphertext for the peer comes out of here (owned by `ssl`).
    private let networkOut: OpaquePointer
    /// Reached from OpenSSL's callbacks through the SSL's app data; lives as long as `ssl`.
    private let delegateBox: HandshakeDelegateBox

    /// A connection for `role` with the settings of `context`; `delegate` judges the peer's
    /// certificate during the handshake.
    init(context: SSLContext, role: TLSConfiguration.Role, delegate: any TLSHandshakeDelegate) throws(PeerSyncError) {
        OpenSSL.clearErrors()
        let ssl = try OpenSSL.check(SSL_new(context.pointer), "SSL_new")
        guard let input = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw OpenSSL.error(.cryptoFailure, "BIO_new")
        }
        guard let output = BIO_new(BIO_s_mem()) else {
            BIO_free(input)
            SSL_free(ssl)
            throw OpenSSL.error(.cryptoFailure, "BIO_new")
        }
        SSL_set_bio(ssl, input, output)
        self.ssl = ssl
        networkIn = input
        networkOut = output
        delegateBox = HandshakeDelegateBox(delegate)
        // The box outlives every callback: `self` holds it and frees `ssl` in deinit.
        try OpenSSL.check(SSL_set_ex_data(ssl, 0, Unmanaged.passUnretained(delegateBox).toOpaque()), "SSL_set_ex_data")
        switch role {
        case .client: SSL_set_connect_state(ssl)
        case .server: SSL_set_accept_state(ssl)
        }
    }

    deinit { SSL_free(ssl) }

    /// Client: sends `name` as SNI (server name indication).
    /// - Throws: ``PeerSyncError/Code/invalidArgument`` when OpenSSL refuses the name.
    func setServerNameIndication(_ name: String) throws(PeerSyncError) {
        try OpenSSL.check(Int32(peersync_SSL_set_tlsext_host_name(ssl, name)),
                          "'\(name)' cannot be sent as SNI", code: .invalidArgument)
    }

    /// One step of the handshake.
    func handshake() -> SSLResult {
        OpenSSL.clearErrors()
        return result(SSL_do_handshake(ssl))
    }

    /// Decrypts up to `maxBytes` of plaintext — as many whole records as OpenSSL can open
    /// from the ciphertext fed so far, so a large message costs one call, not one per 16 KiB
    /// record. When a later record ends the read (the peer's `close_notify`, a fatal error),
    /// the plaintext before it is returned first and that outcome on the next call.
    func read(maxBytes: Int) -> (bytes: [UInt8]?, result: SSLResult) {
        if let deferred = deferredReadResult {
            deferredReadResult = nil
            return (nil, deferred)
        }
        var outcome = SSLResult.wantRead
        // Capacity is allocated up front: a caller asking for megabytes gets 256 KiB at most.
        let bytes = [UInt8](unsafeUninitializedCapacity: min(maxBytes, 256 * 1024)) { buffer, count in
            while count < buffer.count {
                OpenSSL.clearErrors()
                let rc = SSL_read(ssl, buffer.baseAddress! + count, Int32(clamping: buffer.count - count))
                guard rc > 0 else {
                    outcome = result(rc)
                    break
                }
                count += Int(rc)
                outcome = .done(count)
            }
        }
        guard !bytes.isEmpty else { return (nil, outcome) }
        switch outcome {
        case .done, .wantRead: break
        case .wantWrite, .closed, .failed: deferredReadResult = outcome
        }
        return (bytes, .done(bytes.count))
    }

    /// What ended the last ``read(maxBytes:)`` after it had plaintext to return; reported by
    /// the next call.
    private var deferredReadResult: SSLResult?

    /// Encrypts `bytes` (not empty, at most 2 GiB) into the output BIO.
    func write(_ bytes: ArraySlice<UInt8>) -> SSLResult {
        OpenSSL.clearErrors()
        return result(bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) })
    }

    /// Writes TLS `close_notify` into the output BIO; errors are ignored (the connection is
    /// ending).
    func shutdown() {
        OpenSSL.clearErrors()
        _ = SSL_shutdown(ssl)
        OpenSSL.clearErrors()
    }

    /// Hands ciphertext received from the peer to OpenSSL.
    func feed(_ bytes: [UInt8]) throws(PeerSyncError) {
        guard !bytes.isEmpty else { return }
        OpenSSL.clearErrors()
        let written = bytes.withUnsafeBytes { BIO_write(networkIn, $0.baseAddress, Int32($0.count)) }
        try OpenSSL.check(written, "BIO_write", succeeded: { $0 == Int32(bytes.count) })
    }

    /// Appends the ciphertext OpenSSL produced for the peer to `output`, in order (into
    /// uninitialised storage; moved, not copied, when `output` is empty).
    func takeOutput(appendingTo output: inout [UInt8]) {
        while true {
            let pending = Int(BIO_ctrl_pending(networkOut))
            if pending == 0 { return }
            let chunk = [UInt8](unsafeUninitializedCapacity: pending) { buffer, count in
                count = Int(max(BIO_read(networkOut, buffer.baseAddress, Int32(clamping: pending)), 0))
            }
            if chunk.isEmpty { return }
            if output.isEmpty { output = chunk } else { output.append(contentsOf: chunk) }
        }
    }

    /// The negotiated protocol version (after the handshake); nil for a version PeerSync does
    /// not speak.
    var protocolVersion: TLSVersion? { TLSVersion(rawValue: Int(SSL_version(ssl))) }

    /// The negotiated cipher suite, OpenSSL's name (after the handshake); "" before.
    var cipherSuite: String {
        SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? ""
    }

    /// The SNI host name: the one the client sent (server side), or ours (client side).
    var serverName: String? {
        SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
    }

    private func result(_ rc: Int32) -> SSLResult {
        if rc > 0 { return .done(Int(rc)) }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_NONE: return .done(0)
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(OpenSSL.drainErrors())
        }
    }
}
