internal import CAvahi
import PeerSyncCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A thread of its own running an Avahi simple poll. Every Avahi object of one
/// ``DNSSDDiscovery`` is created, used and freed on this thread only, so none needs a lock:
/// work from other threads arrives as jobs (``enqueue(_:)``, ``perform(_:)``) that the thread
/// runs between poll iterations, and Avahi calls its callbacks on it. The thread may block in
/// a D-Bus round trip (Avahi's client API is synchronous); it is not one of Swift's cooperative
/// threads, so no task ever waits on a lock for it.
///
/// Why not `AvahiThreadedPoll`: calling into Avahi from another thread needs its poll lock,
/// which the poll thread holds during those synchronous D-Bus calls — a task would block on it.
final class AvahiLoop: @unchecked Sendable {
    // Invariant: `poll`, `timers` and `wakeWatch` are touched only on the loop thread (and in
    // init, before the thread starts). `jobs` is the only state other threads touch (through
    // its lock); they wake the thread by writing to the pipe, which write(2) makes safe.
    private let poll: OpaquePointer
    private let api: UnsafePointer<AvahiPoll>
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private var wakeWatch: OpaquePointer?
    private var timers: [ObjectIdentifier: AvahiTimer] = [:]
    private let jobs = LockedValue<(queue: [@Sendable () -> Void], accepting: Bool)>(([], true))

    /// Starts the thread. Throws ``PeerSyncError/Code/io`` if the pipe or the thread cannot
    /// be made.
    init() throws(PeerSyncError) {
        guard let poll = avahi_simple_poll_new() else {
            throw PeerSyncError(.internalError, "avahi_simple_poll_new failed (out of memory?)")
        }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            let code = errno
            avahi_simple_poll_free(poll)
            throw PeerSyncError(.io, "pipe failed for the Avahi loop: \(String(cString: strerror(code)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        self.poll = poll
        self.api = avahi_simple_poll_get(poll)
        self.wakeRead = fds[0]
        self.wakeWrite = fds[1]
        wakeWatch = api.pointee.watch_new(api, wakeRead, AVAHI_WATCH_IN, avahiLoopWakeCallback,
                                          Unmanaged.passUnretained(self).toOpaque())
        var thread = pthread_t()
        let retained = Unmanaged.passRetained(self).toOpaque()
        let created = pthread_create(&thread, nil, { context in
            Unmanaged<AvahiLoop>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, retained)
        guard created == 0 else {
            Unmanaged<AvahiLoop>.fromOpaque(retained).release()
            if let wakeWatch { api.pointee.watch_free(wakeWatch) }
            avahi_simple_poll_free(poll)
            close(fds[0])
            close(fds[1])
            throw PeerSyncError(.io, "could not start the Avahi loop thread (pthread_create: \(created))")
        }
        pthread_detach(thread)
    }

    /// The poll API to hand to `avahi_client_new`. Loop thread only.
    var pollAPI: UnsafePointer<AvahiPoll> { api }

    /// Runs `job` on the loop thread, after the jobs queued before it. Returns false (and
    /// drops the job) once the loop is stopping.
    @discardableResult
    func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool {
        let accepted = jobs.withLock { jobs -> Bool in
            guard jobs.accepting else { return false }
            jobs.queue.append(job)
            return true
        }
        if accepted { wake() }
        return accepted
    }

    /// Runs `body` on the loop thread and returns its result. Throws its error, or
    /// ``PeerSyncError/Code/closed`` if the loop is stopping.
    func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = enqueue {
                do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
            }
            if !accepted { continuation.resume(throwing: PeerSyncError(.closed, "the DNS-SD discovery was shut down")) }
        }
    }

    /// Runs `last` on the loop thread after every job queued so far, then ends the thread
    /// (freeing the poll); later jobs are refused. Returns false if already stopping.
    @discardableResult
    func stop(after last: @escaping @Sendable () -> Void) -> Bool {
        let accepted = jobs.withLock { jobs -> Bool in
            guard jobs.accepting else { return false }
            jobs.queue.append { [self] in
                last()
                avahi_simple_poll_quit(poll)
            }
            jobs.accepting = false
            return true
        }
        if accepted { wake() }
        return accepted
    }

    /// Runs `action` on the loop thread after `delay`, unless cancelled first. Loop thread only.
    @discardableResult
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> AvahiTimer {
        let timer = AvahiTimer(loop: self, action: action)
        let milliseconds = max(0, delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)
        var when = timeval()
        avahi_elapse_time(&when, UInt32(clamping: milliseconds), 0)
        timer.handle = api.pointee.timeout_new(api, &when, avahiLoopTimerCallback, Unmanaged.passUnretained(timer).toOpaque())
        timers[ObjectIdentifier(timer)] = timer
        return timer
    }

    /// Cancels `timer` (nothing if it fired or was cancelled). Loop thread only.
    func cancel(_ timer: AvahiTimer) {
        if let handle = timer.handle { api.pointee.timeout_free(handle) }
        timer.handle = nil
        timers[ObjectIdentifier(timer)] = nil
    }

    // MARK: The loop thread

    private func wake() {
        var byte: UInt8 = 1
        // EAGAIN: the pipe is full, so a wake-up is pending anyway.
        _ = write(wakeWrite, &byte, 1)
    }

    /// The wake-up pipe is readable: empty it first (so a job queued from now on wakes the
    /// thread again), then run the jobs queued so far.
    fileprivate func runJobs() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &buffer, buffer.count) > 0 {}
        let batch = jobs.withLock { jobs -> [@Sendable () -> Void] in
            let batch = jobs.queue
            jobs.queue.removeAll()
            return batch
        }
        for job in batch { job() }
    }

    private func run() {
        while avahi_simple_poll_iterate(poll, -1) == 0 {}
        // Stopped (or the poll failed): refuse new jobs, run what is queued — a job may be
        // waiting to resume a task — then free everything.
        let remaining = jobs.withLock { jobs -> [@Sendable () -> Void] in
            jobs.accepting = false
            let remaining = jobs.queue
            jobs.queue.removeAll()
            return remaining
        }
        for job in remaining { job() }
        for timer in Array(timers.values) { cancel(timer) }
        if let wakeWatch { api.pointee.watch_free(wakeWatch) }
        wakeWatch = nil
        avahi_simple_poll_free(poll)
        close(wakeRead)
        close(wakeWrite)
    }
}

/// A timeout on an ``AvahiLoop``. Loop thread only.
final class AvahiTimer {
    unowned let loop: AvahiLoop
    let action: () -> Void
    var handle: OpaquePointer?

    init(loop: AvahiLoop, action: @escaping () -> Void) {
        self.loop = loop
        self.action = action
    }

    fileprivate func fire() {
        loop.cancel(self)
        action()
    }
}

// C callbacks: file-scope functions (never closures that could capture), the object passed
// unretained as userdata — the loop and its timers outlive their Avahi watch and timeouts.

private func avahiLoopWakeCallback(_ watch: OpaquePointer?, _ fd: Int32, _ event: AvahiWatchEvent,
                                   _ userdata: UnsafeMutableRawPointer?) {
    guard let userdata else { return }
    Unmanaged<AvahiLoop>.fromOpaque(userdata).takeUnretainedValue().runJobs()
}

private func avahiLoopTimerCallback(_ timeout: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?) {
    guard let userdata else { return }
    Unmanaged<AvahiTimer>.fromOpaque(userdata).takeUnretainedValue().fire()
}
