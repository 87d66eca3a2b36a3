import PeerSyncCore
import PeerSyncTransport

/// The frames waiting to be written by a connection's writer task.
///
/// Three lanes: control frames (ping/pong) go first; data frames (encoded messages, each
/// possibly several fragments) in FIFO order; the close frame last, after the data accepted
/// before it (or, if urgent, instead of it). Data is bounded: a sender is admitted while fewer
/// than `limit` bytes wait (so one message of any size passes alone), else it suspends in FIFO
/// order. All state is behind one LockedValue; continuations are resumed outside it.
final class OutboundQueue: Sendable {
    struct Batch {
        var frames: [[UInt8]]
        var containsClose: Bool
    }

    private struct Sender {
        let id: UInt64
        let frame: [UInt8]
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var control: [[UInt8]] = []
        var data: [[UInt8]] = []
        var dataHead = 0
        var dataBytes = 0
        var senders: [Sender] = []
        var closeFrame: [UInt8]?
        var closeTaken = false
        var closeWritten = false
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
        /// Set when the link is gone: the writer stops, senders fail with it.
        var failure: PeerSyncError?
        var writer: CheckedContinuation<Void, Never>?
        var nextID: UInt64 = 0
        /// Someone is writing to the stream: the writer task with a batch, or a sender writing
        /// its own frame directly (``tryBeginDirectWrite()``).
        var busy = false

        var hasWork: Bool { !control.isEmpty || hasData || closeFrame != nil }

        var accepting: Bool { closeFrame == nil && !closeTaken && failure == nil }
        var hasData: Bool { dataHead < data.count }

        mutating func admitSenders(limit: Int) -> [CheckedContinuation<Void, any Error>] {
            var admitted: [CheckedContinuation<Void, any Error>] = []
            while let first = senders.first, dataBytes < limit || !hasData {
                senders.removeFirst()
                data.append(first.frame)
                dataBytes += first.frame.count
                admitted.append(first.continuation)
            }
            return admitted
        }
    }

    private let limit: Int
    private let state = LockedValue(State())

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Queues an encoded data message. Suspends while `limit` bytes already wait. Throws
    /// `.connectionClosed` once a close was queued, the link's error once it broke, and
    /// `.cancelled` if the task is cancelled while waiting (the message is then not queued).
    func send(_ frame: [UInt8]) async throws {
        let id = state.withLock { s -> UInt64 in s.nextID &+= 1; return s.nextID }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Action { case done(CheckedContinuation<Void, Never>?), wait, fail(PeerSyncError) }
                let action = state.withLock { s -> Action in
                    if let failure = s.failure { return .fail(failure) }
                    if !s.accepting { return .fail(PeerSyncError(.connectionClosed, "the WebSocket is closing")) }
                    if s.senders.isEmpty && (s.dataBytes < limit || !s.hasData) {
                        s.data.append(frame)
                        s.dataBytes += frame.count
                        let writer = s.writer
                        s.writer = nil
                        return .done(writer)
                    }
                    if Task.isCancelled { return .fail(PeerSyncError(.cancelled, "send cancelled")) }
                    s.senders.append(Sender(id: id, frame: frame, continuation: continuation))
                    return .wait
                }
                switch action {
                case .done(let writer):
                    writer?.resume()
                    continuation.resume()
                case .wait:
                    break
                case .fail(let error):
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            let sender = state.withLock { s -> Sender? in
                guard let index = s.senders.firstIndex(where: { $0.id == id }) else { return nil }
                return s.senders.remove(at: index)
            }
            sender?.continuation.resume(throwing: PeerSyncError(.cancelled, "send cancelled"))
        }
    }

    /// Queues a ping or pong ahead of data. Returns false once a close is queued or the link
    /// is gone.
    @discardableResult
    func sendControl(_ frame: [UInt8]) -> Bool {
        let (ok, writer) = state.withLock { s -> (Bool, CheckedContinuation<Void, Never>?) in
            guard s.accepting else { return (false, nil) }
            s.control.append(frame)
            let writer = s.writer
            s.writer = nil
            return (true, writer)
        }
        writer?.resume()
        return ok
    }

    /// Queues the close frame: after the queued data, or instead of it when `urgent`. Senders
    /// still waiting fail with `.connectionClosed`. Only the first call queues a frame;
    /// returns whether this call did.
    @discardableResult
    func sendClose(_ frame: [UInt8], urgent: Bool) -> Bool {
        let (queued, waiting, writer) = state.withLock { s -> (Bool, [Sender], CheckedContinuation<Void, Never>?) in
            guard s.accepting else { return (false, [], nil) }
            s.closeFrame = frame
            if urgent {
                s.data = []
                s.dataHead = 0
                s.dataBytes = 0
                s.control = []
            }
            let waiting = s.senders
            s.senders = []
            let writer = s.writer
            s.writer = nil
            return (true, waiting, writer)
        }
        for sender in waiting {
            sender.continuation.resume(throwing: PeerSyncError(.connectionClosed, "the WebSocket closed before the message was sent"))
        }
        writer?.resume()
        return queued
    }

    /// Ends the queue because the link is gone: the writer stops, senders fail with `error`.
    func fail(_ error: PeerSyncError) {
        let (waiting, writer, closeWaiters) = state.withLock { s -> ([Sender], CheckedContinuation<Void, Never>?, [CheckedContinuation<Void, Never>]) in
            if s.failure == nil { s.failure = error }
            let waiting = s.senders
            s.senders = []
            s.data = []
            s.dataHead = 0
            s.dataBytes = 0
            s.control = []
            let writer = s.writer
            s.writer = nil
            let closeWaiters = s.closeWaiters
            s.closeWaiters = []
            return (waiting, writer, closeWaiters)
        }
        for sender in waiting { sender.continuation.resume(throwing: error) }
        writer?.resume()
        for waiter in closeWaiters { waiter.resume() }
    }

    /// The writer's next frames: control frames, then data up to about 256 KiB (small frames
    /// are batched into one write), then the close frame once the data is gone. Suspends while
    /// there is nothing; nil when the writer must stop (link gone, or close written).
    func nextBatch() async -> Batch? {
        while true {
            enum Step { case batch(Batch, [CheckedContinuation<Void, any Error>]), stop, wait }
            let step = state.withLock { s -> Step in
                if s.failure != nil || s.closeTaken { return .stop }
                if s.busy { return .wait }
                var frames = s.control
                s.control = []
                var bytes = frames.reduce(0) { $0 + $1.count }
                while s.hasData && (frames.isEmpty || bytes < 256 * 1024) {
                    let frame = s.data[s.dataHead]
                    s.data[s.dataHead] = []
                    s.dataHead += 1
                    s.dataBytes -= frame.count
                    bytes += frame.count
                    frames.append(frame)
                }
                if !s.hasData {
                    s.data.removeAll(keepingCapacity: false)
                    s.dataHead = 0
                } else if s.dataHead > 64 && s.dataHead * 2 > s.data.count {
                    s.data.removeFirst(s.dataHead)
                    s.dataHead = 0
                }
                let admitted = s.admitSenders(limit: limit)
                var containsClose = false
                if !s.hasData, let close = s.closeFrame {
                    frames.append(close)
                    s.closeTaken = true
                    containsClose = true
                }
                if frames.isEmpty { return .wait }
                s.busy = true
                return .batch(Batch(frames: frames, containsClose: containsClose), admitted)
            }
            switch step {
            case .stop:
                return nil
            case .batch(let batch, let admitted):
                for sender in admitted { sender.resume() }
                return batch
            case .wait:
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { s -> Bool in
                        if s.failure != nil || s.closeTaken || (!s.busy && s.hasWork) {
                            return true
                        }
                        s.writer = continuation
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
        }
    }

    /// Called by the writer task after it wrote a batch from ``nextBatch()``.
    func endBatch() {
        state.withLock { $0.busy = false }
    }

    /// A sender may write its frame to the stream itself (skipping the writer task) when
    /// nothing is queued or being written: then this returns true and the caller must call
    /// ``endDirectWrite()`` when done. Order is kept: anything sent meanwhile queues behind.
    func tryBeginDirectWrite() -> Bool {
        state.withLock { s -> Bool in
            guard s.accepting, !s.busy, !s.hasWork, s.senders.isEmpty else { return false }
            s.busy = true
            return true
        }
    }

    func endDirectWrite() {
        let writer = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.busy = false
            guard s.hasWork || s.failure != nil else { return nil }
            let writer = s.writer
            s.writer = nil
            return writer
        }
        writer?.resume()
    }

    /// Called by the writer after the close frame went out.
    func markCloseWritten() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.closeWritten = true
            let waiters = s.closeWaiters
            s.closeWaiters = []
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the close frame was written or the link is gone.
    func waitUntilCloseWrittenOrFailed() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.closeWritten || s.failure != nil { return true }
                s.closeWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
