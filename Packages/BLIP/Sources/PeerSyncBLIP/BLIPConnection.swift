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
    public let message: BLIPMessage
    public var profile: String? { message.profile }
    public var properties: BLIPProperties { message.properties }
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
/// requests go to the handler registered for their `Profile` with ``setHandler(profile:_:)``,
/// one at a time in the order they complete; a handler that needs concurrency starts its own
/// tasks. The handler's return value is the response (nil = empty success); a thrown
/// `PeerSyncError` becomes an error response (`BLIP`/500 unless the error's context carries
/// `blipDomain`/`blipCode`). A request with no handler gets `BLIP`/404, as LiteCore answers.
///
/// Any protocol violation closes the connection with code 1002 (or 1011 for internal
/// failures) and ends every pending request with the error.
public actor BLIPConnection {
    public typealias Handler = @Sendable (BLIPRequest) async throws -> BLIPMessage?

    private struct Outgoing {
        var message: BLIPMessage
        var content: [UInt8]
        var offset = 0
        var sentCounted: UInt64 = 0
        var ackedCounted: UInt64 = 0
        var isUrgent: Bool { message.flags.contains(.urgent) }
    }

    private struct PendingResponse {
        var continuation: CheckedContinuation<BLIPMessage, any Error>
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
    public nonisolated let tuning: BLIPTuning
    private let encoder: BLIPFrameEncoder
    private let decoder: BLIPFrameDecoder
    private var handlers: [String: Handler] = [:]
    private var nextRequestNumber: UInt64 = 1
    private var outgoing: [Outgoing] = []
    private var roundRobin = 0
    private var controlFrames: [[UInt8]] = []
    private var pendingResponses: [UInt64: PendingResponse] = [:]
    private var partialRequests: [UInt64: PartialRequest] = [:]
    private var writerWakeup: CheckedContinuation<Void, Never>?
    private var requestQueue: AsyncStream<BLIPRequest>.Continuation?
    private var closeReason: BLIPCloseReason?
    private var closeWaiters: [CheckedContinuation<BLIPCloseReason, Never>] = []
    private var started = false
    private var tasks: [Task<Void, Never>] = []

    public init(channel: any BLIPFrameChannel, tuning: BLIPTuning = BLIPTuning()) throws {
        self.channel = channel
        self.tuning = tuning
        self.encoder = try BLIPFrameEncoder(compressionLevel: tuning.compressionLevel)
        self.decoder = try BLIPFrameDecoder(tuning: tuning)
    }

    /// Registers the handler for requests whose `Profile` is `profile`. Register before
    /// ``start()`` so no early request finds no handler.
    public func setHandler(profile: String, _ handler: @escaping Handler) {
        handlers[profile] = handler
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
                await self.dispatch(request)
            }
        })
    }

    /// Sends a request and waits for its response. Requests marked `.noReply` return an empty
    /// response as soon as they are queued.
    public func sendRequest(_ request: BLIPMessage) async throws -> BLIPMessage {
        if let reason = closeReason { throw Self.error(for: reason) }
        var message = request
        message.type = .request
        message.number = nextRequestNumber
        nextRequestNumber += 1
        if message.flags.contains(.noReply) {
            enqueue(message)
            return BLIPMessage(type: .response, number: message.number)
        }
        decoder.expectResponse(to: message.number)
        return try await withCheckedThrowingContinuation { continuation in
            pendingResponses[message.number] = PendingResponse(continuation: continuation)
            enqueue(message)
        }
    }

    /// Sends a request that expects no reply.
    public func sendNoReply(_ request: BLIPMessage) async throws {
        var message = request
        message.flags.insert(.noReply)
        _ = try await sendRequest(message)
    }

    /// Closes the connection (code 1000 by default) and ends pending requests with
    /// ``PeerSyncError/Code/closed``.
    public func close(code: Int = 1000, reason: String = "") async {
        await finish(.normal, code: code, reason: reason)
    }

    /// Waits until the connection has ended and returns why.
    public func waitUntilClosed() async -> BLIPCloseReason {
        if let closeReason { return closeReason }
        return await withCheckedContinuation { closeWaiters.append($0) }
    }

    public var isClosed: Bool { closeReason != nil }

    // MARK: - Writing

    private func enqueue(_ message: BLIPMessage) {
        outgoing.append(Outgoing(message: message, content: message.encodedContent()))
        wakeWriter()
    }

    private func wakeWriter() {
        if let waiter = writerWakeup {
            writerWakeup = nil
            waiter.resume()
        }
    }

    private func sendable(_ m: Outgoing) -> Bool {
        m.sentCounted - min(m.sentCounted, m.ackedCounted) < UInt64(tuning.maxUnackedBytes)
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
        guard !outgoing.isEmpty else { return nil }
        // Urgent messages first (in queue order), then normal ones round-robin.
        // Requests must *start* in number order (the receiver rejects anything else), so a
        // request that has not begun is eligible only if no earlier request is still unbegun.
        var eligible = [Bool](repeating: false, count: outgoing.count)
        var unbegunRequestSeen = false
        for (i, m) in outgoing.enumerated() {
            let unbegunRequest = m.message.type == .request && m.offset == 0
            eligible[i] = sendable(m) && !(unbegunRequest && unbegunRequestSeen)
            if unbegunRequest { unbegunRequestSeen = true }
        }
        var index: Int?
        if let urgent = outgoing.indices.first(where: { outgoing[$0].isUrgent && eligible[$0] }) {
            index = urgent
        } else {
            for step in 0..<outgoing.count {
                let i = (roundRobin + step) % outgoing.count
                if eligible[i] { index = i; break }
            }
        }
        guard let i = index else { return nil }
        let urgentWaiting = !outgoing[i].isUrgent && outgoing.contains { $0.isUrgent }
        let frameSize = urgentWaiting ? tuning.urgentFrameSize : tuning.maxFrameSize
        var m = outgoing[i]
        do {
            let (frame, counted) = try encoder.nextFrame(type: m.message.type, number: m.message.number,
                                                         flags: m.message.flags, content: m.content,
                                                         offset: &m.offset, maxFrameSize: frameSize)
            m.sentCounted += UInt64(counted)
            if m.offset >= m.content.count {
                outgoing.remove(at: i)
                roundRobin = outgoing.isEmpty ? 0 : i % outgoing.count
            } else {
                outgoing[i] = m
                roundRobin = (i + 1) % outgoing.count
            }
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
                        throw PeerSyncError(.blipProtocolError, "request \(number) exceeds \(tuning.maxMessageSize) bytes")
                    }
                } else {
                    pendingResponses[number]?.body.append(contentsOf: bytes)
                    if (pendingResponses[number]?.body.count ?? 0) > tuning.maxMessageSize {
                        throw PeerSyncError(.blipProtocolError, "response \(number) exceeds \(tuning.maxMessageSize) bytes")
                    }
                }
            case .completed(let type, let number):
                if type == .request {
                    guard let partial = partialRequests.removeValue(forKey: number) else { continue }
                    let message = BLIPMessage(type: .request, number: number, flags: partial.flags,
                                              properties: partial.properties, body: partial.body)
                    requestQueue?.yield(BLIPRequest(message: message))
                } else if let pending = pendingResponses.removeValue(forKey: number) {
                    let message = BLIPMessage(type: pending.type, number: number, flags: pending.flags,
                                              properties: pending.properties, body: pending.body)
                    pending.continuation.resume(returning: message)
                }
            }
        }
    }

    // MARK: - Dispatching

    private func dispatch(_ request: BLIPRequest) async {
        let handler = request.profile.flatMap { handlers[$0] }
        var response: BLIPMessage
        if let handler {
            do {
                response = try await handler(request) ?? BLIPMessage(type: .response)
            } catch let error as PeerSyncError {
                let domain = error.context["blipDomain"] ?? "BLIP"
                let code = error.context["blipCode"].flatMap { Int($0) } ?? 500
                response = .error(domain: domain, code: code, message: error.message)
            } catch {
                response = .error(domain: "BLIP", code: 500, message: "\(error)")
            }
        } else {
            response = .error(domain: "BLIP", code: 404, message: "no handler for message")
        }
        guard !request.noReply, closeReason == nil else { return }
        if response.type == .request { response.type = .response }
        response.number = request.message.number
        // Responses keep the request's urgency, as LiteCore does.
        if request.message.flags.contains(.urgent) { response.flags.insert(.urgent) }
        response.flags.remove(.noReply)
        enqueue(response)
    }

    // MARK: - Closing

    private func finish(_ reason: BLIPCloseReason, code: Int, reason text: String) async {
        guard closeReason == nil else { return }
        closeReason = reason
        let error = Self.error(for: reason)
        for (_, pending) in pendingResponses { pending.continuation.resume(throwing: error) }
        pendingResponses.removeAll()
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
