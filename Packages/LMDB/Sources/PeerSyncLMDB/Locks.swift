import Foundation
import PeerSyncCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A point in time by which a lock must be acquired (from ``StorageOptions/busyTimeout``).
struct Deadline: Sendable {
    let timeout: Duration
    let instant: ContinuousClock.Instant

    init(_ timeout: Duration) {
        self.timeout = timeout
        self.instant = ContinuousClock.now.advanced(by: max(timeout, .zero))
    }

    var remaining: Duration { max(.zero, ContinuousClock.now.duration(to: instant)) }
    var hasPassed: Bool { ContinuousClock.now >= instant }

    /// The deadline as a `Date`, for `NSCondition.wait(until:)`.
    var date: Date {
        let parts = remaining.components
        return Date(timeIntervalSinceNow: Double(parts.seconds) + Double(parts.attoseconds) * 1e-18)
    }

    func busyError(_ what: String, directory: String) -> PeerSyncError {
        PeerSyncError(.busy, "\(what) was held longer than busyTimeout",
                      context: ["directory": directory, "busyTimeout": "\(timeout)"])
    }
}

/// Readers/exclusive gate around every LMDB transaction of one environment in this process.
///
/// Every transaction (read or write) holds it shared for its whole life; changing the map size
/// (`mdb_env_set_mapsize`, which LMDB allows only while no transaction of this process is
/// active) and closing the environment hold it exclusively.
///
/// A waiting exclusive holder stops new shared holders from other threads (so a steady stream
/// of readers cannot starve a map resize), but a thread that already holds the gate shared
/// may take it again at once (a read inside a read never deadlocks against a waiting resize).
/// Every wait is bounded by its deadline. Shared holds are released on the thread that took
/// them.
///
/// `@unchecked Sendable`: every field is only touched with `condition` locked.
final class TransactionGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var sharedCount = 0
    private var exclusive = false
    private var exclusiveWaiters = 0
    /// Shared holds per thread.
    private var holders: [UInt: Int] = [:]

    private static func currentThread() -> UInt {
        #if canImport(Glibc)
        return UInt(pthread_self())
        #else
        return UInt(bitPattern: pthread_self())
        #endif
    }

    func lockShared(_ deadline: Deadline, directory: String) throws(PeerSyncError) {
        let me = Self.currentThread()
        condition.lock()
        defer { condition.unlock() }
        while !takeSharedIfFree(me) {
            if !condition.wait(until: deadline.date), exclusive || exclusiveWaiters > 0, deadline.hasPassed {
                throw deadline.busyError("the map (being resized or closed)", directory: directory)
            }
        }
    }

    /// ``lockShared(_:directory:)`` without waiting: false (not holding the gate) when an
    /// exclusive holder or waiter (a map resize, close) is in the way. The condition's mutex is
    /// only ever held for a few instructions.
    func tryLockShared() -> Bool {
        let me = Self.currentThread()
        condition.lock()
        defer { condition.unlock() }
        return takeSharedIfFree(me)
    }

    /// Under `condition`'s lock: takes the gate shared for thread `me` — again, if `me` holds
    /// it already; else only while no exclusive holder or waiter is in the way (false then).
    private func takeSharedIfFree(_ me: UInt) -> Bool {
        if let held = holders[me], held > 0 {
            holders[me] = held + 1
            sharedCount += 1
            return true
        }
        if exclusive || exclusiveWaiters > 0 { return false }
        holders[me] = 1
        sharedCount += 1
        return true
    }

    func unlockShared() {
        let me = Self.currentThread()
        condition.lock()
        if let held = holders[me] {
            holders[me] = held > 1 ? held - 1 : nil
        }
        sharedCount -= 1
        if sharedCount == 0 { condition.broadcast() }
        condition.unlock()
    }

    func lockExclusive(_ deadline: Deadline, directory: String) throws(PeerSyncError) {
        condition.lock()
        defer { condition.unlock() }
        exclusiveWaiters += 1
        defer {
            exclusiveWaiters -= 1
            if exclusiveWaiters == 0 { condition.broadcast() }  // readers held back by this waiter
        }
        while exclusive || sharedCount > 0 {
            if !condition.wait(until: deadline.date), exclusive || sharedCount > 0, deadline.hasPassed {
                throw deadline.busyError("a transaction of this process", directory: directory)
            }
        }
        exclusive = true
    }

    func unlockExclusive() {
        condition.lock()
        exclusive = false
        condition.broadcast()
        condition.unlock()
    }
}

/// The cross-process writer lock: `flock(LOCK_EX)` on a file of its own in the store directory.
///
/// LMDB serializes writers across processes itself, but without a timeout; this lock gives
/// ``StorageOptions/busyTimeout`` and, more importantly, keeps every other PeerSync writer out
/// while a transaction is replayed after the map grew (LMDB's own lock is released by the
/// abort that growing requires). `flock` locks belong to the open file description, so two
/// environments on one store conflict even inside one process, and closing some other
/// descriptor of the file never drops them (unlike `fcntl` locks).
///
/// `@unchecked Sendable`: `fd` is written only in `init` and `close()`; `close()` runs while
/// the owning environment holds its ``StorageWriterLock`` and exclusive ``TransactionGate``, so no
/// `lock`/`unlock` can run concurrently.
final class FileLock: @unchecked Sendable {
    private var fd: Int32
    let path: String

    init(path: String) throws(PeerSyncError) {
        self.path = path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        if fd < 0 { try check(errno, "open lock file", ["path": path]) }
        self.fd = fd
    }

    deinit { close() }

    func close() {
        if fd >= 0 {
            closeDescriptor(fd)
            fd = -1
        }
    }

    /// Takes the lock, polling until `deadline` (then `.busy`).
    func lock(_ deadline: Deadline, directory: String) throws(PeerSyncError) {
        var pause: UInt32 = 200  // microseconds
        while true {
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
            let err = errno
            if err == EINTR { continue }
            guard err == EWOULDBLOCK else { try check(err, "flock", ["path": path]); return }
            if deadline.hasPassed {
                throw deadline.busyError("the write lock (another process's write transaction)", directory: directory)
            }
            usleep(pause)
            pause = min(pause * 2, 10_000)
        }
    }

    func unlock() {
        _ = flock(fd, LOCK_UN)
    }
}

/// `close(2)`, callable from types that have a `close()` method of their own.
func closeDescriptor(_ fd: Int32) {
    #if canImport(Glibc)
    _ = Glibc.close(fd)
    #else
    _ = Darwin.close(fd)
    #endif
}
