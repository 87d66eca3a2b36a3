/// A FIFO asynchronous mutual-exclusion lock: tasks wait for it by suspending, never by
/// blocking a thread, so it may guard a critical section that contains `await`.
///
/// Contract:
/// - Not reentrant: a task that holds the lock and calls ``acquire()`` again waits forever.
/// - Fair: waiters get the lock in the order they called ``acquire()``; ``release()`` hands it
///   directly to the oldest waiter.
/// - Every successful ``acquire()`` / ``tryAcquire()`` must be paired with exactly one
///   ``release()``; prefer ``withLock(_:)``, which releases on return and on throw.
/// - Waiting is not cancellable: a cancelled task still waits for its turn.
/// - Safe to use from any task or thread. The internal state is guarded by a `LockedValue`
///   held only for a few instructions, never across a suspension.
public final class AsyncLock: Sendable {
    private struct State {
        var locked = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = LockedValue(State())

    /// Creates an unlocked lock.
    public init() {}

    /// Suspends until the lock is free, then takes it.
    public func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state in
                if state.locked {
                    state.waiters.append(continuation)
                    return false
                }
                state.locked = true
                return true
            }
            if acquired { continuation.resume() }
        }
    }

    /// Takes the lock if it is free right now; returns whether it did (never waits).
    public func tryAcquire() -> Bool {
        state.withLock { state in
            if state.locked { return false }
            state.locked = true
            return true
        }
    }

    /// Hands the lock to the oldest waiter, or unlocks it if nobody waits.
    public func release() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            if state.waiters.isEmpty {
                state.locked = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }

    /// How many tasks wait in ``acquire()`` now (for tests).
    var waiterCount: Int {
        state.withLock { $0.waiters.count }
    }

    /// Runs `body` while holding the lock and releases it afterwards, also when `body` throws.
    public func withLock<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }
}
