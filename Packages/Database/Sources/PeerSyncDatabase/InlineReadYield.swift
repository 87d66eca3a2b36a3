#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// When a task that has just read on its own thread (``Database/inShortReadBatch(_:)``) must
/// yield: when no such yield happened on this thread in the last ``interval``. A loop of
/// inline reads therefore lets the other tasks of its executor run at least once per
/// ``interval`` plus one read, as a loop of hops to a reader thread would — without paying,
/// after every read of a few microseconds, for the yield's hand-over to another thread of the
/// pool (a futex wake of one thread and the park of this one, more than such a read costs).
///
/// Per thread, not per task or per database: the thread is what the other tasks wait for, so
/// the bound holds whatever task or database reads on it (a task cannot leave its thread
/// between two reads without suspending, and a suspension lets the others run anyway).
/// The stamp lives in a thread-specific slot as a plain integer (no allocation).
enum InlineReadYield {
    /// The longest a thread runs inline reads between two yields (plus the read that finds it
    /// over): 1 ms, half the longest read allowed inline (`QueryRunTimes.inlineLimit`).
    static let interval: UInt64 = 1_000_000   // nanoseconds

    /// The thread-specific slot holding the monotonic time (nanoseconds + 1; 0: never) of the
    /// last yield on this thread.
    private static let slot: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "pthread_key_create failed: \(status)")
        return key
    }()

    /// Whether the caller must yield now; if so, records that it does on this thread (the
    /// caller then awaits `Task.yield()`).
    static func isDue() -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return isDue(at: UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec))
    }

    /// ``isDue()`` at monotonic time `nanoseconds` (for tests).
    static func isDue(at nanoseconds: UInt64) -> Bool {
        let stamp = nanoseconds &+ 1   // 0 in the slot: no yield yet on this thread
        let last = UInt64(UInt(bitPattern: pthread_getspecific(slot)))
        if last != 0, stamp &- last < interval { return false }
        pthread_setspecific(slot, UnsafeRawPointer(bitPattern: UInt(stamp)))
        return true
    }
}
