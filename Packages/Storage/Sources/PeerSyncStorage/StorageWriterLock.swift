import Foundation
import PeerSyncCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Serializes the write transactions of one store within a process, with a timeout and
/// detection of a nested write on the same thread (which would otherwise wait for itself
/// forever). Every backend of this repository uses it for ``Storage/write(_:)``; a backend
/// then adds its own cross-process lock (SQLite's WAL lock, LMDB's lock file) behind it.
///
/// Errors: `.storage` ("write transactions do not nest") when the calling thread already
/// holds the lock; `.busy` when another thread held it past the timeout.
///
/// `@unchecked Sendable`: `owner` is only read and written while `condition` is locked.
package final class StorageWriterLock: @unchecked Sendable {
    private let condition = NSCondition()
    private var owner: pthread_t?

    package init() {}

    /// Waits until the lock is free, at most `timeout` (nil: without limit), and takes it.
    /// `context` (e.g. `["path": …]`) is attached to the errors.
    package func acquire(timeout: Duration?, context: [String: String] = [:]) throws(PeerSyncError) {
        let me = pthread_self()
        let deadline = timeout.map { Date(timeIntervalSinceNow: max(0, $0.seconds)) }
        condition.lock()
        defer { condition.unlock() }
        if let owner, pthread_equal(owner, me) != 0 {
            throw PeerSyncError(.storage, "write transactions do not nest: this thread is already in one",
                                context: context)
        }
        while owner != nil {
            guard let deadline else {
                condition.wait()
                continue
            }
            if !condition.wait(until: deadline), owner != nil {
                var context = context
                context["busyTimeout"] = timeout.map { "\($0)" }
                throw PeerSyncError(.busy, "another write transaction in this process held the store longer than busyTimeout",
                                    context: context)
            }
        }
        owner = me
    }

    /// Releases the lock taken by ``acquire(timeout:context:)`` and wakes one waiter.
    package func release() {
        condition.lock()
        owner = nil
        condition.signal()
        condition.unlock()
    }

    /// Whether the calling thread holds the lock (to refuse `close()` inside a write).
    package var isHeldByCurrentThread: Bool {
        let me = pthread_self()
        condition.lock()
        defer { condition.unlock() }
        return owner.map { pthread_equal($0, me) != 0 } ?? false
    }

    /// Runs `body` holding the lock (see ``acquire(timeout:context:)``).
    package func withLock<R>(timeout: Duration?, context: [String: String] = [:],
                             _ body: () throws -> R) throws -> R {
        try acquire(timeout: timeout, context: context)
        defer { release() }
        return try body()
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    fileprivate var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) * 1e-18
    }
}
