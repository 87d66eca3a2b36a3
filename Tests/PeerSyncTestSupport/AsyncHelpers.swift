import PeerSyncCore

/// Runs `body` with a time limit of `seconds`; throws `.timeout` (naming `what`) if it is
/// exceeded, cancelling `body`. The limit is used as given: callers that assume full speed
/// stretch it with `TestTiming.slow(seconds:)`.
public func withTimeout<T: Sendable>(_ seconds: Double, _ what: String = "operation",
                                     _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        guard let first = try await group.next() else { throw PeerSyncError(.internalError, "no result") }
        group.cancelAll()
        guard let value = first else {
            throw PeerSyncError(.timeout, "\(what) did not finish within \(seconds) s")
        }
        return value
    }
}

/// A one-shot gate tasks can wait on: ``wait()`` suspends until ``open()`` has been called
/// (at once if it already was). Thread-safe.
public final class AsyncLatch: Sendable {
    private let state = LockedValue<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// A closed latch.
    public init() {}

    /// Opens the latch for good and resumes every waiter.
    public func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    /// Returns once the latch is open.
    public func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }
}
