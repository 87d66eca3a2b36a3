import PeerSyncCore

/// What one step of a ``TLSEngine`` did.
enum TLSStep {
    case done
    /// Ciphertext from the peer is needed (``TLSEngine/feed(_:)``).
    case wantRead
    /// Output must be sent first (``TLSEngine/takeOutbound()``).
    case wantWrite
    /// The peer sent `close_notify`.
    case closed
    case failed(PeerSyncError)
}

/// The TLS state machine of one ``TLSStream``: an ``SSLHandle`` under one lock, the
/// ciphertext waiting to be sent, and the first fatal error, which every later step repeats.
///
/// Threading: every method is one synchronous critical section (never held across an
/// `await`), so OpenSSL's per-thread error queue is read by the step that filled it. Any
/// task may call any method; ciphertext leaves ``takeOutbound()`` in the order OpenSSL made it.
final class TLSEngine: Sendable {
    private struct State {
        let ssl: SSLHandle
        /// Ciphertext taken from OpenSSL, waiting to be written, in order.
        var outbound: [UInt8] = []
        /// A fatal error: every later operation fails with it.
        var failure: PeerSyncError?
        var handshakeDone = false
        var sentCloseNotify = false

        /// Moves OpenSSL's pending output into `outbound`.
        mutating func collectOutput() { ssl.takeOutput(appendingTo: &outbound) }
    }

    /// Protects the `SSLHandle` (the lock the C handle lives under) and the state around it.
    private let state: LockedValue<State>
    /// Our verdict on the peer's certificate, and the chain it presented.
    let session: TrustSession
    private let role: TLSConfiguration.Role

    /// Creates the OpenSSL objects for `configuration` (already validated).
    /// - Throws: ``PeerSyncError/Code/invalidCertificate`` when the identity cannot be used,
    ///   ``PeerSyncError/Code/invalidArgument`` for a server name that cannot be sent as SNI,
    ///   ``PeerSyncError/Code/cryptoFailure`` when OpenSSL fails.
    init(configuration: TLSConfiguration) throws(PeerSyncError) {
        role = configuration.role
        switch configuration.role {
        case .client:
            if let callback = configuration.serverCertificateCallback {
                session = TrustSession(mode: .serverCallback(callback))
            } else {
                session = TrustSession(mode: .server(configuration.serverTrust, hostname: configuration.serverName))
            }
        case .server:
            session = TrustSession(mode: .client(configuration.clientCertificateValidation ?? .callback({ _ in true })))
        }
        let context = try TLSEngine.makeContext(configuration)
        let ssl = try SSLHandle(context: context, role: configuration.role, delegate: session)
        if configuration.role == .client, let name = configuration.serverName, !IPAddress.isLiteral(name),
           !(name.hasPrefix("[") && name.hasSuffix("]")) {
            try ssl.setServerNameIndication(name)
        }
        state = LockedValue(State(ssl: ssl))
    }

    /// The OpenSSL settings for `configuration`: versions, no resumption, our identity, and
    /// who verifies whom.
    private static func makeContext(_ configuration: TLSConfiguration) throws(PeerSyncError) -> SSLContext {
        let context = try SSLContext(role: configuration.role)
        try context.setProtocolVersions(minimum: configuration.minimumVersion, maximum: configuration.maximumVersion)
        try context.disableSessionResumption()
        if let identity = configuration.identity {
            let chain = try identity.chainHandles()
            try context.useIdentity(leaf: chain.leaf, key: identity.privateKey, chain: chain.issuers)
        }
        switch configuration.role {
        case .client:
            context.verifyPeerWithDelegate(requireCertificate: false)
            if configuration.identity == nil { context.reportCertificateRequests() }
        case .server:
            if configuration.clientCertificateValidation != nil {
                context.verifyPeerWithDelegate(requireCertificate: true)
            } else {
                context.requestNoPeerCertificate()
            }
        }
        return context
    }

    // MARK: Steps (each one critical section)

    func handshakeStep() -> TLSStep {
        state.withLock { s in
            if let failure = s.failure { return .failed(failure) }
            let step = classify(&s, s.ssl.handshake(), handshake: true)
            if case .done = step { s.handshakeDone = true }
            s.collectOutput()
            return step
        }
    }

    func readStep(maxBytes: Int) -> ([UInt8]?, TLSStep) {
        state.withLock { s in
            if let failure = s.failure { return (nil, .failed(failure)) }
            let (bytes, result) = s.ssl.read(maxBytes: maxBytes)
            let step = classify(&s, result, handshake: false)
            s.collectOutput()
            return (bytes, step)
        }
    }

    func writeStep(_ bytes: ArraySlice<UInt8>) throws(PeerSyncError) {
        try state.withLock { (s: inout State) throws(PeerSyncError) in
            if let failure = s.failure { throw failure }
            if s.sentCloseNotify { throw PeerSyncError(.closed, "the TLS stream's output is shut down") }
            guard !bytes.isEmpty else { return }
            let result = s.ssl.write(bytes)
            let step = classify(&s, result, handshake: false)
            s.collectOutput()
            switch step {
            case .done:
                if case .done(let written) = result, written != bytes.count {
                    throw PeerSyncError(.internalError, "SSL_write wrote \(written) of \(bytes.count) bytes")
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
            s.ssl.shutdown()
            s.collectOutput()
            return true
        }
    }

    /// Hands ciphertext received from the peer to OpenSSL.
    func feed(_ bytes: [UInt8]) throws(PeerSyncError) {
        try state.withLock { (s: inout State) throws(PeerSyncError) in
            if let failure = s.failure { throw failure }
            try s.ssl.feed(bytes)
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
        state.withLock { s in (s.ssl.protocolVersion ?? .v1_2, s.ssl.cipherSuite, s.ssl.serverName) }
    }

    // MARK: Failures (called with the lock held)

    /// Turns an SSL call's result into a step; fatal errors are remembered in `s.failure`.
    private func classify(_ s: inout State, _ result: SSLResult, handshake: Bool) -> TLSStep {
        switch result {
        case .done: return .done
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .closed
        case .failed(let queued):
            let error = failure(queued, handshake: handshake)
            s.failure = error
            return .failed(error)
        }
    }

    /// The typed error for a failed SSL call: our trust verdict if we rejected the peer,
    /// else what OpenSSL's error queue says (an alert from the peer, a missing client
    /// certificate, a protocol error).
    private func failure(_ queued: [OpenSSLError], handshake: Bool) -> PeerSyncError {
        if let verdict = session.failure { return verdict }
        let tlsErrors = queued.filter(\.isFromTLSLibrary)
        let cause = tlsErrors.isEmpty ? queued : tlsErrors
        if cause.last?.isMissingPeerCertificate == true {
            return OpenSSL.error(.untrustedCertificate, "the client presented no certificate but one is required",
                                 context: ["reason": CertificateTrustFailure.noCertificate.rawValue], queued: cause)
        }
        if let alert = cause.last?.receivedTLSAlert {
            let context = ["alert": "\(alert)"]
            if alert == 40, role == .client, session.certificateRequestedButMissing {
                return OpenSSL.error(.certificateRejected,
                                     "the server requires a client certificate and none is configured (TLS alert handshake_failure)",
                                     context: context, queued: cause)
            }
            if TLSAlert.certificateAlerts.contains(alert) {
                return OpenSSL.error(.certificateRejected,
                                     "the peer rejected our certificate (TLS alert \(TLSAlert.name(alert)))",
                                     context: context, queued: cause)
            }
            return OpenSSL.error(handshake ? .tlsHandshakeFailed : .tlsError,
                                 "the peer sent TLS alert \(TLSAlert.name(alert))", context: context, queued: cause)
        }
        let what = handshake ? "TLS handshake failed" : "TLS failed"
        return OpenSSL.error(handshake ? .tlsHandshakeFailed : .tlsError,
                             cause.isEmpty ? what + ": connection error" : what, queued: cause)
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
