import Dispatch

/// Runs closures one at a time, in the order they were submitted, on a dispatch queue of its
/// own — what `DispatchQueue.async` on a serial queue does, except that a burst of
/// submissions costs one dispatch (one thread wake-up) instead of one each: while a drain is
/// scheduled or running, new closures join its list.
///
/// Why: listener queues get an event per document moved (a mesh peer: several per revision
/// stored, ~400,000 revisions in a 64-peer benchmark), and each `DispatchQueue.async` woke a
/// thread — scheduling that showed as a large share of the kernel's time in the profile.
///
/// Ordering: closures run in the order ``async(_:)`` was called (callers that enqueue under
/// their own lock keep their order); never concurrently; never on the caller's thread.
/// Thread-safety: ``async(_:)`` may be called from any thread, also from a closure it runs.
package final class SerialDelivery: Sendable {
    private struct State {
        var pending: [@Sendable () -> Void] = []
        /// A drain is scheduled or running: it will run `pending`.
        var draining = false
    }

    private let state = LockedValue(State())
    private let queue: DispatchQueue

    /// A delivery queue named `label` (as a dispatch queue's label).
    package init(label: String) {
        queue = DispatchQueue(label: label)
    }

    /// Runs `work` after every closure submitted before it.
    package func async(_ work: @escaping @Sendable () -> Void) {
        let schedule = state.withLock { s -> Bool in
            s.pending.append(work)
            if s.draining { return false }
            s.draining = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    private func drain() {
        while true {
            let batch = state.withLock { s -> [@Sendable () -> Void] in
                if s.pending.isEmpty {
                    s.draining = false
                    return []
                }
                defer { s.pending = [] }
                return s.pending
            }
            if batch.isEmpty { return }
            for work in batch { work() }
        }
    }
}
