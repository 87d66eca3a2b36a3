import PeerSyncCore
import PeerSyncTransport

/// The received messages of one connection, waiting for `receive()`.
///
/// Like PeerSyncTransport's `AsyncMessageQueue` (bounded by count and bytes, one element of
/// any size admitted when empty, finish with or without an error, receivers in FIFO order,
/// cancellable receives), but specialised for ``TransportMessage`` and with a batch `send`:
/// the reader hands over everything it decoded from one socket read under one lock and wakes
/// receivers once, instead of one task switch per small message. Only the connection's reader
/// task sends. State is behind one LockedValue; continuations are resumed outside it.
final class InboundQueue: Sendable {
    private struct Receiver {
        let id: UInt64
        let continuation: CheckedContinuation<TransportMessage?, any Error>
    }

    private struct State {
        var buffer: [TransportMessage] = []
        var head = 0
        var bytes = 0
        var receivers: [Receiver] = []
        /// The reader, waiting for room for a message of `senderNeeds` bytes.
        var sender: CheckedContinuation<Void, Never>?
        var senderNeeds = 0
        /// How many times the sender suspended (tests check that it never spins).
        var senderWaits = 0
        var finished = false
        var error: (any Error)?
        var nextID: UInt64 = 0

        var count: Int { buffer.count - head }

        /// Whether a message of `size` bytes is admitted now: always into an empty queue,
        /// else when both limits hold after adding it.
        func admits(_ size: Int, maxCount: Int, maxBytes: Int) -> Bool {
            count == 0 || (count < maxCount && bytes + size <= maxBytes)
        }

        mutating func pop() -> TransportMessage? {
            guard head < buffer.count else { return nil }
            let message = buffer[head]
            buffer[head] = .binary([])
            head += 1
            bytes -= message.byteCount
            if head == buffer.count {
                buffer.removeAll(keepingCapacity: buffer.count <= 1024)
                head = 0
            } else if head >= 256 && head * 2 >= buffer.count {
                buffer.removeFirst(head)
                head = 0
            }
            return message
        }
    }

    let maxCount: Int
    let maxBytes: Int
    private let state = LockedValue(State())

    init(maxCount: Int, maxBytes: Int) {
        self.maxCount = max(1, maxCount)
        self.maxBytes = max(1, maxBytes)
    }

    /// Appends `messages` in order, suspending while the queue is full. Messages go straight
    /// to waiting receivers first. Returns early (dropping the rest) once the queue finished.
    func send(_ messages: [TransportMessage]) async {
        var index = 0
        while index < messages.count {
            var handOffs: [(CheckedContinuation<TransportMessage?, any Error>, TransportMessage)] = []
            let outcome = state.withLock { s -> Int in  // 0: all queued, 1: full, 2: finished
                if s.finished { return 2 }
                while index < messages.count {
                    let message = messages[index]
                    if !s.receivers.isEmpty && s.count == 0 {
                        handOffs.append((s.receivers.removeFirst().continuation, message))
                        index += 1
                        continue
                    }
                    let size = message.byteCount
                    guard s.admits(size, maxCount: maxCount, maxBytes: maxBytes) else { return 1 }
                    s.buffer.append(message)
                    s.bytes += size
                    index += 1
                }
                return 0
            }
            for (receiver, message) in handOffs { receiver.resume(returning: message) }
            switch outcome {
            case 1:
                let size = messages[index].byteCount
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { s -> Bool in
                        if s.finished || s.admits(size, maxCount: maxCount, maxBytes: maxBytes) { return true }
                        s.sender = continuation
                        s.senderNeeds = size
                        s.senderWaits += 1
                        return false
                    }
                    if now { continuation.resume() }
                }
            case 2:
                return
            default:
                break
            }
        }
    }

    /// How many times `send` suspended for room (for tests).
    var senderWaitCount: Int { state.withLock { $0.senderWaits } }
    var bufferedCount: Int { state.withLock { $0.count } }

    /// The next message; nil once finished cleanly and drained; the finish error once finished
    /// with one and drained; `.cancelled` if the task is cancelled while waiting.
    func receive() async throws -> TransportMessage? {
        let id = state.withLock { s -> UInt64 in s.nextID &+= 1; return s.nextID }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TransportMessage?, any Error>) in
                enum Action { case message(TransportMessage, CheckedContinuation<Void, Never>?), end((any Error)?), wait }
                let action = state.withLock { s -> Action in
                    if let message = s.pop() {
                        var sender: CheckedContinuation<Void, Never>?
                        if s.sender != nil && s.admits(s.senderNeeds, maxCount: maxCount, maxBytes: maxBytes) {
                            sender = s.sender
                            s.sender = nil
                        }
                        return .message(message, sender)
                    }
                    if s.finished { return .end(s.error) }
                    if Task.isCancelled { return .end(PeerSyncError(.cancelled, "receive cancelled")) }
                    s.receivers.append(Receiver(id: id, continuation: continuation))
                    return .wait
                }
                switch action {
                case .message(let message, let sender):
                    sender?.resume()
                    continuation.resume(returning: message)
                case .end(let error):
                    if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: nil) }
                case .wait:
                    break
                }
            }
        } onCancel: {
            let receiver = state.withLock { s -> Receiver? in
                guard let index = s.receivers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.receivers.remove(at: index)
            }
            receiver?.continuation.resume(throwing: PeerSyncError(.cancelled, "receive cancelled"))
        }
    }

    /// Ends the queue (the first call decides how). Buffered messages are still received
    /// unless `discardingBuffered`; then receivers get nil or `error`.
    func finish(throwing error: (any Error)? = nil, discardingBuffered: Bool = false) {
        let (receivers, sender, end) = state.withLock { s -> ([Receiver], CheckedContinuation<Void, Never>?, (any Error)?) in
            if !s.finished {
                s.finished = true
                s.error = error
            }
            if discardingBuffered {
                s.buffer = []
                s.head = 0
                s.bytes = 0
            }
            let receivers = s.count == 0 ? s.receivers : []
            if s.count == 0 { s.receivers = [] }
            let sender = s.sender
            s.sender = nil
            return (receivers, sender, s.error)
        }
        sender?.resume()
        for receiver in receivers {
            if let end { receiver.continuation.resume(throwing: end) } else { receiver.continuation.resume(returning: nil) }
        }
    }
}
