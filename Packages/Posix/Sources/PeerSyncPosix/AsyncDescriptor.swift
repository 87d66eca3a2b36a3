#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import Synchronization

/// A non-blocking file descriptor registered with the ``Reactor``, usable from async code:
/// any kind — a TCP socket (``TCPStream``, ``TCPListener``), a `SOCK_SEQPACKET` socket such
/// as a Bluetooth L2CAP channel, a pipe.
///
/// It owns the descriptor: `fd` is immutable and its lifetime is governed by `state` (a
/// LockedValue). Operations run through ``withDescriptor(_:)``, which counts them in flight,
/// and the descriptor is released — removed from the reactor, then closed — exactly once: by
/// ``close()`` when nothing is in flight, else by the last operation to finish, or by
/// `deinit`. So a descriptor number is never reused while a syscall (`epoll_ctl` included)
/// may still touch it.
///
/// Threading: every method may be called from any task. At most one task may wait for each
/// direction at a time (a second concurrent waiter fails with `.internalError`).
package final class AsyncDescriptor: @unchecked Sendable {
    package let fd: Int32
    private let reactor: Reactor
    private let registration: ReactorRegistration
    private let state = LockedValue<State>(State())

    private struct State {
        var readReady = false
        var writeReady = false
        var readWaiter: UnsafeContinuation<Void, any Error>?
        var writeWaiter: UnsafeContinuation<Void, any Error>?
        var closed = false
        var inFlight = 0
        var released = false
    }

    package enum Direction: Sendable { case read, write }

    /// Takes ownership of `fd` (already non-blocking) and registers it with the process's
    /// reactor. On failure (no reactor, or epoll refuses the descriptor) `fd` is closed and the
    /// error thrown.
    package init(fd: Int32) throws(PeerSyncError) {
        let reactor: Reactor
        do {
            reactor = try Reactor.get()
        } catch {
            closeDescriptor(fd)
            throw error
        }
        self.fd = fd
        self.reactor = reactor
        self.registration = reactor.reserveRegistration(fd: fd)
        do {
            try reactor.register(registration) { [weak self] readiness in self?.readinessChanged(readiness) }
        } catch {
            state.withLock { $0.released = true; $0.closed = true }
            closeDescriptor(fd)
            throw error
        }
    }

    deinit {
        let release = state.withLock { s -> Bool in
            if s.released { return false }
            s.released = true
            return true
        }
        if release { releaseDescriptor() }
    }

    /// Removes the descriptor from the reactor, then closes it. Called exactly once, by whoever
    /// set `released`.
    private func releaseDescriptor() {
        reactor.unregister(registration)
        closeDescriptor(fd)
    }

    /// Whether ``close()`` was called.
    package var isClosed: Bool { state.withLock { $0.closed } }

    /// Runs `body` (syscalls on the descriptor) while the descriptor cannot be closed under
    /// it. Throws `.closed` once the descriptor is closed, else what `body` throws.
    @inline(__always) @discardableResult
    package func withDescriptor<R>(_ body: (Int32) throws(PeerSyncError) -> R) throws(PeerSyncError) -> R {
        let ok = state.withLock { s -> Bool in
            if s.closed { return false }
            s.inFlight += 1
            return true
        }
        guard ok else { throw closedStreamError }
        defer {
            let release = state.withLock { s -> Bool in
                s.inFlight -= 1
                if s.closed && s.inFlight == 0 && !s.released {
                    s.released = true
                    return true
                }
                return false
            }
            if release { releaseDescriptor() }
        }
        return try body(fd)
    }

    /// Makes a non-blocking system call on the descriptor, suspending on the reactor each time
    /// it answers `EAGAIN` until `direction` is ready, then calling again. `call` returns -1
    /// and sets `errno` on failure; other failures are thrown as ``syscall(_:handling:_:)``
    /// says. Throws `.closed` once the descriptor is closed and `.cancelled` as ``wait(_:cancellable:)``.
    package func perform<Value: FixedWidthInteger & Sendable>(
        _ direction: Direction, _ operation: @autoclosure () -> String, cancellable: Bool = true,
        _ call: (Int32) -> Value
    ) async throws -> Value {
        while true {
            let result = try withDescriptor { fd throws(PeerSyncError) in
                try syscall(operation(), handling: wouldBlockErrnos) { call(fd) }
            }
            switch result {
            case .succeeded(let value): return value
            case .failed: try await wait(direction, cancellable: cancellable)
            }
        }
    }

    /// Suspends until the reactor reports the direction ready (or returns at once if it was
    /// reported since the last wait). Throws `.closed` when the descriptor is closed and, if
    /// `cancellable`, `.cancelled` when the task is cancelled. A non-cancellable wait ends only
    /// with readiness or the descriptor's close (used where stopping halfway would corrupt the
    /// stream, e.g. in the middle of a frame).
    package func wait(_ direction: Direction, cancellable: Bool = true) async throws {
        if !cancellable {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                register(continuation, direction, checkCancellation: false)
            }
            return
        }
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                register(continuation, direction, checkCancellation: true)
            }
        } onCancel: {
            let waiter = state.withLock { s -> UnsafeContinuation<Void, any Error>? in
                switch direction {
                case .read:
                    defer { s.readWaiter = nil }
                    return s.readWaiter
                case .write:
                    defer { s.writeWaiter = nil }
                    return s.writeWaiter
                }
            }
            waiter?.resume(throwing: PeerSyncError(.cancelled, "socket wait cancelled"))
        }
    }

    private func register(_ continuation: UnsafeContinuation<Void, any Error>, _ direction: Direction,
                          checkCancellation: Bool) {
        enum Action { case resume, fail(PeerSyncError), none }
        let action = state.withLock { s -> Action in
            if s.closed { return .fail(closedStreamError) }
            switch direction {
            case .read:
                if s.readReady { s.readReady = false; return .resume }
            case .write:
                if s.writeReady { s.writeReady = false; return .resume }
            }
            if checkCancellation && Task.isCancelled { return .fail(PeerSyncError(.cancelled, "socket wait cancelled")) }
            switch direction {
            case .read:
                if s.readWaiter != nil {
                    return .fail(PeerSyncError(.internalError, "two concurrent reads on one descriptor"))
                }
                s.readWaiter = continuation
            case .write:
                if s.writeWaiter != nil {
                    return .fail(PeerSyncError(.internalError, "two concurrent writes on one descriptor"))
                }
                s.writeWaiter = continuation
            }
            return .none
        }
        switch action {
        case .resume: continuation.resume()
        case .fail(let error): continuation.resume(throwing: error)
        case .none: break
        }
    }

    /// The reactor's callback (on its thread): wakes the waiter of each ready direction, or
    /// remembers the readiness for the next wait.
    private func readinessChanged(_ readiness: Readiness) {
        let (r, w) = state.withLock { s -> (UnsafeContinuation<Void, any Error>?, UnsafeContinuation<Void, any Error>?) in
            var r: UnsafeContinuation<Void, any Error>?
            var w: UnsafeContinuation<Void, any Error>?
            if readiness.contains(.readable) {
                if let waiter = s.readWaiter { r = waiter; s.readWaiter = nil } else { s.readReady = true }
            }
            if readiness.contains(.writable) {
                if let waiter = s.writeWaiter { w = waiter; s.writeWaiter = nil } else { s.writeReady = true }
            }
            return (r, w)
        }
        r?.resume()
        w?.resume()
    }

    /// Closes the descriptor: pending and later operations fail with `.closed`; the descriptor
    /// itself is released now, or by the last operation in flight. Idempotent.
    package func close() {
        let (r, w, release, first) = state.withLock { s -> (UnsafeContinuation<Void, any Error>?, UnsafeContinuation<Void, any Error>?, Bool, Bool) in
            if s.closed { return (nil, nil, false, false) }
            s.closed = true
            let r = s.readWaiter, w = s.writeWaiter
            s.readWaiter = nil
            s.writeWaiter = nil
            var release = false
            if s.inFlight == 0 && !s.released {
                s.released = true
                release = true
            }
            return (r, w, release, true)
        }
        guard first else { return }
        if release { releaseDescriptor() }
        r?.resume(throwing: closedStreamError)
        w?.resume(throwing: closedStreamError)
    }
}
