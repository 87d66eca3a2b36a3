import PeerSyncCore
import PeerSyncTransport
import Synchronization

/// One end of a link: its receive buffer and its close state.
final class LinkEnd: Sendable {
    struct State {
        var closeInfo: CloseInfo?
        /// This end sent its close (its own or the echo of the peer's).
        var closeSent = false
        /// This end received the peer's close.
        var closeReceived = false
        /// Set when the link broke before this end finished closing.
        var failure: PeerSyncError?
        /// Closed both ways, or broken.
        var done = false
        /// `close()` calls waiting for `done`.
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    let incoming: AsyncMessageQueue<TransportMessage>
    let closeTimeout: Duration
    // Guards the close state of this end.
    let state = Mutex(State())

    init(bufferMessages: Int, bufferBytes: Int, closeTimeout: Duration) {
        incoming = AsyncMessageQueue(maxCount: bufferMessages, maxBytes: bufferBytes)
        self.closeTimeout = closeTimeout
    }

    var isDone: Bool { state.withLock { $0.done } }
}

/// What travels on a simulated wire.
struct WireItem: Sendable {
    enum Payload: Sendable {
        /// A message sent in one piece.
        case message(TransportMessage)
        /// A piece of a message; `last` completes it.
        case fragment([UInt8], isText: Bool, last: Bool)
        /// The sender's close.
        case close(CloseInfo)
        /// The simulated link breaks here: what is ahead of it on the wire still arrives.
        case disconnect(String)
    }
    var payload: Payload
    /// When the item reaches the receiver.
    var arrival: ContinuousClock.Instant

    var size: Int {
        switch payload {
        case .message(let message): message.byteCount
        case .fragment(let bytes, _, _): bytes.count
        case .close, .disconnect: 0
        }
    }
}

/// One direction of a conditioned link: messages accepted from the sender, and the wire.
final class Pipe: Sendable {
    let direction: LinkDirection
    /// Messages accepted by `send`, waiting for the wire.
    let outgoing: AsyncMessageQueue<TransportMessage>
    /// Fragments in flight, with their arrival times.
    let wire: AsyncMessageQueue<WireItem>
    /// The close the sender sent, once it did. Guarded by its own mutex.
    let closeInfo = Mutex<CloseInfo?>(nil)

    init(direction: LinkDirection) {
        self.direction = direction
        outgoing = AsyncMessageQueue(maxCount: 16, maxBytes: 1 << 20)
        wire = AsyncMessageQueue(maxCount: 4096, maxBytes: 256 << 10, cost: { $0.size })
    }
}

/// A connection between two ends (index 0: client, 1: server), plain or conditioned.
///
/// Close protocol: an end that closes marks `closeSent`, drops its unread messages and sends a
/// close after its accepted messages; the end receiving it finishes its buffer (unread messages
/// stay readable), marks `closeReceived` and answers with its own close unless it already sent
/// one. An end is done when it sent and received a close; the link ends when both are done, or
/// when it breaks (both ends get `connectionReset`).
final class Link: Sendable {
    let id: Int
    let ends: [LinkEnd]
    /// One per direction (index = sending end) when conditioned; empty for a perfect link.
    let pipes: [Pipe]
    let conditions: LinkConditions
    let maxMessageSize: Int
    let trace: LinkTrace?
    private let onEnd: @Sendable (Int) -> Void
    // Guards whether the link ended and the handles of its wire tasks.
    private let state = Mutex<(ended: Bool, tasks: [Task<Void, Never>])>((false, []))

    init(id: Int, client: LinkEnd, server: LinkEnd, conditions: LinkConditions, maxMessageSize: Int,
         trace: LinkTrace?, onEnd: @escaping @Sendable (Int) -> Void) {
        self.id = id
        self.ends = [client, server]
        self.conditions = conditions
        self.pipes = conditions.isPerfect ? [] : [Pipe(direction: .clientToServer), Pipe(direction: .serverToClient)]
        self.maxMessageSize = maxMessageSize
        self.trace = trace
        self.onEnd = onEnd
    }

    /// Starts the wire tasks of a conditioned link.
    func start() {
        guard !pipes.isEmpty else { return }
        let tasks = (0..<2).flatMap { side in
            [Task { await self.runSender(side) }, Task { await self.runReceiver(side) }]
        }
        let ended = state.withLock { s in
            s.tasks = tasks
            return s.ended
        }
        if ended { for task in tasks { task.cancel() } }
    }

    var isEnded: Bool { state.withLock { $0.ended } }

    // MARK: Messages

    func send(from side: Int, _ message: TransportMessage) async throws {
        if message.byteCount > maxMessageSize {
            throw PeerSyncError(.tooLarge, "the message is larger than the connection's maxMessageSize",
                                context: ["bytes": String(message.byteCount), "maxMessageSize": String(maxMessageSize)])
        }
        let refusal: PeerSyncError? = ends[side].state.withLock { s in
            if s.closeSent || (s.closeReceived && s.failure == nil) {
                return PeerSyncError(.connectionClosed, "the connection is closed", context: ["operation": "send"])
            }
            return s.failure
        }
        if let refusal { throw refusal }
        if pipes.isEmpty {
            try await ends[1 - side].incoming.send(message)
        } else {
            try await pipes[side].outgoing.send(message)
        }
    }

    func receive(at side: Int) async throws -> TransportMessage? {
        try await ends[side].incoming.receive()
    }

    // MARK: Closing

    func close(from side: Int, code: CloseCode, reason: String) async {
        let info = CloseInfo(code: code.isSendable ? code : .normal, reason: reason)
        let end = ends[side]
        let mustSend = end.state.withLock { s in
            if s.done || s.closeSent { return false }
            s.closeSent = true
            if s.closeInfo == nil { s.closeInfo = info }
            return true
        }
        end.incoming.finish(discardingBuffered: true)
        if mustSend { sendClose(from: side, info) }
        await waitUntilDone(side)
    }

    /// Sends `side`'s close after its accepted messages.
    private func sendClose(from side: Int, _ info: CloseInfo) {
        if pipes.isEmpty {
            closeArrived(at: 1 - side, info)
        } else {
            pipes[side].closeInfo.withLock { $0 = info }
            pipes[side].outgoing.finish()
        }
    }

    /// The peer's close reached `side`.
    private func closeArrived(at side: Int, _ info: CloseInfo) {
        let end = ends[side]
        let (echo, waiters, accepted) = end.state.withLock { s -> (Bool, [CheckedContinuation<Void, Never>], Bool) in
            guard !s.done else { return (false, [], false) }
            s.closeReceived = true
            if s.closeInfo == nil { s.closeInfo = info }
            let echo = !s.closeSent
            s.closeSent = true
            s.done = true
            let waiters = s.waiters
            s.waiters = []
            return (echo, waiters, true)
        }
        guard accepted else { return }
        end.incoming.finish()
        if echo { sendClose(from: side, info) }
        for waiter in waiters { waiter.resume() }
        endIfBothDone()
    }

    private func waitUntilDone(_ side: Int) async {
        let end = ends[side]
        if end.isDone { return }
        let timeout = end.closeTimeout
        let timer = Task {
            do { try await Task.sleep(for: timeout) } catch { return }
            self.breakLink("the close handshake timed out after \(timeout)")
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = end.state.withLock { s in
                    if s.done { return true }
                    s.waiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            self.breakLink("close() was cancelled before the peer answered")
        }
        timer.cancel()
    }

    private func endIfBothDone() {
        guard ends.allSatisfy(\.isDone) else { return }
        let (first, tasks) = state.withLock { s -> (Bool, [Task<Void, Never>]) in
            if s.ended { return (false, []) }
            s.ended = true
            let tasks = s.tasks
            s.tasks = []
            return (true, tasks)
        }
        guard first else { return }
        for task in tasks { task.cancel() }
        onEnd(id)
    }

    /// Breaks the link without a close handshake: ends that are not done get `reason` as a
    /// `connectionReset` error (after their already received messages) and an abnormal close.
    func breakLink(_ reason: String) {
        let (first, tasks) = state.withLock { s -> (Bool, [Task<Void, Never>]) in
            if s.ended { return (false, []) }
            s.ended = true
            let tasks = s.tasks
            s.tasks = []
            return (true, tasks)
        }
        guard first else { return }
        let error = PeerSyncError(.connectionReset, reason, context: ["link": String(id)])
        for end in ends {
            let waiters = end.state.withLock { s -> [CheckedContinuation<Void, Never>] in
                if !s.done {
                    s.done = true
                    s.failure = error
                    if s.closeInfo == nil { s.closeInfo = CloseInfo(code: .abnormalClosure, reason: reason) }
                }
                let waiters = s.waiters
                s.waiters = []
                return waiters
            }
            end.incoming.finish(throwing: error)
            for waiter in waiters { waiter.resume() }
        }
        for pipe in pipes {
            pipe.outgoing.finish(throwing: error, discardingBuffered: true)
            pipe.wire.finish(throwing: error, discardingBuffered: true)
        }
        for task in tasks { task.cancel() }
        onEnd(id)
    }

    /// Called when one end's last reference is dropped: breaks the link unless that end is done.
    func released(_ side: Int) {
        if !ends[side].isDone {
            breakLink("the peer released its connection without closing it")
        }
    }

    // MARK: Simulated wire

    /// Takes `side`'s accepted messages, cuts them into fragments, applies bandwidth, latency,
    /// jitter and disconnects, and puts them on the wire.
    private func runSender(_ side: Int) async {
        let pipe = pipes[side]
        let conditions = self.conditions
        let clock = ContinuousClock()
        var random = LinkRandom(seed: conditions.seed, stream: UInt64(side) + 1)
        var wireFree = clock.now
        var lastArrival = clock.now
        var carried = 0
        var index = 0

        func transmit(_ payload: WireItem.Payload, bytes: Int, last: Bool) async throws -> Bool {
            let jitter = conditions.jitter > .zero ? random.duration(upTo: conditions.jitter) : .zero
            let disconnect = conditions.disconnectProbability > 0 && random.nextUnit() < conditions.disconnectProbability
            carried += bytes
            let transmission: Duration = conditions.bandwidth.map { .nanoseconds(Int64(bytes) * 1_000_000_000 / Int64($0)) } ?? .zero
            if disconnect || conditions.dropAfterBytes.map({ carried > $0 }) == true {
                trace?.record(.init(direction: pipe.direction, kind: .disconnect, index: index, bytes: bytes,
                                    endsMessage: last, transmission: transmission, delay: conditions.latency + jitter))
                let reason = disconnect ? "the simulated link dropped (disconnectProbability)"
                                        : "the simulated link dropped after \(conditions.dropAfterBytes ?? 0) bytes"
                // The break travels behind the fragments already on the wire, which still arrive.
                try await pipe.wire.send(WireItem(payload: .disconnect(reason), arrival: max(lastArrival, clock.now)))
                return false
            }
            let now = clock.now
            wireFree = max(wireFree, now) + transmission
            if wireFree - now > .milliseconds(1) { try await Task.sleep(until: wireFree, clock: clock) }
            let arrival = max(lastArrival, wireFree + conditions.latency + jitter)
            lastArrival = arrival
            trace?.record(.init(direction: pipe.direction, kind: .fragment, index: index, bytes: bytes,
                                endsMessage: last, transmission: transmission, delay: conditions.latency + jitter))
            index += 1
            try await pipe.wire.send(WireItem(payload: payload, arrival: arrival))
            return true
        }

        do {
            while let message = try await pipe.outgoing.receive() {
                let count = message.byteCount
                if let mtu = conditions.mtu, count > mtu {
                    let bytes = message.bytes
                    var offset = 0
                    while offset < count {
                        let end = Swift.min(count, offset + mtu)
                        let piece = Array(bytes[offset..<end])
                        offset = end
                        guard try await transmit(.fragment(piece, isText: message.isText, last: end == count),
                                                 bytes: piece.count, last: end == count) else { return }
                    }
                } else {
                    guard try await transmit(.message(message), bytes: count, last: true) else { return }
                }
            }
            let info = pipe.closeInfo.withLock { $0 } ?? CloseInfo(code: .normal)
            let arrival = max(lastArrival, clock.now + conditions.latency)
            trace?.record(.init(direction: pipe.direction, kind: .close, index: index, bytes: 0, endsMessage: true,
                                transmission: .zero, delay: conditions.latency))
            try await pipe.wire.send(WireItem(payload: .close(info), arrival: arrival))
            pipe.wire.finish()
        } catch {
            // The link broke or ended: the pipe queues were finished with its error.
        }
    }

    /// Takes fragments off the wire at their arrival times, reassembles messages and puts them
    /// in the receiving end's buffer (waiting while it is full: backpressure).
    private func runReceiver(_ side: Int) async {
        let pipe = pipes[side]
        let destination = ends[1 - side]
        let clock = ContinuousClock()
        var assembly: [UInt8] = []

        func deliver(_ message: TransportMessage) async throws {
            do {
                try await destination.incoming.send(message)
            } catch let error as PeerSyncError where error.code == .connectionClosed {
                // The receiving end closed: it discards what still arrives until the peer's close.
            }
        }

        do {
            while let item = try await pipe.wire.receive() {
                if item.arrival > clock.now + .microseconds(200) {
                    try await Task.sleep(until: item.arrival, clock: clock)
                }
                switch item.payload {
                case .message(let message):
                    try await deliver(message)
                case .fragment(let bytes, let isText, let last):
                    assembly += bytes
                    if last {
                        let message: TransportMessage = isText ? .text(String(decoding: assembly, as: UTF8.self)) : .binary(assembly)
                        assembly = []
                        try await deliver(message)
                    }
                case .close(let info):
                    closeArrived(at: 1 - side, info)
                case .disconnect(let reason):
                    breakLink(reason)
                }
            }
        } catch {
            // The link broke or ended.
        }
    }
}
