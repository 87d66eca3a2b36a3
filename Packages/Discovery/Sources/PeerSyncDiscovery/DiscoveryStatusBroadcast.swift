import PeerSyncCore

/// Holds a discovery's ``DiscoveryStatus`` and hands out ``Discovery/statusUpdates()``
/// streams: a building block for implementations.
///
/// Each stream yields the current status first, then every change in order; all streams end
/// after ``DiscoveryStatus/stopped``, which is final (later updates are ignored). Setting the
/// status it already has does nothing.
///
/// Threading: any thread; no method suspends or yields while holding the internal lock.
public final class DiscoveryStatusBroadcast: Sendable {
    private struct State {
        var current: DiscoveryStatus
        var feeds: [Int: OrderedStreamFeed<DiscoveryStatus>] = [:]
        var nextID = 0
    }

    // Guards the status and the subscribers; feeds are only filled (enqueue) under it and
    // flushed after it is released.
    private let state: LockedValue<State>

    /// A broadcast whose current status is `initial` (default `.starting`).
    public init(_ initial: DiscoveryStatus = .starting) {
        state = LockedValue(State(current: initial))
    }

    /// The current status.
    public var current: DiscoveryStatus { state.withLock { $0.current } }

    /// A new stream: the current status, then every change.
    public func stream() -> AsyncStream<DiscoveryStatus> {
        let (stream, feed) = OrderedStreamFeed<DiscoveryStatus>.makeStream()
        let id = state.withLock { state -> Int in
            let id = state.nextID
            state.nextID += 1
            feed.enqueue(state.current)
            if state.current == .stopped {
                feed.enqueueFinish()
            } else {
                state.feeds[id] = feed
            }
            return id
        }
        feed.onTermination { [weak self] in
            self?.state.withLock { _ = $0.feeds.removeValue(forKey: id) }
        }
        feed.flush()
        return stream
    }

    /// Sets the status and tells every stream. Ignored once ``DiscoveryStatus/stopped``.
    public func update(_ status: DiscoveryStatus) {
        let feeds = state.withLock { state -> [OrderedStreamFeed<DiscoveryStatus>] in
            guard state.current != .stopped, state.current != status else { return [] }
            state.current = status
            let feeds = Array(state.feeds.values)
            for feed in feeds {
                feed.enqueue(status)
                if status == .stopped { feed.enqueueFinish() }
            }
            if status == .stopped { state.feeds.removeAll() }
            return feeds
        }
        for feed in feeds { feed.flush() }
    }
}
