#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CEpoll
import Foundation
import PeerSyncCore
import Synchronization

/// The reactor: one thread (named `PeerSyncReactor`) blocked in `epoll_wait` for every socket
/// of the process.
///
/// Sockets are registered once, edge-triggered, for input and output. I/O syscalls run
/// directly in the calling task (they are non-blocking); only when one answers `EAGAIN` does
/// the task suspend on a continuation, which this thread resumes when epoll reports readiness.
/// So an idle connection costs a registration and a suspended task, never a thread.
final class EventLoop: @unchecked Sendable {
    /// The process-wide reactor (one thread, started on first use), or the error that
    /// prevented creating it (e.g. the process is out of file descriptors).
    static let shared: Result<EventLoop, PeerSyncError> = {
        let fd = epoll_create1(Int32(EPOLL_CLOEXEC))
        if fd < 0 { return .failure(systemError("epoll_create1", errno: errno)) }
        return .success(EventLoop(epfd: fd))
    }()

    /// `epfd` is immutable after init and lives for the process; `registry` (a Mutex)
    /// protects the token → socket table read by the loop thread.
    private let epfd: Int32
    private let registry = Mutex<[UInt64: WeakSocket]>([:])
    private let nextToken = Atomic<UInt64>(1)

    private struct WeakSocket {
        weak var socket: Socket?
    }

    private init(epfd: Int32) {
        self.epfd = epfd
        let thread = Thread { [self] in
            EventLoop.nameCurrentThread("PeerSyncReactor")
            self.run()
        }
        thread.start()
    }

    /// Names the calling thread (15 characters at most; shown in /proc/<pid>/task/*/comm and
    /// debuggers). `pthread_setname_np` is not exported by Swift's Glibc module.
    private static func nameCurrentThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = Array(name.utf8.prefix(15)).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        Glibc.close(fd)
    }

    /// Registers `socket` for edge-triggered readiness events.
    func register(_ socket: Socket) throws(PeerSyncError) {
        registry.withLock { $0[socket.token] = WeakSocket(socket: socket) }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
        event.data.u64 = socket.token
        if epoll_ctl(epfd, EPOLL_CTL_ADD, socket.fd, &event) == -1 {
            let code = errno
            registry.withLock { _ = $0.removeValue(forKey: socket.token) }
            throw systemError("epoll_ctl", errno: code)
        }
    }

    /// Removes the registration; call before the descriptor is closed.
    func unregister(fd: Int32, token: UInt64) {
        registry.withLock { _ = $0.removeValue(forKey: token) }
        var event = epoll_event()
        _ = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event)
    }

    func makeToken() -> UInt64 { nextToken.wrappingAdd(1, ordering: .relaxed).oldValue }

    private func run() {
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while true {
            let n = epoll_wait(epfd, events, Int32(capacity), -1)
            if n < 0 {
                if errno == EINTR { continue }
                Logger(.network).error("epoll_wait failed: errno \(errno)")
                continue
            }
            guard n > 0 else { continue }
            var ready: [(Socket, UInt32)] = []
            ready.reserveCapacity(Int(n))
            registry.withLock { table in
                for i in 0..<Int(n) {
                    let token = events[i].data.u64
                    if let socket = table[token]?.socket { ready.append((socket, events[i].events)) }
                }
            }
            for (socket, flags) in ready {
                let readable = flags & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                let writable = flags & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                socket.readinessChanged(readable: readable, writable: writable)
            }
        }
    }
}

/// One socket descriptor and its readiness state.
///
/// `fd` is immutable; its lifetime is governed by `state` (a Mutex): operations run through
/// ``withDescriptor(_:)``, which counts them in flight, and the descriptor is closed exactly
/// once — by ``close()`` when nothing is in flight, else by the last operation to finish, or
/// by `deinit`. So a descriptor number is never reused while a syscall may still touch it.
final class Socket: @unchecked Sendable {
    let fd: Int32
    let token: UInt64
    private let loop: EventLoop
    private let state = Mutex<State>(State())

    private struct State: ~Copyable {
        var readReady = false
        var writeReady = false
        var readWaiter: UnsafeContinuation<Void, any Error>?
        var writeWaiter: UnsafeContinuation<Void, any Error>?
        var closed = false
        var inFlight = 0
        var released = false
    }

    enum Direction { case read, write }

    /// Takes ownership of `fd` (already non-blocking) and registers it with the reactor.
    init(fd: Int32) throws(PeerSyncError) {
        let loop: EventLoop
        switch EventLoop.shared {
        case .success(let shared): loop = shared
        case .failure(let error):
            Glibc.close(fd)
            throw error
        }
        self.fd = fd
        self.loop = loop
        self.token = loop.makeToken()
        do {
            try loop.register(self)
        } catch {
            state.withLock { $0.released = true; $0.closed = true }
            Glibc.close(fd)
            throw error
        }
    }

    deinit {
        let release = state.withLock { s -> Bool in
            if s.released { return false }
            s.released = true
            return true
        }
        if release {
            loop.unregister(fd: fd, token: token)
            Glibc.close(fd)
        }
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Runs a syscall on the descriptor; throws `.closed` once the socket is closed.
    @inline(__always)
    func withDescriptor<R>(_ body: (Int32) -> R) throws(PeerSyncError) -> R {
        let ok = state.withLock { s -> Bool in
            if s.closed { return false }
            s.inFlight += 1
            return true
        }
        guard ok else { throw closedStreamError }
        let result = body(fd)
        let release = state.withLock { s -> Bool in
            s.inFlight -= 1
            if s.closed && s.inFlight == 0 && !s.released {
                s.released = true
                return true
            }
            return false
        }
        if release { Glibc.close(fd) }
        return result
    }

    /// Suspends until the reactor reports the direction ready (or returns at once if it was
    /// reported since the last wait). Throws `.closed` when the socket is closed and, if
    /// `cancellable`, `.cancelled` when the task is cancelled. A non-cancellable wait ends only
    /// with readiness or the socket's close (used where stopping halfway would corrupt the
    /// stream, e.g. in the middle of a frame).
    func wait(_ direction: Direction, cancellable: Bool = true) async throws {
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
                    return .fail(PeerSyncError(.internalError, "two concurrent reads on one socket"))
                }
                s.readWaiter = continuation
            case .write:
                if s.writeWaiter != nil {
                    return .fail(PeerSyncError(.internalError, "two concurrent writes on one socket"))
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

    /// Called by the reactor thread.
    fileprivate func readinessChanged(readable: Bool, writable: Bool) {
        let (r, w) = state.withLock { s -> (UnsafeContinuation<Void, any Error>?, UnsafeContinuation<Void, any Error>?) in
            var r: UnsafeContinuation<Void, any Error>?
            var w: UnsafeContinuation<Void, any Error>?
            if readable {
                if let waiter = s.readWaiter { r = waiter; s.readWaiter = nil } else { s.readReady = true }
            }
            if writable {
                if let waiter = s.writeWaiter { w = waiter; s.writeWaiter = nil } else { s.writeReady = true }
            }
            return (r, w)
        }
        r?.resume()
        w?.resume()
    }

    /// Closes the socket: pending and later operations fail with `.closed`. Idempotent.
    func close() {
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
        loop.unregister(fd: fd, token: token)
        if release { Glibc.close(fd) }
        r?.resume(throwing: closedStreamError)
        w?.resume(throwing: closedStreamError)
    }
}
