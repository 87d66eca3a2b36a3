#if canImport(CEpoll)
internal import CEpoll
#endif
import PeerSyncCore

/// Hands memory that the C allocator keeps free back to the operating system, after
/// connections end.
///
/// Why: glibc's malloc keeps freed memory in its heaps (one per arena) for reuse, and only
/// returns the top of a heap. After a burst of connections — thousands of silent ones, or
/// hundreds of concurrent pulls — the freed buffers are scattered below live allocations, so
/// the process stayed hundreds of MB above its idle size although nothing held that memory
/// (measured with `Tools/soak-memory`: `malloc_trim(0)` in the idle listener brought 197 MB
/// back to 61 MB). `malloc_trim(0)` releases free pages inside the heaps too (madvise).
///
/// A trim walks every arena under its lock, so it is throttled: the first request schedules
/// one trim `delay` later and requests until then are covered by it (at most one trim per
/// delay while connections keep ending). Process-wide, like the allocator; thread-safe. A
/// no-op where glibc's `malloc_trim` is not available.
package enum FreedMemory {
    private struct State {
        var scheduled = false
        var trims = 0
    }
    private static let state = LockedValue(State())

    /// Schedules a trim `delay` from now unless one is already scheduled.
    package static func releaseSoon(after delay: Duration) {
        let schedule = state.withLock { s -> Bool in
            if s.scheduled { return false }
            s.scheduled = true
            return true
        }
        guard schedule else { return }
        Task.detached(priority: .background) {
            try? await Task.sleep(for: delay)
            state.withLock { $0.scheduled = false }
            releaseNow()
        }
    }

    /// Trims now, on the calling thread.
    package static func releaseNow() {
        #if canImport(CEpoll)
        _ = malloc_trim(0)
        #endif
        state.withLock { $0.trims += 1 }
    }

    /// How many trims ran in this process (for tests).
    package static var trimCount: Int { state.withLock { $0.trims } }

    /// Whether a trim is scheduled and has not run yet (for tests).
    package static var isScheduled: Bool { state.withLock { $0.scheduled } }
}
