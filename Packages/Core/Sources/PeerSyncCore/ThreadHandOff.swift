/// Suspends the calling task until `start`'s work, running on another thread (a dispatch
/// queue, a thread of our own), delivers its result; returns that result. This is the one
/// bridge from blocking work on threads back to async code (the database's writer queue and
/// reader lanes, blob file I/O).
///
/// It is `withCheckedContinuation` plus a hand-over ThreadSanitizer can see: the result
/// passes through a ``LockedValue`` (a pthread mutex, which TSan intercepts) before the task
/// is resumed. When the other thread resumes a continuation before the task has suspended,
/// the Swift runtime synchronizes the two through an atomic inside the uninstrumented
/// concurrency library, and TSan then reports every object the other thread built as a data
/// race (`Tools/sanitizers/continuation-tsan-repro.swift` reproduces it). The lock costs one
/// uncontended lock/unlock pair per hand-over.
///
/// `start` runs synchronously on the calling task and must arrange for `deliver` to be called
/// exactly once, from any thread.
///
/// Inlinable, so that each database hop (a read or write of every replicated batch) is
/// specialized for its result type instead of running generically across modules.
@inlinable
package func awaitDelivery<R: Sendable, E: Error>(
    _ start: (_ deliver: @escaping @Sendable (Result<R, E>) -> Void) -> Void
) async -> Result<R, E> {
    let slot = LockedValue<Result<R, E>?>(nil)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        start { result in
            slot.withLock { $0 = result }
            continuation.resume()
        }
    }
    // `deliver` stored the result before it resumed this task.
    return slot.withLock { $0! }
}
