#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncWebSocketCodec
import Synchronization

/// Settings of an open WebSocket connection, both roles.
public struct WebSocketConfiguration: Sendable, Hashable {
    /// The largest message sent or received, in bytes. A larger incoming frame or message
    /// closes the connection with 1009; a larger outgoing one throws `.tooLarge`.
    /// Default 32 MiB.
    public var maxMessageSize: Int = 32 << 20
    /// How often a ping is sent (Couchbase Lite's `heartbeat`, default 300 s); nil: never.
    public var heartbeatInterval: Duration? = .seconds(300)
    /// How long after a ping the peer may stay silent before the connection is dropped as
    /// dead (`receive` then throws `.timeout`). Any frame counts as an answer. Default 30 s.
    public var deadPeerTimeout: Duration = .seconds(30)
    /// How long ``WebSocketConnection/close(code:reason:)`` waits for the peer's close
    /// frame (and a client for the server's TCP close) before dropping the link. Default 5 s.
    public var closeTimeout: Duration = .seconds(5)
    /// Outgoing messages larger than this are sent as several frames (fragmentation);
    /// nil: one frame per message. Default nil.
    public var fragmentSize: Int? = nil
    /// Incoming messages buffered until ``WebSocketConnection/receive()`` takes them; when
    /// full, the connection stops reading the socket (TCP backpressure). Default 64 / 4 MiB.
    public var receiveBufferMessages: Int = 64
    /// The bytes of that buffer (a single larger message still fits alone). Default 4 MiB.
    public var receiveBufferBytes: Int = 4 << 20
    /// Outgoing bytes buffered before `send` suspends. Default 1 MiB.
    public var sendBufferBytes: Int = 1 << 20

    /// The defaults listed with each property.
    public init() {}
}

/// One RFC 6455 WebSocket over any `ByteStream` (TCP, TLS over TCP, a BLE channel, ...),
/// after the opening handshake. Conforms to `MessageConnection` (see its contract: send,
/// receive, close, backpressure, errors).
///
/// Internals: a reader task decodes frames (`WebSocketFrameDecoder`), answers pings, and
/// feeds a bounded queue that ``receive()`` reads; a writer task drains a bounded outbound
/// queue (control frames first, data in order, the close frame last) and batches small frames
/// into one write; an optional heartbeat task sends pings. None of them holds a thread while
/// idle. A protocol violation by the peer closes with 1002 (1007 for invalid UTF-8, 1009 for
/// an oversized message) and `receive` throws the `PeerSyncError`. Dropping the last
/// reference to an open connection drops the link without a close handshake.
///
/// Cancellation: a `send` waiting for room in the send buffer throws `.cancelled` and sends
/// nothing; a large message (8 KiB or more) that its sender is already writing to the socket
/// is finished (or fails with the link) even if the task is cancelled, so a frame is never
/// cut.
///
/// Use ``WebSocketTransport`` / ``WebSocketServer`` to get connections over TCP; call
/// ``init(stream:role:configuration:subprotocol:initialBytes:peerCertificateChain:kind:handshakeRequest:handshakeResponse:authenticatedUser:partialMessageBudget:)``
/// yourself to run WebSocket framing over another byte stream after your own handshake.
public final class WebSocketConnection: MessageConnection {
    /// Client (masks its frames) or server.
    public let role: WebSocketRole
    /// The settings it runs with.
    public let configuration: WebSocketConfiguration
    /// The subprotocol agreed in the handshake, if any.
    public let subprotocol: String?
    public let peerCertificateChain: [[UInt8]]
    public let kind: TransportKind
    public let remoteAddress: String?
    public var maxMessageSize: Int { configuration.maxMessageSize }
    /// The upgrade request (server side: as received; client side: as sent).
    public let handshakeRequest: HTTPRequest?
    /// The 101 answer (client side: as received; server side: as sent).
    public let handshakeResponse: HTTPResponse?
    /// The user name the server's authentication hook accepted, if any (server side).
    public let authenticatedUser: String?

    private let engine: WebSocketEngine

    /// Starts the WebSocket protocol on `stream`, whose opening handshake is done.
    /// `initialBytes` are bytes already read past the handshake (the start of the first
    /// frames). The connection owns the stream from now on and closes it when it ends.
    /// `partialMessageBudget`: a memory budget for unfinished incoming messages shared with
    /// other connections (a ``WebSocketServer`` passes its own); when this connection's
    /// partial message would take it over its limit, the connection closes with 1009 and
    /// `receive` throws `.tooLarge`. nil: only ``WebSocketConfiguration/maxMessageSize``
    /// applies.
    public convenience init(stream: any ByteStream, role: WebSocketRole, configuration: WebSocketConfiguration = WebSocketConfiguration(),
                            subprotocol: String? = nil, initialBytes: [UInt8] = [], peerCertificateChain: [[UInt8]] = [],
                            kind: TransportKind = .webSocket, handshakeRequest: HTTPRequest? = nil,
                            handshakeResponse: HTTPResponse? = nil, authenticatedUser: String? = nil,
                            partialMessageBudget: PartialMessageBudget? = nil) {
        self.init(stream: stream, role: role, configuration: configuration, subprotocol: subprotocol,
                  initialBytes: initialBytes, peerCertificateChain: peerCertificateChain, kind: kind,
                  handshakeRequest: handshakeRequest, handshakeResponse: handshakeResponse,
                  authenticatedUser: authenticatedUser, partialMessageBudget: partialMessageBudget, lifetimes: nil)
    }

    /// The designated initializer; `lifetimes` counts the connection's machinery while it is
    /// alive (a ``WebSocketServer`` counts its connections with it).
    init(stream: any ByteStream, role: WebSocketRole, configuration: WebSocketConfiguration,
         subprotocol: String?, initialBytes: [UInt8], peerCertificateChain: [[UInt8]],
         kind: TransportKind, handshakeRequest: HTTPRequest?, handshakeResponse: HTTPResponse?,
         authenticatedUser: String?, partialMessageBudget: PartialMessageBudget?, lifetimes: LiveCount?) {
        self.role = role
        self.configuration = configuration
        self.subprotocol = subprotocol
        self.peerCertificateChain = peerCertificateChain
        self.kind = kind
        self.remoteAddress = stream.remoteAddress
        self.handshakeRequest = handshakeRequest
        self.handshakeResponse = handshakeResponse
        self.authenticatedUser = authenticatedUser
        engine = WebSocketEngine(stream: stream, role: role, configuration: configuration,
                                 partialMessageBudget: partialMessageBudget, lifetimes: lifetimes)
        engine.start(initialBytes: initialBytes)
    }

    deinit {
        engine.drop()
    }

    public var closeInfo: CloseInfo? { engine.closeInfo }

    public func send(_ message: TransportMessage) async throws { try await engine.send(message) }

    public func receive() async throws -> TransportMessage? { try await engine.receive() }

    public func close(code: CloseCode, reason: String) async { await engine.close(code: code, reason: reason) }

    /// Sends a ping now (ahead of queued data). Returns false if the connection is closing.
    @discardableResult
    public func ping(_ payload: [UInt8] = []) -> Bool { engine.ping(payload) }

    /// Drops the link at once, without a close handshake (the peer sees the TCP connection
    /// end; ``closeInfo`` becomes `CloseCode.abnormalClosure`). For emergencies and tests;
    /// prefer ``close(code:reason:)``.
    public func abort() async { await engine.abort() }
}

/// The protocol machinery behind a ``WebSocketConnection``, owned by its tasks (so the public
/// handle can be dropped while they run). All mutable state is in `state` (a LockedValue) or in
/// the thread-safe queues.
final class WebSocketEngine: Sendable {
    let role: WebSocketRole
    let configuration: WebSocketConfiguration
    private let stream: any ByteStream
    private let partialMessageBudget: PartialMessageBudget?
    private let lifetimes: LiveCount?
    private let incoming: InboundQueue
    private let outbound: OutboundQueue
    private let state = LockedValue(State())
    private let lastActivity = Atomic<Int64>(monotonicNanoseconds())
    /// Written frames kept for reuse by `encodeMessage` (at most 4).
    private let recycledFrames = LockedValue<[[UInt8]]>([])

    private struct State {
        var closeInfo: CloseInfo?
        var closeSent = false
        var closeReceived = false
        var finished = false
        var finishWaiters: [CheckedContinuation<Void, Never>] = []
        var heartbeat: Task<Void, Never>?
    }

    init(stream: any ByteStream, role: WebSocketRole, configuration: WebSocketConfiguration,
         partialMessageBudget: PartialMessageBudget?, lifetimes: LiveCount?) {
        self.stream = stream
        self.partialMessageBudget = partialMessageBudget
        self.lifetimes = lifetimes
        lifetimes?.add(1)
        self.role = role
        self.configuration = configuration
        incoming = InboundQueue(maxCount: configuration.receiveBufferMessages,
                                maxBytes: configuration.receiveBufferBytes)
        outbound = OutboundQueue(limit: configuration.sendBufferBytes)
    }

    deinit {
        lifetimes?.add(-1)
    }

    func start(initialBytes: [UInt8]) {
        Task { [self] in await self.readLoop(initialBytes: initialBytes) }
        Task { [self] in await self.writeLoop() }
        if let interval = configuration.heartbeatInterval {
            let heartbeat = Task { [self] in await self.heartbeatLoop(interval: interval) }
            state.withLock { $0.heartbeat = heartbeat }
        }
    }

    /// The public handle was released while the link is open: drop it without a handshake.
    func drop() {
        let open = state.withLock { !$0.finished }
        guard open else { return }
        Task { [self] in
            await self.finish(abnormal: PeerSyncError(.connectionReset, "the WebSocket connection was released without closing"))
        }
    }

    var closeInfo: CloseInfo? { state.withLock { $0.closeInfo } }

    func abort() async {
        await finish(abnormal: PeerSyncError(.connectionReset, "the WebSocket connection was aborted"))
    }

    // MARK: Sending

    func send(_ message: TransportMessage) async throws {
        let size = message.byteCount
        if size > configuration.maxMessageSize {
            throw PeerSyncError(.tooLarge, "message of \(size) bytes exceeds the maximum of \(configuration.maxMessageSize)",
                                context: ["limit": String(configuration.maxMessageSize)])
        }
        try checkOpenForSending()
        let frame: [UInt8]
        switch message {
        case .binary(let bytes):
            frame = bytes.withUnsafeBytes { encodeMessage(.binary, $0) }
        case .text(var text):
            frame = text.withUTF8 { encodeMessage(.text, UnsafeRawBufferPointer($0)) }
        }
        if frame.count >= Self.directWriteMinimum, let tcp = stream as? TCPStream, outbound.tryBeginDirectWrite() {
            // A large frame and nothing queued or being written: write it ourselves, saving a
            // task switch (small frames go through the writer, which batches them into few
            // syscalls). The write is not cancellable halfway: a partial frame would corrupt
            // the stream.
            do {
                try await tcp.write(frame, cancellable: false)
            } catch {
                let broken = PeerSyncError(.connectionReset, "writing to the WebSocket failed: \(error)")
                outbound.fail(broken)
                outbound.endDirectWrite()
                await stream.close()  // the reader then ends the connection
                throw state.withLock { $0.closeSent } ? PeerSyncError(.connectionClosed, "the WebSocket connection closed while sending") : broken
            }
            outbound.endDirectWrite()
            recycle(frame)
            return
        }
        try await outbound.send(frame)
    }

    private func checkOpenForSending() throws {
        let info = state.withLock { s -> (closed: Bool, info: CloseInfo?) in (s.closeSent || s.closeReceived || s.finished, s.closeInfo) }
        guard info.closed else { return }
        if let closeInfo = info.info, !closeInfo.wasClean {
            throw PeerSyncError(.connectionReset, "the WebSocket connection broke", context: ["close": closeInfo.description])
        }
        throw PeerSyncError(.connectionClosed, "the WebSocket connection is closed")
    }

    private func makeMask() -> UInt32? {
        guard role == .client else { return nil }
        var generator = SystemRandomNumberGenerator()
        return generator.next()
    }

    /// The frame(s) of one message: one frame, or fragments of `fragmentSize` bytes. Large
    /// single frames reuse a buffer the writer gave back when one is available.
    private func encodeMessage(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer) -> [UInt8] {
        guard let fragmentSize = configuration.fragmentSize, fragmentSize > 0, payload.count > fragmentSize else {
            let mask = makeMask()
            let total = WebSocketFrameEncoder.headerSize(payloadLength: payload.count, masked: mask != nil) + payload.count
            if total >= Self.recycledFrameMinimum, var buffer = takeRecycledFrame(capacity: total) {
                if buffer.count > total {
                    buffer.removeLast(buffer.count - total)
                } else if buffer.count < total {
                    buffer.append(contentsOf: repeatElement(0, count: total - buffer.count))
                }
                let written = buffer.withUnsafeMutableBytes {
                    WebSocketFrameEncoder.encode(into: $0, opcode: opcode, payload: payload, mask: mask)
                }
                if written == total { return buffer }
            }
            return WebSocketFrameEncoder.encode(opcode: opcode, payload: payload, mask: mask)
        }
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + (payload.count / fragmentSize + 1) * 14)
        var offset = 0
        while offset < payload.count {
            let end = min(payload.count, offset + fragmentSize)
            let piece = UnsafeRawBufferPointer(rebasing: payload[offset..<end])
            out += WebSocketFrameEncoder.encode(opcode: offset == 0 ? opcode : .continuation, fin: end == payload.count,
                                                payload: piece, mask: makeMask())
            offset = end
        }
        return out
    }

    /// Frames of at least this size are written by their sender when the writer is idle.
    static let directWriteMinimum = 8 * 1024

    /// Frames of at least this size are recycled: fewer large allocations, so the allocator
    /// does not hand pages back to the kernel and fault them in again for every message.
    static let recycledFrameMinimum = 16 * 1024

    private func takeRecycledFrame(capacity: Int) -> [UInt8]? {
        recycledFrames.withLock { pool -> [UInt8]? in
            guard let index = pool.lastIndex(where: { $0.capacity >= capacity }) else { return nil }
            return pool.remove(at: index)
        }
    }

    /// Called by the writer with a frame it wrote and no longer references.
    private func recycle(_ frame: consuming [UInt8]) {
        let frame = frame
        guard frame.capacity >= Self.recycledFrameMinimum else { return }
        recycledFrames.withLock { pool in
            if pool.count < 4 { pool.append(frame) }
        }
    }

    private func controlFrame(_ opcode: WebSocketOpcode, _ payload: [UInt8]) -> [UInt8] {
        WebSocketFrameEncoder.encode(opcode: opcode, payload: payload, mask: makeMask())
    }

    func ping(_ payload: [UInt8]) -> Bool {
        outbound.sendControl(controlFrame(.ping, Array(payload.prefix(125))))
    }

    // MARK: Receiving

    func receive() async throws -> TransportMessage? {
        try await incoming.receive()
    }

    // MARK: Closing

    func close(code: CloseCode, reason: String) async {
        let sendable = code.isSendable ? code : .normal
        let info = CloseInfo(code: sendable, reason: reason)
        let initiate = state.withLock { s -> Bool in
            guard !s.closeSent && !s.finished else { return false }
            s.closeSent = true
            if s.closeInfo == nil { s.closeInfo = info }
            return true
        }
        if initiate {
            // Messages not yet received are discarded; `receive` now returns nil.
            incoming.finish(discardingBuffered: true)
            outbound.sendClose(controlFrame(.close, WebSocketFrameEncoder.closePayload(code: sendable.rawValue, reason: info.reason)),
                               urgent: false)
        }
        await waitUntilFinished(timeout: configuration.closeTimeout)
    }

    /// Waits for the link to end; after `timeout`, drops it.
    private func waitUntilFinished(timeout: Duration) async {
        let timer = Task { [stream] in
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { await stream.close() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.finished { return true }
                s.finishWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
        timer.cancel()
    }

    /// Ends everything once: queues, heartbeat, the stream; wakes `close` callers.
    private func finish(abnormal error: PeerSyncError?) async {
        let (first, waiters, heartbeat) = state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>], Task<Void, Never>?) in
            if s.finished { return (false, [], nil) }
            s.finished = true
            if let error, s.closeInfo == nil {
                let code: CloseCode = error.code == .protocolError || error.code == .invalidUTF8 || error.code == .tooLarge
                    ? CloseCode(rawValue: error.webSocketCloseCode) : .abnormalClosure
                s.closeInfo = CloseInfo(code: code, reason: error.message)
            }
            if s.closeInfo == nil { s.closeInfo = CloseInfo(code: .abnormalClosure, reason: "connection ended") }
            let waiters = s.finishWaiters
            s.finishWaiters = []
            let heartbeat = s.heartbeat
            s.heartbeat = nil
            return (true, waiters, heartbeat)
        }
        guard first else { return }
        heartbeat?.cancel()
        incoming.finish(throwing: error)
        outbound.fail(error ?? PeerSyncError(.connectionClosed, "the WebSocket connection is closed"))
        await stream.close()
        for waiter in waiters { waiter.resume() }
    }

    // MARK: Tasks

    private func noteActivity() {
        lastActivity.store(monotonicNanoseconds(), ordering: .relaxed)
    }

    private func readLoop(initialBytes: [UInt8]) async {
        var decoder = WebSocketFrameDecoder(role: role == .client ? .client : .server,
                                            maxMessageSize: configuration.maxMessageSize)
        var events: [WebSocketFrameDecoder.Event] = []
        var share = PartialMessageShare(budget: partialMessageBudget)
        defer { share.release() }
        do {
            if !initialBytes.isEmpty {
                let failure = initialBytes.withUnsafeBytes { Self.decode($0, &decoder, &events, &share) }
                if await handle(events) { return }
                if let failure { throw failure }
            }
            if let tcp = stream as? TCPStream {
                // Fast path: read into a pooled buffer, decode straight from it.
                while true {
                    let scratch = ScratchBuffer.take()
                    var ended = false
                    do {
                        // Read until the socket says EAGAIN (nil) or EOF (0). A short read does not
                        // mean "empty": the peer's FIN may have come with the same readiness edge
                        // (edge-triggered epoll reports it once), and waiting instead of reading it
                        // left a dropped connection — and its buffers — alive forever.
                        while true {
                            guard let n = try tcp.readAvailable(into: scratch.bytes) else { break }
                            if n == 0 {
                                ended = true
                                break
                            }
                            noteActivity()
                            events.removeAll(keepingCapacity: true)
                            let failure = Self.decode(UnsafeRawBufferPointer(rebasing: scratch.bytes[0..<n]), &decoder, &events, &share)
                            if await handle(events) {
                                ScratchBuffer.giveBack(scratch)
                                return
                            }
                            if let failure { throw failure }
                        }
                    } catch {
                        ScratchBuffer.giveBack(scratch)
                        throw error
                    }
                    ScratchBuffer.giveBack(scratch)
                    if ended {
                        await finish(abnormal: PeerSyncError(.connectionReset, "the peer closed the TCP connection without a WebSocket close"))
                        return
                    }
                    try await tcp.waitUntilReadable()
                }
            }
            // TLSStream hands out as many records as it has opened (up to the size asked for).
            let readSize = 64 * 1024
            while true {
                guard let bytes = try await stream.read(maxBytes: readSize) else {
                    await finish(abnormal: PeerSyncError(.connectionReset, "the peer closed the connection without a WebSocket close"))
                    return
                }
                noteActivity()
                events.removeAll(keepingCapacity: true)
                let failure = bytes.withUnsafeBytes { Self.decode($0, &decoder, &events, &share) }
                if await handle(events) { return }
                if let failure { throw failure }
            }
        } catch let error as PeerSyncError where error.code == .protocolError || error.code == .invalidUTF8 || error.code == .tooLarge {
            await protocolViolation(error)
        } catch let error as PeerSyncError where error.code == .closed {
            // Our own side closed the stream (close timeout, dead peer, finish).
            await finish(abnormal: state.withLock { $0.closeInfo } == nil
                         ? PeerSyncError(.connectionReset, "the WebSocket connection was dropped") : nil)
        } catch let error as PeerSyncError {
            await finish(abnormal: error.code == .connectionReset ? error
                         : PeerSyncError(.connectionReset, "the WebSocket connection broke: \(error.message)", context: error.context))
        } catch {
            await finish(abnormal: PeerSyncError(.connectionReset, "the WebSocket connection broke: \(error)"))
        }
    }

    /// Decodes `bytes` into `events` and brings `share` to the partial message the decoder
    /// then holds; returns the decoding or budget error (events before it are kept).
    private static func decode(_ bytes: UnsafeRawBufferPointer, _ decoder: inout WebSocketFrameDecoder,
                               _ events: inout [WebSocketFrameDecoder.Event],
                               _ share: inout PartialMessageShare) -> PeerSyncError? {
        do throws(PeerSyncError) {
            try decoder.decode(bytes, into: &events)
        } catch {
            share.release()  // the decoder dropped its partial message
            return error
        }
        return account(&decoder, &share)
    }

    /// Brings the reader's share of the partial-message budget to what the decoder now holds.
    /// If the budget refuses the growth, the partial message is dropped (its memory freed at
    /// once, not after the close handshake) and a `.tooLarge` error (close code 1009) returned.
    private static func account(_ decoder: inout WebSocketFrameDecoder, _ share: inout PartialMessageShare) -> PeerSyncError? {
        guard let budget = share.budget else { return nil }
        let partial = decoder.partialMessageByteCount
        if share.resize(to: partial) { return nil }
        decoder.stop()
        share.release()
        return PeerSyncError(.tooLarge,
                             "message too big: unfinished incoming messages would exceed this server's limit of \(budget.limit) bytes",
                             context: ["limit": String(budget.limit), "buffered": String(partial)])
    }

    /// Acts on decoded events; returns true once the peer's close frame was handled (the
    /// read loop then ends). Consecutive messages are handed to the receive queue as one batch
    /// (after our own close the queue is finished and drops them).
    private func handle(_ events: [WebSocketFrameDecoder.Event]) async -> Bool {
        var batch: [TransportMessage] = []
        for event in events {
            switch event {
            case .text(let text):
                batch.append(.text(text))
            case .binary(let bytes):
                batch.append(.binary(bytes))
            case .ping(let payload):
                outbound.sendControl(controlFrame(.pong, payload))
            case .pong:
                break
            case .close(let code, let reason):
                if !batch.isEmpty { await incoming.send(batch) }
                await peerClosed(code: code, reason: reason)
                return true
            }
        }
        if !batch.isEmpty { await incoming.send(batch) }
        return false
    }

    /// The peer's close frame arrived: answer it (if we did not close first), let the
    /// writer flush, then end the link (a client lets the server close TCP first).
    private func peerClosed(code: UInt16?, reason: String) async {
        let answer = state.withLock { s -> Bool in
            s.closeReceived = true
            if s.closeSent { return false }
            s.closeSent = true
            if s.closeInfo == nil {
                s.closeInfo = CloseInfo(code: code.map { CloseCode(rawValue: $0) } ?? .noStatusReceived, reason: reason)
            }
            return true
        }
        incoming.finish()
        if answer {
            outbound.sendClose(controlFrame(.close, WebSocketFrameEncoder.closePayload(code: code, reason: "")), urgent: false)
        }
        await lingerThenFinish()
    }

    /// After the close handshake: wait (bounded) for our close to be written; a client then
    /// waits for the server to close the TCP connection.
    private func lingerThenFinish() async {
        let stream = self.stream
        let role = self.role
        let outbound = self.outbound
        let timeout = configuration.closeTimeout
        let timer = Task {
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { await stream.close() }
        }
        await outbound.waitUntilCloseWrittenOrFailed()
        if role == .client {
            // Drain until the server closes (or the timer closes the stream).
            while let _ = try? await stream.read(maxBytes: 4096) {}
        }
        timer.cancel()
        await finish(abnormal: nil)
    }

    private func protocolViolation(_ error: PeerSyncError) async {
        Logger(.network).info("WebSocket protocol error from \(stream.remoteAddress ?? "?"): \(error)")
        let code = error.webSocketCloseCode
        state.withLock { s in
            s.closeSent = true
            if s.closeInfo == nil { s.closeInfo = CloseInfo(code: CloseCode(rawValue: code), reason: error.message) }
        }
        incoming.finish(throwing: error)
        let reason = CloseInfo.truncatedReason(error.message)
        outbound.sendClose(controlFrame(.close, WebSocketFrameEncoder.closePayload(code: code, reason: reason)), urgent: true)
        let timer = Task { [stream, timeout = configuration.closeTimeout] in
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { await stream.close() }
        }
        await outbound.waitUntilCloseWrittenOrFailed()
        // Let the peer read the close frame and its reason: end our side, then read and
        // discard what it is still sending until it closes (or the timer drops the link).
        // Closing with unread input would reset the connection, and a reset can discard the
        // close frame before the peer reads it. Nothing read here is kept.
        await stream.shutdownOutput()
        while let _ = try? await stream.read(maxBytes: 64 * 1024) {}
        timer.cancel()
        await finish(abnormal: error)
    }

    private func writeLoop() async {
        // On TCP, large frames are written as they are (no copy) and small ones are batched;
        // on other streams (TLS) a whole batch goes down in one write, so the layer below sees
        // few large writes instead of a record per frame header.
        let coalesceAll = !(stream is TCPStream)
        while var batch = await outbound.nextBatch() {
            do {
                if batch.frames.count == 1 {
                    let only = batch.frames[0]
                    batch.frames = []
                    try await stream.write(only)
                    if !coalesceAll { recycle(only) }
                } else if coalesceAll {
                    var all: [UInt8] = []
                    all.reserveCapacity(batch.frames.reduce(0) { $0 + $1.count })
                    for frame in batch.frames { all += frame }
                    try await stream.write(all)
                } else {
                    var pending: [UInt8] = []
                    let frames = batch.frames
                    batch.frames = []
                    for frame in frames {
                        if frame.count >= 16 * 1024 {
                            if !pending.isEmpty {
                                try await stream.write(pending)
                                pending = []
                            }
                            try await stream.write(frame)
                        } else {
                            pending += frame
                        }
                    }
                    if !pending.isEmpty { try await stream.write(pending) }
                }
            } catch {
                let broken = PeerSyncError(.connectionReset, "writing to the WebSocket failed: \(error)")
                outbound.fail(broken)
                await stream.close()  // the reader then ends the connection
                return
            }
            outbound.endBatch()
            if batch.containsClose {
                outbound.markCloseWritten()
                return
            }
        }
    }

    private func heartbeatLoop(interval: Duration) async {
        let timeout = configuration.deadPeerTimeout
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            let sentAt = monotonicNanoseconds()
            guard outbound.sendControl(controlFrame(.ping, [])) else { return }
            do { try await Task.sleep(for: timeout) } catch { return }
            if lastActivity.load(ordering: .relaxed) < sentAt {
                Logger(.network).info("WebSocket peer \(stream.remoteAddress ?? "?") silent for \(timeout) after a ping; dropping it")
                await finish(abnormal: PeerSyncError(.timeout, "the peer did not answer a ping within \(timeout)"))
                return
            }
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
func monotonicNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}
