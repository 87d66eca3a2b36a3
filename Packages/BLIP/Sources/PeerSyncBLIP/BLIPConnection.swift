import PeerSyncCore

/// Carries BLIP frames: one frame per binary message of the underlying link (a WebSocket
/// binary message, a loopback message, ...). `PeerSyncTransport`'s `MessageConnection` is
/// adapted to this; tests can implement it in memory.
public protocol BLIPFrameChannel: Sendable {
    /// Sends one frame. Suspends while the link applies backpressure.
    func sendFrame(_ frame: [UInt8]) async throws
    /// The next frame, or nil when the peer closed cleanly.
    func receiveFrame() async throws -> [UInt8]?
    /// Closes the link with a WebSocket-style close code (1000 normal, 1002 protocol error,
    /// 1011 internal error) and a reason.
    func close(code: Int, reason: String) async
}

/// An incoming request handed to a handler.
public struct BLIPRequest: Sendable {
    /// The whole request as received (its body assembled).
    public let message: BLIPMessage
    /// The request's `Profile` property: which handler it went to.
    public var profile: String? { message.profile }
    /// The request's properties, in the order sent.
    public var properties: BLIPProperties { message.properties }
    /// The request's body, decompressed.
    public var body: [UInt8] { message.body }
    /// Whether the sender expects no response (any response returned is dropped).
    public var noReply: Bool { message.flags.contains(.noReply) }
}

/// How a connection ended.
public enum BLIPCloseReason: Sendable, Equatable {
    /// Closed by us or by the peer, cleanly.
    case normal
    /// Ended by an error (protocol violation, broken link); the error says which.
    case error(PeerSyncError)
}

/// A BLIP connection: request/response messaging over a ``BLIPFrameChannel`` with the
/// protocol's framing, compression, checksums, flow control and scheduling.
///
/// Requests are numbered and sent with ``sendRequest(_:)``, which returns the response (an
/// `.error` type message is returned, not thrown; transport failures are thrown). Incoming
/// requests go to the handler registered for their `Profile` with `setHandler(profile:_:)`,
/// one at a time in the order they complete; a handler that needs concurrency starts its own
/// tasks. The handler's return value is the response (nil = empty success); a thrown
/// `PeerSyncError` becomes an error response: the ``BLIPError`` it carries
/// (`PeerSyncError.blipError`), else `BLIP`/500 with its message. A request with no handler gets `BLIP`/404, as LiteCore answers.
///
/// Any protocol violation closes the connection with code 1002 (or 1011 for internal
/// failures) and ends every pending request with the error.
///
/// Streamed bodies: a request (``sendRequest(_:body:)``) or a response (a handler registered
/// with ``setStreamingHandler(profile:concurrent:_:)`` returning ``BLIPReply/streamed(_:body:)``)
/// can take its body from a ``BLIPBodySource`` pulled only as frames are written, and a
/// response can be received chunk by chunk (``sendRequestStreamingResponse(_:body:)``) with
/// ACKs sent only as the consumer takes the data, so neither side holds a large body in
/// memory. Incoming *requests* are always assembled whole (up to
/// ``BLIPTuning/maxMessageSize``).
public actor BLIPConnection {
    /// Answers a request: the response to send, or nil to send an empty one. A thrown
    /// `PeerSyncError` is sent as an error reply (exactly the `BLIPError` it carries, if any); any
    /// other error as `BLIP`/500.
    public typealias Handler = @Sendable (BLIPRequest) async throws -> BLIPMessage?
    /// A handler that may answer with a streamed body.
    public typealias StreamingHandler = @Sendable (BLIPRequest) async throws -> BLIPReply?

    private struct Outgoing {
        var message: BLIPMessage
        /// The encoded bytes not yet framed start at `offset` (a streamed body appends here).
        var content: [UInt8]
        var offset = 0
        var begun = false
        var sentCounted: UInt64 = 0
        var ackedCounted: UInt64 = 0
        /// The id of its body source in `outStreams`; nil for a whole message.
        var streamID: UInt64?
        var isUrgent: Bool { message.flags.contains(.urgent) }
        var buffered: Int { content.count - offset }
    }

    /// The source side of an outgoing streamed body.
    private struct OutStream {
        /// The source ended: everything is in the message's `content`.
        var finished = false
        /// The pump waiting for the buffer to drain (resumed with false when it must stop).
        var pumpWaiter: CheckedContinuation<Bool, Never>?
        var pump: Task<Void, Never>?
    }

    /// A streamed response whose properties have not arrived yet.
    private struct StreamHead {
        var continuation: CheckedContinuation<BLIPIncomingResponse, any Error>
        var received: UInt64 = 0
    }

    /// An incoming streamed response body.
    private struct InStream {
        /// Chunks not yet taken, each with the flow-control byte count at its end.
        var chunks: [(bytes: [UInt8], wireEnd: UInt64)] = []
        var buffered = 0
        var received: UInt64 = 0
        var acked: UInt64 = 0
        var complete = false
        var failure: PeerSyncError?
        var abandoned = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private struct PendingResponse {
        /// Nil once the caller gave up (reply timeout, cancellation): the response is still
        /// read (the peer sends it) and dropped.
        var continuation: CheckedContinuation<BLIPMessage, any Error>?
        /// When the writer framed the request's first frame (nil while it waits in the queue):
        /// its reply timeout runs from then.
        var sendingSince: ContinuousClock.Instant?
        var properties: BLIPProperties = [:]
        var flags: BLIPFlags = []
        var type: BLIPMessageType = .response
        var body: [UInt8] = []
    }

    private struct PartialRequest {
        var properties: BLIPProperties
        var flags: BLIPFlags
        var body: [UInt8] = []
    }

    private let channel: any BLIPFrameChannel
    /// The limits and settings this connection was created with.
    public nonisolated let tuning: BLIPTuning
    private let encoder: BLIPFrameEncoder
    private let decoder: BLIPFrameDecoder
    private var handlers: [String: StreamingHandler] = [:]
    private var concurrentProfiles: Set<String> = []
    private var nextRequestNumber: UInt64 = 1
    /// Messages being sent (begun) and responses not begun yet, in queue order. The writer
    /// serves them round-robin (urgent ones first) together with the first of
    /// `queuedRequests`, which takes the slot after the last of them.
    private var outgoing: [Outgoing] = []
    private var roundRobin = 0
    /// Requests not begun yet, in number order: they must start in that order, so only the
    /// first (at `queuedHead`) is ever eligible and the writer never scans the rest (a push
    /// queues hundreds of `rev`s). Entries before `queuedHead` are nil (taken).
    private var queuedRequests: [Outgoing?] = []
    private var queuedHead = 0
    /// How many of `queuedRequests` are urgent.
    private var queuedUrgent = 0
    private var controlFrames: [[UInt8]] = []
    private var pendingResponses: [UInt64: PendingResponse] = [:]
    private var partialRequests: [UInt64: PartialRequest] = [:]
    private var writerWakeup: CheckedContinuation<Void, Never>?
    private var requestQueue: AsyncStream<BLIPRequest>.Continuation?
    private var closeReason: BLIPCloseReason?
    private var closeWaiters: [CheckedContinuation<BLIPCloseReason, Never>] = []
    private var started = false
    private var tasks: [Task<Void, Never>] = []
    /// Requests dispatched to a handler whose response is not built yet (queued or running).
    private var unansweredRequests = 0
    private var handlersFinishedWaiters: [CheckedContinuation<Void, Never>] = []
    private var outStreams: [UInt64: OutStream] = [:]
    private var nextStreamID: UInt64 = 1
    private var streamHeads: [UInt64: StreamHead] = [:]
    private var inStreams: [UInt64: InStream] = [:]
    private var readerWakeup: CheckedContinuation<Void, Never>?
    private var statistics = BLIPStreamStatistics()
    /// Requests sent with a reply timeout, one FIFO per timeout length, checked by one
    /// watchdog task per connection. Requests start going out in number order, so each FIFO
    /// is in deadline order (see ``replyDeadline(_:timeout:)``).
    private var deadlines: [Duration: DeadlineQueue] = [:]
    private var watchdog: Task<Void, Never>?
    /// When the watchdog next wakes.
    private var watchdogWake: ContinuousClock.Instant?
    /// When the writer last handed a frame to the channel (or the connection started).
    private var lastOutboundProgress = ContinuousClock.now

    private struct DeadlineQueue {
        var entries: [(number: UInt64, queuedAt: ContinuousClock.Instant, what: String)] = []
        var head = 0
        var isEmpty: Bool { head == entries.count }
        var first: (number: UInt64, queuedAt: ContinuousClock.Instant, what: String)? { isEmpty ? nil : entries[head] }
        mutating func removeFirst() { advanceHead(&entries, &head) }
    }

    /// A connection over `channel`, idle until ``start()``: register handlers first. Throws a
    /// `PeerSyncError` if zlib cannot be set up with `tuning`'s compression level.
    public init(channel: any BLIPFrameChannel, tuning: BLIPTuning = BLIPTuning()) throws {
        self.channel = channel
        self.tuning = tuning
        self.encoder = try BLIPFrameEncoder(compressionLevel: tuning.compressionLevel)
        self.decoder = try BLIPFrameDecoder(tuning: tuning)
    }

    /// Registers the handler for requests whose `Profile` is `profile`. Register before
    /// ``start()`` so no early request finds no handler.
    ///
    /// With `concurrent: true` each request of this profile runs in its own task, so a slow
    /// handler (one that itself waits for the peer, e.g. a `rev` handler fetching blobs) does
    /// not hold back the requests behind it; its response is sent when it finishes. Requests of
    /// the other profiles are answered one at a time in arrival order, and never hold back a
    /// concurrent request that arrives while one of them runs.
    public func setHandler(profile: String, concurrent: Bool = false, _ handler: @escaping Handler) {
        setStreamingHandler(profile: profile, concurrent: concurrent) { request in
            try await handler(request).map { .message($0) }
        }
    }

    /// Registers a handler that may answer with a streamed body (``BLIPReply/streamed(_:body:)``);
    /// otherwise the same as ``setHandler(profile:concurrent:_:)``.
    public func setStreamingHandler(profile: String, concurrent: Bool = false, _ handler: @escaping StreamingHandler) {
        handlers[profile] = handler
        if concurrent { concurrentProfiles.insert(profile) } else { concurrentProfiles.remove(profile) }
    }

    /// Starts reading, writing and dispatching. Idempotent.
    public func start() {
        guard !started else { return }
        started = true
        let (stream, continuation) = AsyncStream<BLIPRequest>.makeStream()
        requestQueue = continuation
        tasks.append(Task { [weak self] in await self?.writerLoop() })
        tasks.append(Task { [weak self] in await self?.readerLoop() })
        tasks.append(Task { [weak self] in
            for await request in stream {
                guard let self else { return }
                await self.respond(to: request)
            }
        })
    }

    /// Sends a request and waits for its response. Requests marked `.noReply` return an empty
    /// response as soon as they are queued.
    public func sendRequest(_ request: BLIPMessage) async throws -> BLIPMessage {
        try await send(request, body: nil)
    }

    /// Sends a request and waits for its response at most `timeout`; then throws
    /// `PeerSyncError.Code.timeout` (context `waitingFor`: `what`). The timeout runs from
    /// when the request starts going out, not from this call: a request waiting in this
    /// connection's queue behind others (a busy connection, a slow machine) is not the peer's
    /// silence. While it waits there it times out only if nothing at all goes out for
    /// `timeout` (the peer stopped reading or acknowledging). Cancelling the calling
    /// task throws `CancellationError` at once. Either way the request stays sent and its
    /// response, if it comes, is dropped; callers usually close the connection after a
    /// timeout. One watchdog per connection checks every deadline: no timer or task per
    /// request. Requests marked `.noReply` return an empty response as soon as they are queued.
    public func sendRequest(_ request: BLIPMessage, timeout: Duration, waitingFor what: String) async throws -> BLIPMessage {
        if let reason = closeReason { throw Self.error(for: reason) }
        try request.properties.checkSendable()
        var message = request
        message.type = .request
        message.number = nextRequestNumber
        nextRequestNumber += 1
        let number = message.number
        if message.flags.contains(.noReply) {
            enqueue(message)
            return BLIPMessage(type: .response, number: number)
        }
        decoder.expectResponse(to: number)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                pendingResponses[number] = PendingResponse(continuation: continuation)
                armDeadline(number, timeout, what)
                enqueue(message)
            }
        } onCancel: {
            Task { await self.abandonResponse(number, with: CancellationError()) }
        }
    }

    /// Ends the wait for the response to request `number` with `error` (the response is
    /// dropped when it arrives).
    private func abandonResponse(_ number: UInt64, with error: any Error) {
        guard let continuation = pendingResponses[number]?.continuation else { return }
        pendingResponses[number]?.continuation = nil
        continuation.resume(throwing: error)
    }

    private func armDeadline(_ number: UInt64, _ timeout: Duration, _ what: String) {
        let now = ContinuousClock.now
        deadlines[timeout, default: DeadlineQueue()].entries.append((number, now, what))
        // A running watchdog that wakes before this request could time out is enough; one that
        // sleeps longer (a request with a longer timeout armed it) is replaced.
        if watchdog != nil, let wake = watchdogWake, wake <= now + timeout { return }
        watchdog?.cancel()
        watchdogWake = now + timeout
        watchdog = Task { [weak self] in
            while let next = await self?.expireDeadlines() {
                try? await Task.sleep(until: next, clock: .continuous)
                if Task.isCancelled { return }
            }
        }
    }

    /// How many reply deadlines are held (for tests: it must not grow with answered requests).
    var heldDeadlineCount: Int { deadlines.values.reduce(0) { $0 + $1.entries.count - $1.head } }

    /// Drops answered (or abandoned) requests from the front of the deadline queues. Responses
    /// mostly come in request order, so each queue then holds about the requests still
    /// waiting; without this, answered entries would pile up until the watchdog next wakes
    /// (the oldest waiting deadline, up to a whole timeout later): memory growing with the
    /// request rate × the timeout.
    private func trimAnsweredDeadlines() {
        var i = deadlines.values.startIndex
        while i != deadlines.values.endIndex {
            while let first = deadlines.values[i].first, pendingResponses[first.number]?.continuation == nil {
                deadlines.values[i].removeFirst()
            }
            deadlines.values.formIndex(after: &i)
        }
    }

    /// When a request waiting for its reply times out: `timeout` after its first frame went
    /// out; while it is still queued, `timeout` after the connection last sent anything (or
    /// after it was queued, if later).
    private func replyDeadline(_ entry: (number: UInt64, queuedAt: ContinuousClock.Instant, what: String),
                               timeout: Duration) -> ContinuousClock.Instant {
        if let since = pendingResponses[entry.number]?.sendingSince { return since + timeout }
        return max(entry.queuedAt, lastOutboundProgress) + timeout
    }

    /// Times out the expired requests; returns the next deadline to check, or nil (and ends
    /// the watchdog) when no request waits with one.
    private func expireDeadlines() -> ContinuousClock.Instant? {
        // A replaced watchdog (see `armDeadline`) stops without touching the current one's state.
        if Task.isCancelled { return nil }
        let now = ContinuousClock.now
        var next: ContinuousClock.Instant?
        for timeout in Array(deadlines.keys) {
            guard var queue = deadlines.removeValue(forKey: timeout) else { continue }
            while let first = queue.first {
                if pendingResponses[first.number]?.continuation == nil {
                    queue.removeFirst()  // answered or abandoned
                    continue
                }
                let deadline = replyDeadline(first, timeout: timeout)
                if deadline <= now {
                    queue.removeFirst()
                    abandonResponse(first.number, with: PeerSyncError(.timeout, "no answer from the peer within \(timeout)",
                                                                      context: ["waitingFor": first.what]))
                } else {
                    next = min(next ?? deadline, deadline)
                    break
                }
            }
            if !queue.isEmpty { deadlines[timeout] = queue }
        }
        if next == nil || closeReason != nil {
            watchdog = nil
            watchdogWake = nil
            return nil
        }
        watchdogWake = next
        return next
    }

    /// Sends a request whose body is `request.body` followed by the chunks of `body` (pulled
    /// as frames are written) and waits for its whole response. See ``BLIPBodySource`` for
    /// what a failing source does.
    public func sendRequest(_ request: BLIPMessage, body: BLIPBodySource) async throws -> BLIPMessage {
        try await send(request, body: body)
    }

    /// Sends a request (optionally with a streamed body) and returns its response as soon as
    /// the response's properties arrive; the response body is then read chunk by chunk from
    /// ``BLIPIncomingResponse/body`` with backpressure. `.noReply` is ignored.
    public func sendRequestStreamingResponse(_ request: BLIPMessage, body: BLIPBodySource? = nil) async throws -> BLIPIncomingResponse {
        if let reason = closeReason { throw Self.error(for: reason) }
        try request.properties.checkSendable()
        var message = request
        message.type = .request
        message.flags.remove(.noReply)
        message.number = nextRequestNumber
        nextRequestNumber += 1
        decoder.expectResponse(to: message.number, streamed: true)
        return try await withCheckedThrowingContinuation { continuation in
            streamHeads[message.number] = StreamHead(continuation: continuation)
            enqueue(message, body: body)
        }
    }

    private func send(_ request: BLIPMessage, body: BLIPBodySource?) async throws -> BLIPMessage {
        if let reason = closeReason { throw Self.error(for: reason) }
        try request.properties.checkSendable()
        var message = request
        message.type = .request
        message.number = nextRequestNumber
        nextRequestNumber += 1
        if message.flags.contains(.noReply) {
            enqueue(message, body: body)
            return BLIPMessage(type: .response, number: message.number)
        }
        decoder.expectResponse(to: message.number)
        return try await withCheckedThrowingContinuation { continuation in
            pendingResponses[message.number] = PendingResponse(continuation: continuation)
            enqueue(message, body: body)
        }
    }

    /// Byte counts of streamed bodies held in memory (see ``BLIPStreamStatistics``).
    public var streamStatistics: BLIPStreamStatistics { statistics }

    /// Resets the peak counts of ``streamStatistics`` to the current ones.
    public func resetStreamStatisticsPeaks() {
        statistics.peakBufferedInboundBytes = statistics.bufferedInboundBytes
        statistics.peakBufferedOutboundBytes = statistics.bufferedOutboundBytes
    }

    /// Sends a request that expects no reply.
    public func sendNoReply(_ request: BLIPMessage) async throws {
        var message = request
        message.flags.insert(.noReply)
        _ = try await sendRequest(message)
    }

    /// Closes the connection (code 1000 by default) and ends pending requests with
    /// `PeerSyncError.Code.closed`.
    public func close(code: Int = 1000, reason: String = "") async {
        await finish(.normal, code: code, reason: reason)
    }

    /// Waits until the connection has ended and returns why.
    public func waitUntilClosed() async -> BLIPCloseReason {
        if let closeReason { return closeReason }
        return await withCheckedContinuation { closeWaiters.append($0) }
    }

    /// Whether the connection has ended (``waitUntilClosed()`` returns why).
    public var isClosed: Bool { closeReason != nil }

    // MARK: - Writing

    private func enqueue(_ message: BLIPMessage, body source: BLIPBodySource? = nil) {
        var out = Outgoing(message: message, content: message.encodedContent())
        if let source {
            let id = nextStreamID
            nextStreamID += 1
            out.streamID = id
            var stream = OutStream()
            stream.pump = Task {
                do {
                    try await source.run { chunk in await self.deposit(id, chunk) }
                    await self.endStream(id, nil)
                } catch {
                    await self.endStream(id, error)
                }
            }
            outStreams[id] = stream
        }
        if message.type == .request {
            if out.isUrgent { queuedUrgent += 1 }
            queuedRequests.append(out)
        } else {
            outgoing.append(out)
        }
        wakeWriter()
    }

    /// Where an outgoing message waits: in `outgoing` or in `queuedRequests`.
    private enum Slot { case active(Int), queued(Int) }

    private func slot(ofStream id: UInt64) -> Slot? {
        if let i = outgoing.firstIndex(where: { $0.streamID == id }) { return .active(i) }
        if let i = queuedRequests[queuedHead...].firstIndex(where: { $0?.streamID == id }) { return .queued(i) }
        return nil
    }

    private func buffered(at slot: Slot) -> Int {
        switch slot {
        case .active(let i): return outgoing[i].buffered
        case .queued(let i): return queuedRequests[i]?.buffered ?? 0
        }
    }

    /// Takes the first queued request (the caller frames it).
    private func popQueuedRequest() -> Outgoing? {
        guard queuedHead < queuedRequests.count, let m = queuedRequests[queuedHead] else { return nil }
        queuedRequests[queuedHead] = nil
        advanceHead(&queuedRequests, &queuedHead)
        if m.isUrgent { queuedUrgent -= 1 }
        return m
    }

    /// The most bytes of a streamed body buffered before its pump waits.
    private var sendBufferLimit: Int { max(tuning.streamSendBufferSize, 2 * tuning.maxFrameSize) }

    /// Adds a chunk from a body source; waits while the message's buffer is full. Returns
    /// false when the source must stop (connection closed).
    private func deposit(_ id: UInt64, _ chunk: [UInt8]) async -> Bool {
        guard closeReason == nil, outStreams[id] != nil, let slot = slot(ofStream: id) else { return false }
        switch slot {
        case .active(let i): outgoing[i].content.append(contentsOf: chunk)
        case .queued(let i): queuedRequests[i]?.content.append(contentsOf: chunk)
        }
        updateOutboundStatistics()
        wakeWriter()
        guard buffered(at: slot) >= sendBufferLimit else { return true }
        return await withCheckedContinuation { continuation in
            if closeReason == nil, outStreams[id] != nil {
                outStreams[id]?.pumpWaiter = continuation
            } else {
                continuation.resume(returning: false)
            }
        }
    }

    /// The source of stream `id` ended, normally or with `error`.
    private func endStream(_ id: UInt64, _ error: (any Error)?) async {
        guard closeReason == nil, outStreams[id] != nil else { return }
        guard let error else {
            outStreams[id]?.finished = true
            wakeWriter()
            return
        }
        outStreams[id] = nil
        let failure = Self.wrap(error, "reading a streamed BLIP body")
        guard let slot = slot(ofStream: id) else { return }
        guard case .active(let i) = slot else {
            // A request not begun yet: nothing of it is on the wire, but the peer expects
            // request numbers in order, so the connection cannot go on without it.
            if case .queued(let q) = slot, let old = queuedRequests[q] {
                queuedRequests.remove(at: q)
                if old.isUrgent { queuedUrgent -= 1 }
            }
            updateOutboundStatistics()
            await finish(.error(failure), code: 1011, reason: "a streamed message body failed")
            return
        }
        let old = outgoing[i]
        if !old.begun && old.message.type != .request {
            // Nothing of the response is on the wire yet: answer with an error instead.
            var response = Self.errorResponse(for: failure)
            response.number = old.message.number
            if old.isUrgent { response.flags.insert(.urgent) }
            outgoing[i] = Outgoing(message: response, content: response.encodedContent())
            updateOutboundStatistics()
            wakeWriter()
        } else {
            outgoing.remove(at: i)
            roundRobin = outgoing.isEmpty ? 0 : roundRobin % outgoing.count
            updateOutboundStatistics()
            await finish(.error(failure), code: 1011, reason: "a streamed message body failed")
        }
    }

    private func updateOutboundStatistics() {
        var total = 0
        for i in outgoing.indices where outgoing[i].streamID != nil { total += outgoing[i].buffered }
        if !outStreams.isEmpty {
            for i in queuedRequests.indices.dropFirst(queuedHead) where queuedRequests[i]?.streamID != nil {
                total += queuedRequests[i]?.buffered ?? 0
            }
        }
        statistics.bufferedOutboundBytes = total
        statistics.peakBufferedOutboundBytes = max(statistics.peakBufferedOutboundBytes, total)
    }

    /// The reply to a request whose handler threw `error`: the ``BLIPError`` it carries, else
    /// `BLIP`/500 with its message.
    private static func errorResponse(for error: PeerSyncError) -> BLIPMessage {
        .error(error.blipError ?? .blip(500, error.message))
    }

    private func wakeWriter() {
        if let waiter = writerWakeup {
            writerWakeup = nil
            waiter.resume()
        }
    }

    private func sendable(_ m: Outgoing) -> Bool {
        guard m.sentCounted - min(m.sentCounted, m.ackedCounted) < UInt64(tuning.maxUnackedBytes) else { return false }
        guard let id = m.streamID else { return true }
        // A streamed body waits for a full frame's worth (or its end) before the next frame.
        return outStreams[id]?.finished ?? true || m.buffered >= tuning.maxFrameSize
    }

    /// The next frame to write, or nil when the connection closed. Suspends while there is
    /// nothing to send (or every message waits for an ACK).
    private func nextFrame() async -> [UInt8]? {
        while closeReason == nil {
            if !controlFrames.isEmpty { return controlFrames.removeFirst() }
            if let frame = buildFrame() { return frame }
            await withCheckedContinuation { writerWakeup = $0 }
        }
        return nil
    }

    private func buildFrame() -> [UInt8]? {
        // Urgent messages first (in queue order), then normal ones round-robin. Requests must
        // *start* in number order (the receiver rejects anything else): only the first queued
        // request is eligible, in the slot after the last of `outgoing`.
        let headIndex = queuedHead < queuedRequests.count ? queuedHead : nil
        let headSendable = headIndex.map { h in queuedRequests[h].map { sendable($0) } ?? false } ?? false
        let headUrgent = headIndex.map { h in queuedRequests[h]?.isUrgent ?? false } ?? false
        let queuedSlot = outgoing.count
        var pick: Int?
        if let urgent = outgoing.indices.first(where: { outgoing[$0].isUrgent && sendable(outgoing[$0]) }) {
            pick = urgent
        } else if headSendable && headUrgent {
            pick = queuedSlot
        } else {
            let slots = outgoing.count + 1
            for step in 0..<slots {
                let i = (roundRobin + step) % slots
                if i == queuedSlot ? headSendable : sendable(outgoing[i]) { pick = i; break }
            }
        }
        guard let i = pick else { return nil }
        // Moved out (not copied), so a streamed body's buffer is trimmed in place.
        let fromQueue = i == queuedSlot
        guard var m = fromQueue ? popQueuedRequest() : outgoing.remove(at: i) else { return nil }
        let urgentWaiting = !m.isUrgent && (queuedUrgent > 0 || outgoing.contains { $0.isUrgent })
        let frameSize = urgentWaiting ? tuning.urgentFrameSize : tuning.maxFrameSize
        let sourceFinished = m.streamID.map { outStreams[$0]?.finished ?? true } ?? true
        do {
            let (frame, counted) = try encoder.nextFrame(type: m.message.type, number: m.message.number,
                                                         flags: m.message.flags, content: m.content,
                                                         offset: &m.offset, maxFrameSize: frameSize,
                                                         isLast: sourceFinished)
            m.sentCounted += UInt64(counted)
            m.begun = true
            if let id = m.streamID {
                // Drop what was framed; let the pump refill.
                m.content.removeFirst(m.offset)
                m.offset = 0
                if m.buffered < sendBufferLimit, let waiter = outStreams[id]?.pumpWaiter {
                    outStreams[id]?.pumpWaiter = nil
                    waiter.resume(returning: true)
                }
            }
            let done = sourceFinished && m.offset >= m.content.count
            if done, let id = m.streamID { outStreams[id] = nil }
            let streamed = m.streamID != nil
            if fromQueue {
                pendingResponses[m.message.number]?.sendingSince = .now
                // A begun request joins the round-robin at its end; the next turn starts over.
                if !done { outgoing.append(m) }
                roundRobin = 0
            } else if done {
                roundRobin = i  // the message after it moved up
            } else {
                outgoing.insert(m, at: i)
                roundRobin = i + 1
            }
            if streamed { updateOutboundStatistics() }
            return frame
        } catch {
            Task { await self.finish(.error(error), code: 1011, reason: error.message) }
            return nil
        }
    }

    private func writerLoop() async {
        while let frame = await nextFrame() {
            do {
                try await channel.sendFrame(frame)
                lastOutboundProgress = .now
            } catch {
                await finish(.error(Self.wrap(error, "sending a BLIP frame")), code: 1011, reason: "send failed")
                return
            }
        }
    }

    // MARK: - Reading

    private func readerLoop() async {
        while closeReason == nil {
            let frame: [UInt8]?
            do {
                frame = try await channel.receiveFrame()
            } catch {
                await finish(.error(Self.wrap(error, "receiving a BLIP frame")), code: 1011, reason: "receive failed")
                return
            }
            guard let frame else {
                await finish(.normal, code: 1000, reason: "")
                return
            }
            do {
                try handle(frame)
            } catch {
                await finish(.error(error), code: 1002, reason: error.message)
                return
            }
            // Safety valve for very compressible streamed bodies: stop reading until the
            // consumers take their data.
            while closeReason == nil, statistics.bufferedInboundBytes > tuning.maxStreamBufferedBytes {
                await withCheckedContinuation { readerWakeup = $0 }
            }
        }
    }

    private func wakeReader() {
        if let waiter = readerWakeup {
            readerWakeup = nil
            waiter.resume()
        }
    }

    private func handle(_ frame: [UInt8]) throws(PeerSyncError) {
        for event in try decoder.decode(frame) {
            switch event {
            case .sendAck(let ack):
                controlFrames.append(ack)
                wakeWriter()
            case .ack(let of, let number, let received):
                let type: BLIPMessageType = of
                if let i = outgoing.firstIndex(where: { $0.message.number == number && ($0.message.type == .request) == (type == .request) }) {
                    outgoing[i].ackedCounted = max(outgoing[i].ackedCounted, received)
                    wakeWriter()
                }
            case .streamProgress(let number, let received):
                if inStreams[number] != nil {
                    inStreams[number]?.received = received
                } else {
                    streamHeads[number]?.received = received
                }
            case .started(let type, let number, let flags, let properties) where type != .request && streamHeads[number] != nil:
                guard let head = streamHeads.removeValue(forKey: number) else { continue }
                var stream = InStream()
                stream.received = head.received
                inStreams[number] = stream
                let body = BLIPIncomingBody(handle: BLIPStreamHandle(connection: self, number: number))
                head.continuation.resume(returning: BLIPIncomingResponse(type: type, number: number, flags: flags,
                                                                         properties: properties, body: body))
            case .body(let type, let number, let bytes) where type != .request && inStreams[number] != nil:
                receiveStreamed(number, bytes)
            case .completed(let type, let number) where type != .request && inStreams[number] != nil:
                inStreams[number]?.complete = true
                if inStreams[number]?.abandoned == true {
                    inStreams[number] = nil
                } else {
                    wakeStream(number)
                }
            case .started(let type, let number, let flags, let properties):
                if type == .request {
                    partialRequests[number] = PartialRequest(properties: properties, flags: flags)
                } else if var pending = pendingResponses[number] {
                    pending.type = type
                    pending.flags = flags
                    pending.properties = properties
                    pendingResponses[number] = pending
                }
            case .body(let type, let number, let bytes):
                if type == .request {
                    partialRequests[number]?.body.append(contentsOf: bytes)
                    if (partialRequests[number]?.body.count ?? 0) > tuning.maxMessageSize {
                        throw PeerSyncError(.protocolError, "request \(number) exceeds \(tuning.maxMessageSize) bytes")
                    }
                } else {
                    pendingResponses[number]?.body.append(contentsOf: bytes)
                    if (pendingResponses[number]?.body.count ?? 0) > tuning.maxMessageSize {
                        throw PeerSyncError(.protocolError, "response \(number) exceeds \(tuning.maxMessageSize) bytes")
                    }
                }
            case .completed(let type, let number):
                if type == .request {
                    guard let partial = partialRequests.removeValue(forKey: number) else { continue }
                    let message = BLIPMessage(type: .request, number: number, flags: partial.flags,
                                              properties: partial.properties, body: partial.body)
                    dispatch(BLIPRequest(message: message))
                } else if let pending = pendingResponses.removeValue(forKey: number), let continuation = pending.continuation {
                    let message = BLIPMessage(type: pending.type, number: number, flags: pending.flags,
                                              properties: pending.properties, body: pending.body)
                    continuation.resume(returning: message)
                    trimAnsweredDeadlines()
                }
            }
        }
    }

    // MARK: - Incoming streamed bodies

    private func receiveStreamed(_ number: UInt64, _ bytes: [UInt8]) {
        guard var stream = inStreams[number] else { return }
        if stream.abandoned {
            inStreams[number] = stream
            acknowledge(number, upTo: stream.received)
            return
        }
        stream.chunks.append((bytes, stream.received))
        stream.buffered += bytes.count
        inStreams[number] = stream
        statistics.bufferedInboundBytes += bytes.count
        statistics.peakBufferedInboundBytes = max(statistics.peakBufferedInboundBytes, statistics.bufferedInboundBytes)
        wakeStream(number)
    }

    private func wakeStream(_ number: UInt64) {
        if let waiter = inStreams[number]?.waiter {
            inStreams[number]?.waiter = nil
            waiter.resume()
        }
    }

    /// Marks the stream's bytes up to `consumed` as taken and ACKs them once at least
    /// ``BLIPTuning/ackThreshold`` bytes were taken since the last ACK.
    private func acknowledge(_ number: UInt64, upTo consumed: UInt64) {
        guard let stream = inStreams[number], !stream.complete,
              consumed >= stream.acked + UInt64(tuning.ackThreshold) else { return }
        inStreams[number]?.acked = consumed
        controlFrames.append(BLIPFrameEncoder.ackFrame(type: .ackResponse, number: number, received: consumed))
        wakeWriter()
    }

    /// The next chunk of incoming stream `number`, nil at its end. Waits for data.
    func takeChunk(of number: UInt64) async throws(PeerSyncError) -> [UInt8]? {
        while true {
            guard var stream = inStreams[number] else { return nil }
            if !stream.chunks.isEmpty {
                let (bytes, wireEnd) = stream.chunks.removeFirst()
                stream.buffered -= bytes.count
                inStreams[number] = stream
                statistics.bufferedInboundBytes -= bytes.count
                acknowledge(number, upTo: wireEnd)
                if statistics.bufferedInboundBytes <= tuning.maxStreamBufferedBytes { wakeReader() }
                return bytes
            }
            if let failure = stream.failure {
                inStreams[number] = nil
                throw failure
            }
            if stream.complete {
                inStreams[number] = nil
                return nil
            }
            if stream.abandoned {
                throw PeerSyncError(.cancelled, "reading a streamed BLIP body was cancelled")
            }
            if Task.isCancelled {
                abandonStream(number)
                throw PeerSyncError(.cancelled, "reading a streamed BLIP body was cancelled")
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { inStreams[number]?.waiter = $0 }
            } onCancel: {
                Task { await self.wakeStream(number) }
            }
        }
    }

    /// The consumer of stream `number` went away: drop what is buffered and ACK (then discard)
    /// whatever else of it arrives, so the sender can finish.
    func abandonStream(_ number: UInt64) {
        guard var stream = inStreams[number] else { return }
        if stream.complete || stream.failure != nil {
            statistics.bufferedInboundBytes -= stream.buffered
            inStreams[number] = nil
            wakeReader()
            return
        }
        statistics.bufferedInboundBytes -= stream.buffered
        stream.chunks = []
        stream.buffered = 0
        stream.abandoned = true
        inStreams[number] = stream
        acknowledge(number, upTo: stream.received)
        wakeStream(number)
        wakeReader()
    }

    // MARK: - Dispatching

    /// A request of a concurrent profile runs in its own task at once; the others are answered
    /// one at a time, in order, by the dispatch task. A slow sequential handler therefore never
    /// holds back a concurrent request behind it (a `changes` handler waiting for revisions
    /// that this very connection's `rev`s are bringing would otherwise wait for itself).
    private func dispatch(_ request: BLIPRequest) {
        unansweredRequests += 1
        if let profile = request.profile, concurrentProfiles.contains(profile) {
            Task { await self.respond(to: request) }
        } else {
            switch requestQueue?.yield(request) {
            case .enqueued?: break
            default: handlerFinished()  // closed: nobody will answer it
            }
        }
    }

    private func respond(to request: BLIPRequest) async {
        defer { handlerFinished() }
        let handler = request.profile.flatMap { handlers[$0] }
        var response: BLIPMessage
        var bodySource: BLIPBodySource?
        if let handler {
            do {
                switch try await handler(request) {
                case .none: response = BLIPMessage(type: .response)
                case .message(let message)?: response = message
                case .streamed(let message, let body)?:
                    response = message
                    bodySource = body
                }
            } catch let error as PeerSyncError {
                response = Self.errorResponse(for: error)
            } catch {
                response = .error(domain: "BLIP", code: 500, message: "\(error)")
            }
        } else {
            response = .error(domain: "BLIP", code: 404, message: "no handler for message")
        }
        guard !request.noReply, closeReason == nil else { return }
        do { try response.properties.checkSendable() } catch {
            // A handler's answer that cannot be framed: the peer gets an error instead.
            response = Self.errorResponse(for: error)
            bodySource = nil
        }
        if response.type == .request { response.type = .response }
        response.number = request.message.number
        // Responses keep the request's urgency, as LiteCore does.
        if request.message.flags.contains(.urgent) { response.flags.insert(.urgent) }
        response.flags.remove(.noReply)
        enqueue(response, body: bodySource)
    }

    private func handlerFinished() {
        unansweredRequests -= 1
        guard unansweredRequests == 0, !handlersFinishedWaiters.isEmpty else { return }
        for waiter in handlersFinishedWaiters { waiter.resume() }
        handlersFinishedWaiters.removeAll()
    }

    /// Waits until every request received so far has been through its handler (the handler
    /// returned or threw), including requests still queued for a sequential handler. After
    /// ``close(code:reason:)`` no new request arrives, so this is the point after which no
    /// handler of this connection does anything more: a replication session waits for it so
    /// that everything its handlers stored is reported before it says it stopped. Handlers
    /// are not cancelled by closing; one that never returns keeps this waiting.
    public func waitUntilHandlersFinished() async {
        guard unansweredRequests > 0 else { return }
        await withCheckedContinuation { handlersFinishedWaiters.append($0) }
    }

    // MARK: - Closing

    private func finish(_ reason: BLIPCloseReason, code: Int, reason text: String) async {
        guard closeReason == nil else { return }
        closeReason = reason
        let error = Self.error(for: reason)
        for (_, pending) in pendingResponses { pending.continuation?.resume(throwing: error) }
        pendingResponses.removeAll()
        deadlines.removeAll()
        watchdog?.cancel()
        watchdog = nil
        for (_, head) in streamHeads { head.continuation.resume(throwing: error) }
        streamHeads.removeAll()
        let unfinished = reason == .normal
            ? PeerSyncError(.closed, "the BLIP connection closed before the streamed message was complete") : error
        for (number, stream) in inStreams where !stream.complete {
            inStreams[number]?.failure = unfinished
            if stream.abandoned { inStreams[number] = nil }
            wakeStream(number)
        }
        for (_, stream) in outStreams {
            stream.pumpWaiter?.resume(returning: false)
            stream.pump?.cancel()
        }
        outStreams.removeAll()
        wakeReader()
        requestQueue?.finish()
        wakeWriter()
        for waiter in closeWaiters { waiter.resume(returning: reason) }
        closeWaiters.removeAll()
        await channel.close(code: code, reason: text)
    }

    private static func error(for reason: BLIPCloseReason) -> PeerSyncError {
        switch reason {
        case .normal: return PeerSyncError(.closed, "the BLIP connection is closed")
        case .error(let error): return error
        }
    }

    private static func wrap(_ error: any Error, _ what: String) -> PeerSyncError {
        if let e = error as? PeerSyncError { return e }
        return PeerSyncError(.io, "\(what) failed: \(error)")
    }
}

/// Takes the element at `head` off the front of a head-indexed FIFO: advances `head` and
/// compacts `array` once everything is taken, or once the taken prefix is at least half of a
/// large array (amortised O(1) per element, no shifting on every pop).
func advanceHead<Element>(_ array: inout [Element], _ head: inout Int) {
    head += 1
    if head == array.count {
        array.removeAll(keepingCapacity: true)
        head = 0
    } else if head >= 1024, head * 2 >= array.count {
        array.removeFirst(head)
        head = 0
    }
}
