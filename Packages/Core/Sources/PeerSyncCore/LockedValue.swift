#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// PeerSync's one lock type: a value guarded by a pthread mutex, reachable only inside
/// ``withLock(_:)``. Every module uses it (`package` access) instead of `Synchronization.Mutex`,
/// `NSLock` or its own wrapper.
///
/// A pthread mutex rather than `Synchronization.Mutex`: on Linux ThreadSanitizer does not see
/// `Mutex`'s contended (futex) path and reports false "Swift access races" inside `withLock`
/// (see `Tools/sanitizers/`); with a pthread mutex a TSan run is meaningful without a shim.
/// Not recursive: calling back into the same lock from `body` deadlocks.
@usableFromInline
package final class LockedValue<Value>: @unchecked Sendable {
    // `mutex` guards `value`. Allocated once, destroyed in deinit. Visible to inlined code
    // only (`withLock` is inlinable, see there); no one else touches them.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline var value: Value

    @usableFromInline
    package init(_ value: Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        // Default attributes: initialization cannot fail short of memory exhaustion.
        _ = pthread_mutex_init(mutex, nil)
        self.value = value
    }

    deinit {
        _ = pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value. Do not call back into the same lock,
    /// suspend, or resume continuations inside `body`.
    ///
    /// Inlinable: every module takes its locks through it, many times per replicated
    /// revision; called across modules unspecialized, each call looked up the generic
    /// metadata of `Value` and called `body` through a generic context (~3 % of the CPU of
    /// a replication in the profile).
    @inlinable
    package func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
