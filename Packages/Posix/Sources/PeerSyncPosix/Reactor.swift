#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CEpoll
import Foundation
import PeerSyncCore
import Synchronization

/// Readiness of a file descriptor, as the reactor reports it.
package struct Readiness: OptionSet, Sendable, Hashable {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Input is available, or the peer hung up or the descriptor is in error (a read then
    /// returns end of stream or the error).
    package static let readable = Readiness(rawValue: 1)
    /// Output may proceed, or the descriptor is in error (a write then returns the error).
    package static let writable = Readiness(rawValue: 2)
}

/// One file descriptor's registration with the ``Reactor``; pass it to
/// ``Reactor/unregister(_:)``.
package struct ReactorRegistration: Sendable, Hashable {
    /// The registered descriptor.
    package let fd: Int32
    fileprivate let token: UInt64
}

/// The reactor: one thread (named `PeerSyncReactor`) blocked in `epoll_wait` for every
/// registered file descriptor of the process.
///
/// Any descriptor epoll accepts can be registered — TCP and Unix sockets, `SOCK_SEQPACKET`
/// sockets (a Bluetooth L2CAP channel), pipes, eventfds — with a readiness callback
/// (``register(fd:onReadiness:)``). Registrations are edge-triggered for input and output:
/// the callback hears of a direction becoming ready once per edge, so its owner must drain
/// (read or write until `EAGAIN`) before waiting for the next one. ``AsyncDescriptor`` does
/// this bookkeeping and bridges it to async/await: I/O syscalls run in the calling task and a
/// task only suspends when one answers `EAGAIN`. So an idle connection costs a registration
/// and a suspended task, never a thread.
///
/// Threading: every method may be called from any thread. Callbacks run on the reactor
/// thread, one at a time; they must be quick and must not block (resume a continuation, set a
/// flag).
package final class Reactor: @unchecked Sendable {
    /// The process-wide reactor (one thread, started on first use), or the error that
    /// prevented creating it (e.g. the process is out of file descriptors).
    package static let shared: Result<Reactor, PeerSyncError> = Result { () throws(PeerSyncError) in
        Reactor(epfd: try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) })
    }

    /// The reactor, or its creation error (``shared``).
    package static func get() throws(PeerSyncError) -> Reactor {
        try shared.get()
    }

    /// `epfd` is immutable after init and lives for the process (`@unchecked Sendable`:
    /// everything else is a LockedValue or an Atomic); `handlers` is the token → callback table read
    /// by the reactor thread.
    private let epfd: Int32
    private let handlers = LockedValue<[UInt64: @Sendable (Readiness) -> Void]>([:])
    private let nextToken = Atomic<UInt64>(1)

    private init(epfd: Int32) {
        self.epfd = epfd
        let thread = Thread { [self] in
            Reactor.nameCurrentThread("PeerSyncReactor")
            self.run()
        }
        thread.start()
    }

    /// Names the calling thread (15 characters at most; shown in /proc/<pid>/task/*/comm and
    /// debuggers). `pthread_setname_np` is not exported by Swift's Glibc module.
    private static func nameCurrentThread(_ name: String) {
        guard let fd = try? syscall("open", { open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC) }) else { return }
        _ = Array(name.utf8.prefix(15)).withUnsafeBytes { bytes in try? syscall("write") { write(fd, bytes.baseAddress, bytes.count) } }
        closeDescriptor(fd)
    }

    /// Registers `fd` (any descriptor epoll accepts; the caller keeps owning it) for
    /// edge-triggered input and output readiness. `onReadiness` runs on the reactor thread
    /// for each edge — possibly once right after registering, e.g. `.writable` for a
    /// connected socket — until ``unregister(_:)``; an event already being dispatched may
    /// still reach it once after `unregister` returns. The registration holds `onReadiness`
    /// (and what it captures) until then: capture the owner weakly.
    ///
    /// Throws the `epoll_ctl` error, e.g. `.io` with errno `EPERM` for a descriptor epoll
    /// cannot poll (a regular file).
    package func register(fd: Int32, onReadiness: @escaping @Sendable (Readiness) -> Void) throws(PeerSyncError) -> ReactorRegistration {
        let registration = reserveRegistration(fd: fd)
        try register(registration, onReadiness: onReadiness)
        return registration
    }

    /// A registration for `fd` that is not active yet (no syscall): for an owner whose
    /// callback can only be built once the owner is (a callback capturing the owner weakly).
    /// Activate it with ``register(_:onReadiness:)``.
    package func reserveRegistration(fd: Int32) -> ReactorRegistration {
        ReactorRegistration(fd: fd, token: nextToken.wrappingAdd(1, ordering: .relaxed).oldValue)
    }

    /// Activates a reserved registration; as ``register(fd:onReadiness:)``.
    package func register(_ registration: ReactorRegistration, onReadiness: @escaping @Sendable (Readiness) -> Void) throws(PeerSyncError) {
        handlers.withLock { $0[registration.token] = onReadiness }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
        event.data.u64 = registration.token
        do {
            try syscall("epoll_ctl") { epoll_ctl(epfd, EPOLL_CTL_ADD, registration.fd, &event) }
        } catch {
            handlers.withLock { _ = $0.removeValue(forKey: registration.token) }
            throw error
        }
    }

    /// Removes the registration and drops its callback; call it before the descriptor is
    /// closed. Idempotent.
    package func unregister(_ registration: ReactorRegistration) {
        handlers.withLock { _ = $0.removeValue(forKey: registration.token) }
        var event = epoll_event()
        // ENOENT: not registered (any more); nothing to remove.
        _ = try? syscall("epoll_ctl", handling: [ENOENT]) { epoll_ctl(epfd, EPOLL_CTL_DEL, registration.fd, &event) }
    }

    private func run() {
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        var ready: [(@Sendable (Readiness) -> Void, Readiness)] = []
        ready.reserveCapacity(capacity)
        while true {
            let count: Int32
            do {
                count = try syscall("epoll_wait") { epoll_wait(epfd, events, Int32(capacity), -1) }
            } catch {
                Logger(.network).error("reactor: \(error)")
                continue
            }
            ready.removeAll(keepingCapacity: true)
            handlers.withLock { table in
                for i in 0..<Int(count) {
                    guard let handler = table[events[i].data.u64] else { continue }
                    ready.append((handler, Self.readiness(of: events[i].events)))
                }
            }
            for (handler, readiness) in ready { handler(readiness) }
        }
    }

    private static func readiness(of flags: UInt32) -> Readiness {
        var readiness: Readiness = []
        if flags & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readiness.insert(.readable)
        }
        if flags & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readiness.insert(.writable)
        }
        return readiness
    }
}
