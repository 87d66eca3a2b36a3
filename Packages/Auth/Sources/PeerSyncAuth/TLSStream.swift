import PeerSyncCore

/// TLS over any `ByteStream` (TCP, BLE L2CAP, an in-memory pipe), with OpenSSL 3.
///
/// `TLSStream` is itself a `ByteStream`: after ``handshake(over:configuration:)`` returns,
/// `read`/`write` carry plaintext. OpenSSL never touches a socket: it works on two memory
/// BIOs, and this type moves ciphertext between them and the underlying stream with
/// async/await, so no thread ever blocks on I/O.
///
/// Threading: one `read` and one `write` may run concurrently (the `ByteStream` contract).
/// The OpenSSL object is touched only under one lock, never across an `await`; ciphertext
/// leaves in the order OpenSSL produced it.
///
/// Errors (`PeerSyncError`): `PeerSyncError.Code.untrustedCertificate` (we rejected the
/// peer's certificate; see `PeerSyncError.trustFailure`),
/// `PeerSyncError.Code.certificateRejected` (the peer rejected ours — with TLS 1.3 a client
/// learns this on its first `read` after the handshake),
/// `PeerSyncError.Code.tlsHandshakeFailed`, `PeerSyncError.Code.tlsError`,
/// `PeerSyncError.Code.timeout`, `PeerSyncError.Code.closed`, and errors of the
/// underlying stream (passed through; non-PeerSync errors become `PeerSyncError.Code.io`).
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
    private let connection: TLSEngine
    private let writeGate = AsyncLock()

    /// The peer's leaf certificate, if it sent one.
    public var peerCertificate: Certificate? { peerCertificateChain.first }
    public var remoteAddress: String? { underlying.remoteAddress }

    private init(underlying: any ByteStream, connection: TLSEngine, configuration: TLSConfiguration,
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
    /// the error says why; trust failures are `PeerSyncError.Code.untrustedCertificate`
    /// with a ``CertificateTrustFailure`` reason. Cancelling the task closes the stream.
    public static func handshake(over stream: any ByteStream,
                                 configuration: TLSConfiguration) async throws(PeerSyncError) -> TLSStream {
        try configuration.validate()
        let connection = try TLSEngine(configuration: configuration)
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
    private static func race(connection: TLSEngine, stream: any ByteStream, configuration: TLSConfiguration,
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

    private static func run(connection: TLSEngine, over stream: any ByteStream,
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
    /// `PeerSyncError.Code.tlsError` (the data may have been truncated).
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
                do { bytes = try await underlying.read(maxBytes: 64 * 1024) } catch { throw mapUnderlying(error) }
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
        let chunkSize = 256 * 1024
        while offset < bytes.count {
            let end = min(offset + chunkSize, bytes.count)
            try connection.writeStep(bytes[offset..<end])
            try await flush()
            offset = end
        }
    }

    /// Sends TLS `close_notify`, then half-closes the underlying stream. Reading continues
    /// until the peer closes; further writes throw `PeerSyncError.Code.closed`.
    public func shutdownOutput() async {
        if connection.shutdownStep() {
            try? await flush()
            await underlying.shutdownOutput()
        }
    }

    /// Sends TLS `close_notify` if it can without waiting for a stalled writer, then closes
    /// the underlying stream. Idempotent; pending reads and writes end with
    /// `PeerSyncError.Code.closed`.
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

/// A boolean that is set once, from any task.
final class Flag: Sendable {
    private let value = LockedValue(false)
    func set() { value.withLock { $0 = true } }
    var isSet: Bool { value.withLock { $0 } }
}
