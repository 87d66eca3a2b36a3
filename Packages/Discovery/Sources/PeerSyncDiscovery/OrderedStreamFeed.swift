import PeerSyncCore

/// Feeds an `AsyncStream` from any thread, in exactly the order elements were queued, without
/// ever yielding while a lock is held: a building block for ``Discovery`` implementations
/// (browse events, status streams).
///
/// ``enqueue(_:)`` only appends (cheap; safe to call while holding your own lock, so that the
/// order of your state changes is the order of the elements); ``flush()`` delivers what is
/// queued — call it after releasing your lock. One caller at a time delivers; others return
/// at once and their elements are delivered by the one delivering. ``send(_:)`` does both.
///
/// Threading: every method may be called from any thread; none blocks beyond a short
/// internal lock, and none suspends.
public final class OrderedStreamFeed<Element: Sendable>: Sendable {
    private enum Item {
        case element(Element)
        case finish
    }

    private struct State {
        var pending: [Item] = []
        var delivering = false
        var finishQueued = false
    }

    private let continuation: AsyncStream<Element>.Continuation
    // Guards the queue and the "someone is delivering" flag; never held while yielding.
    private let state = LockedValue(State())

    /// A feed for `continuation` (whose stream should buffer without limit).
    public init(_ continuation: AsyncStream<Element>.Continuation) {
        self.continuation = continuation
    }

    /// A new unbounded stream and the feed that fills it.
    public static func makeStream() -> (stream: AsyncStream<Element>, feed: OrderedStreamFeed<Element>) {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .unbounded)
        return (stream, OrderedStreamFeed(continuation))
    }

    /// Runs when the stream ends (finished, or its consumer cancelled): see
    /// `AsyncStream.Continuation.onTermination`. May run on any thread, also inside
    /// ``flush()``: it must not take a lock its caller of ``flush()`` might hold.
    public func onTermination(_ handler: @escaping @Sendable () -> Void) {
        continuation.onTermination = { _ in handler() }
    }

    /// Queues `element` behind everything queued before. Ignored after ``finish()`` was queued.
    public func enqueue(_ element: Element) {
        state.withLock { state in
            guard !state.finishQueued else { return }
            state.pending.append(.element(element))
        }
    }

    /// Queues the end of the stream behind everything queued before. Idempotent.
    public func enqueueFinish() {
        state.withLock { state in
            guard !state.finishQueued else { return }
            state.finishQueued = true
            state.pending.append(.finish)
        }
    }

    /// Whether the end of the stream has been queued.
    public var isFinished: Bool { state.withLock { $0.finishQueued } }

    /// Delivers everything queued, in order (unless another caller is delivering; then it does).
    public func flush() {
        let mine = state.withLock { state -> Bool in
            if state.delivering { return false }
            state.delivering = true
            return true
        }
        guard mine else { return }
        while true {
            let batch = state.withLock { state -> [Item] in
                let batch = state.pending
                state.pending.removeAll()
                if batch.isEmpty { state.delivering = false }
                return batch
            }
            if batch.isEmpty { return }
            for item in batch {
                switch item {
                case .element(let element): continuation.yield(element)
                case .finish: continuation.finish()
                }
            }
        }
    }

    /// ``enqueue(_:)`` then ``flush()``.
    public func send(_ element: Element) {
        enqueue(element)
        flush()
    }

    /// ``enqueueFinish()`` then ``flush()``.
    public func finish() {
        enqueueFinish()
        flush()
    }
}
