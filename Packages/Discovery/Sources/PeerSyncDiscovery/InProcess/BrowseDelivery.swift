import PeerSyncCore

/// Delivers one in-process browse's events to its stream, each after its simulated delay and
/// in the order they were scheduled (a late event holds back the ones behind it).
final class BrowseDelivery: Sendable {
    private struct Pending {
        let due: ContinuousClock.Instant
        let event: PeerEvent
    }

    private struct State {
        var queue: [Pending] = []
        var lastDue: ContinuousClock.Instant?
        var timer: Task<Void, Never>?
        var stopped = false
    }

    private enum Step {
        case idle
        case delivered
        case wait(ContinuousClock.Instant)
    }

    let feed: OrderedStreamFeed<PeerEvent>
    // Guards the queue of delayed events. Lock order: registry → delivery → feed.
    private let state = LockedValue(State())
    private let doorbell: AsyncStream<Void>.Continuation

    init(feed: OrderedStreamFeed<PeerEvent>, delayed: Bool) {
        self.feed = feed
        let (rings, doorbell) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.doorbell = doorbell
        guard delayed else {
            doorbell.finish()
            return
        }
        let state = self.state
        let timer = Task {
            for await _ in rings {
                deliveries: while !Task.isCancelled {
                    let step = state.withLock { state -> Step in
                        guard let first = state.queue.first else { return .idle }
                        guard first.due <= ContinuousClock.now else { return .wait(first.due) }
                        state.queue.removeFirst()
                        feed.enqueue(first.event)
                        return .delivered
                    }
                    switch step {
                    case .idle: break deliveries
                    case .delivered: feed.flush()
                    case .wait(let due): try? await Task.sleep(until: due, clock: .continuous)
                    }
                }
                if Task.isCancelled { return }
            }
        }
        state.withLock { $0.timer = timer }
    }

    /// Queues `event` to arrive `delay` from now (or behind the events queued before it).
    /// May be called under the registry's lock; ``kick()`` after releasing it.
    func schedule(_ event: PeerEvent, after delay: Duration) {
        state.withLock { state in
            guard !state.stopped else { return }
            if delay == .zero && state.queue.isEmpty {
                feed.enqueue(event)
                return
            }
            let now = ContinuousClock.now
            let due = max(state.lastDue ?? now, now + delay)
            state.lastDue = due
            state.queue.append(Pending(due: due, event: event))
        }
    }

    /// Delivers what is due and wakes the timer for the rest. Call without holding locks.
    func kick() {
        feed.flush()
        doorbell.yield(())
    }

    /// Ends the stream after the events already delivered (queued ones are dropped). Call
    /// without holding locks.
    func stop() {
        let timer = state.withLock { state -> Task<Void, Never>? in
            state.stopped = true
            state.queue.removeAll()
            return state.timer
        }
        timer?.cancel()
        doorbell.finish()
        feed.finish()
    }
}
