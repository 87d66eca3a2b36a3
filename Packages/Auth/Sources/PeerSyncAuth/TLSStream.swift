internal import COpenSSL
import PeerSyncCore

/// TLS over any ``ByteStream`` (TCP, BLE L2CAP, an in-memory pipe), with OpenSSL 3.
///
/// `TLSStream` is itself a ``ByteStream``: after ``handshake(over:configuration:)`` returns,
/// `read`/`write` carry plaintext. OpenSSL never touches a socket: it works on two memory
/// BIOs, and this type moves ciphertext between them and the underlying stream with
/// async/await, so no thread ever blocks on I/O.
///
/// Threading: one `read` and one `write` may run concurrently (the ``ByteStream`` contract).
/// The OpenSSL object is touched only under one lock, never across an `await`; ciphertext
/// leaves in the order OpenSSL produced it.
///
/// Errors (``PeerSyncError``): ``PeerSyncError/Code/untrustedCertificate`` (we rejected the
/// peer's certificate; see ``PeerSyncError/trustFailure``),
/// ``PeerSyncError/Code/certificateRejected`` (the peer rejected ours — with TLS 1.3 a client
/// learns this on its first `read` after the handshake),
/// ``PeerSyncError/Code/tlsHandshakeFailed``, ``PeerSyncError/Code/tlsError``,
/// ``PeerSyncError/Code/timeout``, ``PeerSyncError/Code/closed``, and errors of the
/// underlying stream (passed through; non-PeerSync errors become ``PeerSyncError/Code/io``).
public final class TLSStream: ByteStream {
    /// The peer's certificate chain as presented, leaf first. Empty when the peer sent none
    /// (a client of a server that does not ask for client certificates).
    public let peerCertificateChain: [Certificate]
    /// The negotiated protocol version.
    public let protocolVersion: TLSVersion
    /// The negotiated cipher suite, OpenSSL's name (e.g. `TLS_AES_256_GCM_SHA384`).
    public let cipherSuite: String
    /// Server side: the host name the client sent as SNI. Client side: the SNI we sent.
    public let serverName: String?
    /// The configuration the handshake used.
    public let configuration: TLSConfiguration

    private let underlying: any ByteStream
    private let connection: SSLConnection
    private let writeGate = AsyncLock()

    /// The peer's leaf certificate, if it sent one.
    public var peerCertificate: Certificate? { peerCertificateChain.first }
    public var remoteAddress: String? { underlying.remoteAddress }

    private init(underlying: any ByteStream, connection: SSLConnection, configuration: TLSConfiguration,
                 chain: [Certificate], version: TLSVersion, cipher: String, serverName: String?) {
        self.underlying = underlying
        self.connection = connection
        self.configuration = configuration
        self.peerCertificateChain = chain
        self.protocolVersion = version
        self.cipherSuite = cipher
        self.serverName = serverName
    }

    /// Runs a TLS handshake over `stream` and returns the secured stream.
    ///
    /// On failure the underlying stream is closed (after sending the TLS alert, if any) and
    /// the error says why; trust failures are ``PeerSyncError/Code/untrustedCertificate``
    /// with a ``CertificateTrustFailure`` reason. Cancelling the task closes the stream.
    public static func handshake(over stream: any ByteStream,
                                 configuration: TLSConfiguration) async throws(PeerSyncError) -> TLSStream {
        try configuration.validate()
        let connection = try SSLConnection(configuration: configuration)
        let timedOut = Flag()
        let outcome: Result<TLSStream, PeerSyncError> = await withTaskCancellationHandler {
            await race(connection: connection, stream: stream, configuration: configuration, timedOut: timedOut)
        } onCancel: {
            // Ends a read or write of the underlying stream that ignores cancellation.
            Task { await stream.close() }
        }
        let log = Logger(.network)
        switch outcome {
        case .success(let tls):
            log.verbose("TLS \(configuration.role) handshake with \(stream.remoteAddress ?? "peer"): \(tls.protocolVersion) \(tls.cipherSuite), peer \(tls.peerCertificate.map { String($0.peerID.prefix(16)) } ?? "without certificate")")
            if Task.isCancelled {
                await tls.close()
                throw PeerSyncError(.cancelled, "the TLS handshake was cancelled")
            }
            return tls
        case .failure(let error):
            log.info("TLS \(configuration.role) handshake with \(stream.remoteAddress ?? "peer") failed: \(error)")
            await stream.close()
            if timedOut.isSet {
                throw PeerSyncError(.timeout, "the TLS handshake did not finish in time",
                                    context: ["timeout": "\(configuration.handshakeTimeout ?? .zero)"])
            }
            if Task.isCancelled { throw PeerSyncError(.cancelled, "the TLS handshake was cancelled") }
            throw error
        }
    }

    /// The handshake raced against the configured timeout.
    private static func race(connection: SSLConnection, stream: any ByteStream, configuration: TLSConfiguration,
                             timedOut: Flag) async -> Result<TLSStream, PeerSyncError> {
        await withTaskGroup(of: Result<TLSStream, PeerSyncError>?.self) { group in
            group.addTask {
                do throws(PeerSyncError) {
                    return .success(try await run(connection: connection, over: stream, configuration: configuration))
                } catch {
                    return .failure(error)
                }
            }
            if let limit = configuration.handshakeTimeout {
                group.addTask {
                    do { try await Task.sleep(for: limit) } catch { return nil }
                    timedOut.set()
                    await stream.close()
                    return nil
                }
            }
            var result: Result<TLSStream, PeerSyncError>? = nil
            for await next in group {
                if let next {
                    result = next
                    group.cancelAll()
                    break
                }
            }
            return result ?? .failure(PeerSyncError(.internalError, "TLS handshake task ended without a result"))
        }
    }

    private static func run(connection: SSLConnection, over stream: any ByteStream,
                            configuration: TLSConfiguration) async throws(PeerSyncError) -> TLSStream {
        while true {
            if Task.isCancelled { throw PeerSyncError(.cancelled, "the TLS handshake was cancelled") }
            let step = connection.handshakeStep()
            let output = connection.takeOutbound()
            if !output.isEmpty {
                do {
                    try await stream.write(output)
                } catch {
                    // A failure we detected outranks the broken pipe the peer's close caused.
                    if case .failed(let failure) = step { throw failure }
                    throw mapUnderlying(error)
                }
            }
            switch step {
            case .done:
                let info = connection.negotiated()
                return TLSStream(underlying: stream, connection: connection, configuration: configuration,
                                 chain: connection.session.peerChain, version: info.version,
                                 cipher: info.cipher, serverName: info.serverName)
            case .wantRead:
                let bytes: [UInt8]?
                do { bytes = try await stream.read(maxBytes: 32 * 1024) } catch { throw mapUnderlying(error) }
                guard let bytes else {
                    throw connection.session.failure
                        ?? PeerSyncError(.tlsHandshakeFailed, "the peer closed the connection during the TLS handshake")
                }
                try connection.feed(bytes)
            case .wantWrite:
                continue
            case .closed:
                throw PeerSyncError(.tlsHandshakeFailed, "the peer closed TLS during the handshake")
            case .failed(let error):
                throw error
            }
        }
    }

    // MARK: ByteStream

    /// Reads decrypted bytes (1...`maxBytes`), or `nil` once the peer sent TLS `close_notify`.
    /// An end of the underlying stream without `close_notify` throws
    /// ``PeerSyncError/Code/tlsError`` (the data may have been truncated).
    public func read(maxBytes: Int) async throws(PeerSyncError) -> [UInt8]? {
        guard maxBytes > 0 else { throw PeerSyncError(.invalidArgument, "maxBytes must be positive") }
        while true {
            let (data, step) = connection.readStep(maxBytes: maxBytes)
            if connection.hasOutbound {
                // E.g. a KeyUpdate reply. Sent from its own task so this read never waits
                // behind a writer stalled by backpressure; a failure surfaces on the next write.
                Task { try? await self.flush() }
            }
            if let data { return data }
            switch step {
            case .done, .wantWrite:
                continue
            case .closed:
                return nil
            case .failed(let error):
                throw error
            case .wantRead:
                let bytes: [UInt8]?
                do { bytes = try await underlying.read(maxBytes: 32 * 1024) } catch { throw mapUnderlying(error) }
                guard let bytes else {
                    let error = PeerSyncError(.tlsError, "the peer closed the connection without TLS close_notify")
                    connection.fail(error)
                    throw error
                }
                try connection.feed(bytes)
            }
        }
    }

    /// Encrypts and sends `bytes`; returns when the ciphertext was handed to the underlying
    /// stream (its backpressure applies).
    public func write(_ bytes: [UInt8]) async throws(PeerSyncError) {
        var offset = 0
        let chunkSize = 64 * 1024
        while offset < bytes.count {
            let end = min(offset + chunkSize, bytes.count)
            try connection.writeStep(Array(bytes[offset..<end]))
            try await flush()
            offset = end
        }
    }

    /// Sends TLS `close_notify`, then half-closes the underlying stream. Reading continues
    /// until the peer closes; further writes throw ``PeerSyncError/Code/closed``.
    public func shutdownOutput() async {
        if connection.shutdownStep() {
            try? await flush()
            await underlying.shutdownOutput()
        }
    }

    /// Sends TLS `close_notify` if it can without waiting for a stalled writer, then closes
    /// the underlying stream. Idempotent; pending reads and writes end with
    /// ``PeerSyncError/Code/closed``.
    public func close() async {
        _ = connection.shutdownStep()
        connection.fail(PeerSyncError(.closed, "the TLS stream is closed"))
        if writeGate.tryAcquire() {
            let output = connection.takeOutbound()
            if !output.isEmpty { try? await underlying.write(output) }
            writeGate.release()
        }
        await underlying.close()
    }

    /// Sends everything OpenSSL produced, in order; one flusher at a time.
    private func flush() async throws(PeerSyncError) {
        await writeGate.acquire()
        defer { writeGate.release() }
        while true {
            let output = connection.takeOutbound()
            if output.isEmpty { return }
            do { try await underlying.write(output) } catch { throw mapUnderlying(error) }
        }
    }
}

private func mapUnderlying(_ error: any Error) -> PeerSyncError {
    if let error = error as? PeerSyncError { return error }
    if error is CancellationError { return PeerSyncError(.cancelled, "cancelled") }
    return PeerSyncError(.io, "the underlying stream failed: \(error)")
}

/// The result of one OpenSSL call.
enum SSLStep {
    case done
    case wantRead
    case wantWrite
    /// The peer sent `close_notify`.
    case closed
    case failed(PeerSyncError)
}

/// One `SSL*` with its memory BIOs. Every OpenSSL call on it happens inside `state`'s lock,
/// synchronously (OpenSSL's per-thread error queue is read in the same critical section).
final class SSLConnection: Sendable {
    private struct State {
        let ssl: OpaquePointer
        /// Ciphertext from the peer goes in here (owned by `ssl`).
        let networkIn: OpaquePointer
        /// Ciphertext for the peer comes out of here (owned by `ssl`).
        let networkOut: OpaquePointer
        /// Ciphertext taken from `networkOut`, waiting to be written, in order.
        var outbound: [UInt8] = []
        /// A fatal error: every later operation fails with it.
        var failure: PeerSyncError?
        var handshakeDone = false
        var sentCloseNotify = false
    }

    /// Protects the `SSL*` and its BIOs (the lock the C handle lives under).
    private let state: LockedValue<State>
    let session: TrustSession
    private let role: TLSConfiguration.Role

    init(configuration: TLSConfiguration) throws(PeerSyncError) {
        role = configuration.role
        switch configuration.role {
        case .client:
            session = TrustSession(mode: .server(configuration.serverTrust, hostname: configuration.serverName))
        case .server:
            session = TrustSession(mode: .client(configuration.clientCertificateValidation ?? .callback({ _ in true })))
        }
        let context = try SSLContext(configuration: configuration)
        OpenSSL.clearErrors()
        let ssl = try OpenSSL.check(SSL_new(context.pointer), "SSL_new")
        guard let input = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw OpenSSL.failure(.cryptoFailure, "BIO_new")
        }
        guard let output = BIO_new(BIO_s_mem()) else {
            BIO_free(input)
            SSL_free(ssl)
            throw OpenSSL.failure(.cryptoFailure, "BIO_new")
        }
        SSL_set_bio(ssl, input, output)
        state = LockedValue(State(ssl: ssl, networkIn: input, networkOut: output))
        // The session outlives every callback: `self` holds it and frees `ssl` in deinit.
        let sessionPointer = Unmanaged.passUnretained(session).toOpaque()
        try state.withLock { (s: inout State) throws(PeerSyncError) in
            try OpenSSL.check(SSL_set_ex_data(s.ssl, 0, sessionPointer), "SSL_set_ex_data")
            switch configuration.role {
            case .client:
                SSL_set_connect_state(s.ssl)
                if let name = configuration.serverName, !IPAddress.isLiteral(name),
                   !(name.hasPrefix("[") && name.hasSuffix("]")) {
                    try OpenSSL.check(Int32(peersync_SSL_set_tlsext_host_name(s.ssl, name)),
                                      "'\(name)' cannot be sent as SNI", code: .invalidArgument)
                }
            case .server:
                SSL_set_accept_state(s.ssl)
            }
        }
    }

    deinit {
        state.withLock { s in SSL_free(s.ssl) }
    }

    // MARK: Steps (each one critical section)

    func handshakeStep() -> SSLStep {
        state.withLock { s in
            if let failure = s.failure { return .failed(failure) }
            OpenSSL.clearErrors()
            let rc = SSL_do_handshake(s.ssl)
            let step = classify(&s, rc, handshake: true)
            if case .done = step { s.handshakeDone = true }
            drain(&s)
            return step
        }
    }

    func readStep(maxBytes: Int) -> ([UInt8]?, SSLStep) {
        state.withLock { s in
            if let failure = s.failure { return (nil, .failed(failure)) }
            // SSL_read returns at most one record's plaintext (16 KiB).
            let capacity = min(maxBytes, 16 * 1024)
            var buffer = [UInt8](repeating: 0, count: capacity)
            OpenSSL.clearErrors()
            let rc = buffer.withUnsafeMutableBytes { SSL_read(s.ssl, $0.baseAddress, Int32($0.count)) }
            let step: SSLStep = rc > 0 ? .done : classify(&s, rc, handshake: false)
            drain(&s)
            if rc > 0 {
                buffer.removeSubrange(Int(rc)...)
                return (buffer, .done)
            }
            return (nil, step)
        }
    }

    func writeStep(_ bytes: [UInt8]) throws(PeerSyncError) {
        try state.withLock { (s: inout State) throws(PeerSyncError) in
            if let failure = s.failure { throw failure }
            if s.sentCloseNotify { throw PeerSyncError(.closed, "the TLS stream's output is shut down") }
            guard !bytes.isEmpty else { return }
            OpenSSL.clearErrors()
            let rc = bytes.withUnsafeBytes { SSL_write(s.ssl, $0.baseAddress, Int32($0.count)) }
            let step: SSLStep = rc > 0 ? .done : classify(&s, rc, handshake: false)
            drain(&s)
            switch step {
            case .done:
                if Int(rc) != bytes.count {
                    throw PeerSyncError(.internalError, "SSL_write wrote \(rc) of \(bytes.count) bytes")
                }
            case .failed(let error):
                throw error
            case .closed:
                throw PeerSyncError(.closed, "the peer closed TLS")
            case .wantRead, .wantWrite:
                // Only renegotiation could make a write wait for input; it is disabled.
                let error = PeerSyncError(.tlsError, "TLS write needs a renegotiation, which PeerSync does not support")
                s.failure = error
                throw error
            }
        }
    }

    /// Sends `close_notify` once (after a successful handshake). Returns true the first time.
    func shutdownStep() -> Bool {
        state.withLock { s in
            guard s.handshakeDone, s.failure == nil, !s.sentCloseNotify else { return false }
            s.sentCloseNotify = true
            OpenSSL.clearErrors()
            _ = SSL_shutdown(s.ssl)
            OpenSSL.clearErrors()
            drain(&s)
            return true
        }
    }

    /// Hands ciphertext received from the peer to OpenSSL.
    func feed(_ bytes: [UInt8]) throws(PeerSyncError) {
        try state.withLock { (s: inout State) throws(PeerSyncError) in
            if let failure = s.failure { throw failure }
            guard !bytes.isEmpty else { return }
            OpenSSL.clearErrors()
            let written = bytes.withUnsafeBytes { BIO_write(s.networkIn, $0.baseAddress, Int32($0.count)) }
            try OpenSSL.check(written, "BIO_write", succeeded: { $0 == Int32(bytes.count) })
        }
    }

    /// Marks the connection failed (if it is not already); later operations throw `error`.
    func fail(_ error: PeerSyncError) {
        state.withLock { s in
            if s.failure == nil { s.failure = error }
        }
    }

    func takeOutbound() -> [UInt8] {
        state.withLock { s in
            let out = s.outbound
            s.outbound = []
            return out
        }
    }

    var hasOutbound: Bool { state.withLock { !$0.outbound.isEmpty } }

    func negotiated() -> (version: TLSVersion, cipher: String, serverName: String?) {
        state.withLock { s in
            let version = TLSVersion(rawValue: Int(SSL_version(s.ssl))) ?? .v1_2
            let cipher = SSL_get_current_cipher(s.ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? ""
            let name = SSL_get_servername(s.ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
            return (version, cipher, name)
        }
    }

    // MARK: Helpers (called with the lock held)

    /// Moves OpenSSL's pending output into `outbound`.
    private func drain(_ s: inout State) {
        while true {
            let pending = BIO_ctrl_pending(s.networkOut)
            if pending == 0 { return }
            var chunk = [UInt8](repeating: 0, count: min(Int(pending), 64 * 1024))
            let n = chunk.withUnsafeMutableBytes { BIO_read(s.networkOut, $0.baseAddress, Int32($0.count)) }
            if n <= 0 { return }
            s.outbound.append(contentsOf: chunk[0..<Int(n)])
        }
    }

    /// Turns an SSL call's result into a step; fatal errors are remembered in `s.failure`.
    private func classify(_ s: inout State, _ rc: Int32, handshake: Bool) -> SSLStep {
        let code = SSL_get_error(s.ssl, rc)
        switch code {
        case SSL_ERROR_NONE:
            return .done
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        default:
            let error = failure(handshake: handshake)
            s.failure = error
            return .failed(error)
        }
    }

    /// The typed error for a failed SSL call, from our trust verdict or OpenSSL's error queue.
    private func failure(handshake: Bool) -> PeerSyncError {
        let queued = OpenSSL.drainErrors()
        if let verdict = session.failure { return verdict }
        let sslErrors = queued.filter { $0.library == ERR_LIB_SSL }
        let last = sslErrors.last ?? queued.last
        var context: [String: String] = [:]
        if let last { context["openssl"] = last.text }
        if let last, last.library == ERR_LIB_SSL {
            if last.reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE {
                return .untrusted(.noCertificate, "the client presented no certificate but one is required",
                                  context: context)
            }
            let offset = Int32(SSL_AD_REASON_OFFSET)
            if last.reason > offset, last.reason < offset + 256 {
                let alert = last.reason - offset
                context["alert"] = "\(alert)"
                if alert == 40, role == .client, session.certificateRequestedButMissing {
                    return PeerSyncError(.certificateRejected,
                                         "the server requires a client certificate and none is configured (TLS alert handshake_failure)",
                                         context: context)
                }
                if TLSAlert.certificateAlerts.contains(alert) {
                    return PeerSyncError(.certificateRejected,
                                         "the peer rejected our certificate (TLS alert \(TLSAlert.name(alert)))",
                                         context: context)
                }
                return PeerSyncError(handshake ? .tlsHandshakeFailed : .tlsError,
                                     "the peer sent TLS alert \(TLSAlert.name(alert))", context: context)
            }
        }
        if handshake {
            return PeerSyncError(.tlsHandshakeFailed, "TLS handshake failed: \(last?.text ?? "connection error")",
                                 context: context)
        }
        return PeerSyncError(.tlsError, "TLS failed: \(last?.text ?? "connection error")", context: context)
    }
}

/// TLS alert numbers (RFC 8446 §6) that mean "your certificate is not acceptable".
enum TLSAlert {
    static let certificateAlerts: Set<Int32> = [42, 43, 44, 45, 46, 48, 49, 116]

    static func name(_ alert: Int32) -> String {
        switch alert {
        case 10: return "unexpected_message"
        case 20: return "bad_record_mac"
        case 40: return "handshake_failure"
        case 42: return "bad_certificate"
        case 43: return "unsupported_certificate"
        case 44: return "certificate_revoked"
        case 45: return "certificate_expired"
        case 46: return "certificate_unknown"
        case 47: return "illegal_parameter"
        case 48: return "unknown_ca"
        case 49: return "access_denied"
        case 50: return "decode_error"
        case 51: return "decrypt_error"
        case 70: return "protocol_version"
        case 71: return "insufficient_security"
        case 80: return "internal_error"
        case 112: return "unrecognized_name"
        case 116: return "certificate_required"
        case 120: return "no_application_protocol"
        default: return "\(alert)"
        }
    }
}

/// An owned `SSL_CTX*` configured from a ``TLSConfiguration``; freed in `deinit`. Used only
/// while creating one `SSL` (which keeps its own reference), so it needs no lock.
private final class SSLContext {
    let pointer: OpaquePointer

    init(configuration: TLSConfiguration) throws(PeerSyncError) {
        OpenSSL.clearErrors()
        let method = configuration.role == .client ? TLS_client_method() : TLS_server_method()
        pointer = try OpenSSL.check(SSL_CTX_new(method), "SSL_CTX_new")
        _ = SSL_CTX_set_options(pointer, peersync_ssl_default_options())
        try OpenSSL.check(Int32(peersync_SSL_CTX_set_min_proto_version(pointer, Int32(configuration.minimumVersion.rawValue))),
                          "SSL_CTX_set_min_proto_version")
        try OpenSSL.check(Int32(peersync_SSL_CTX_set_max_proto_version(pointer, Int32(configuration.maximumVersion.rawValue))),
                          "SSL_CTX_set_max_proto_version")
        _ = peersync_SSL_CTX_set_session_cache_off(pointer)
        try OpenSSL.check(SSL_CTX_set_num_tickets(pointer, 0), "SSL_CTX_set_num_tickets")

        if let identity = configuration.identity {
            let leaf = try identity.certificate.handle()
            var extras: [X509Handle] = []
            for cert in identity.certs.dropFirst() { extras.append(try cert.handle()) }
            let chain = try X509Stack(extras)
            try OpenSSL.check(SSL_CTX_use_cert_and_key(pointer, leaf.pointer, identity.privateKey.pointer, chain.pointer, 1),
                              "the identity's certificate and key cannot be used for TLS", code: .invalidCertificate)
        }
        switch configuration.role {
        case .client:
            SSL_CTX_set_verify(pointer, SSL_VERIFY_PEER, nil)
            SSL_CTX_set_cert_verify_callback(pointer, certificateVerifyCallback, nil)
            if configuration.identity == nil {
                SSL_CTX_set_client_cert_cb(pointer, clientCertificateRequestedCallback)
            }
        case .server:
            if configuration.clientCertificateValidation != nil {
                SSL_CTX_set_verify(pointer, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
                SSL_CTX_set_cert_verify_callback(pointer, certificateVerifyCallback, nil)
            } else {
                SSL_CTX_set_verify(pointer, SSL_VERIFY_NONE, nil)
            }
        }
    }

    deinit { SSL_CTX_free(pointer) }
}

/// A boolean that is set once, from any task.
final class Flag: Sendable {
    private let value = LockedValue(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
