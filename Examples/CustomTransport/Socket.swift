// The system calls of the Unix-domain socket transport, in one place: each blocking call runs
// on a thread of its own (see `onThread` / `waitFor`), never on Swift's cooperative pool, and
// every failing call becomes a `PeerSyncError` here.

import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncTransport
import Synchronization

import Glibc  // Linux: the socket calls below are Glibc's

/// One socket file descriptor, closed when the last reference goes (the connection and its
/// two threads hold it, so it is never closed under a thread still using it).
final class SocketDescriptor: Sendable {
    let fd: Int32

    init(_ fd: Int32) { self.fd = fd }

    deinit { _ = close(fd) }

    /// Ends both directions at once: a thread blocked in `recv`, `send` or `accept` on it
    /// returns. Idempotent.
    func shutdownBoth() { _ = shutdown(fd, Int32(SHUT_RDWR)) }

    /// Sends all of `bytes` (blocking). Throws `.connectionReset` when the peer is gone.
    func sendAll(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if sent < 0 {
                if errno == EINTR { continue }
                throw systemError(.connectionReset, "send")
            }
            offset += sent
        }
    }

    /// Fills `buffer` completely (blocking). Returns false at end of stream (the peer shut its
    /// side down, or this side did); throws `.connectionReset` on an error.
    func receiveAll(into buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        var offset = 0
        while offset < buffer.count {
            let received = recv(fd, buffer.baseAddress! + offset, buffer.count - offset, 0)
            if received < 0 {
                if errno == EINTR { continue }
                throw systemError(.connectionReset, "recv")
            }
            if received == 0 { return false }
            offset += received
        }
        return true
    }

    /// A new Unix-domain stream socket.
    static func make() throws -> SocketDescriptor {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw systemError(.io, "socket") }
        return SocketDescriptor(fd)
    }

    /// Connects to the socket file at `path` (blocking; a Unix socket connects at once or fails).
    static func connect(to path: String) throws -> SocketDescriptor {
        let socket = try make()
        let status = try withAddress(path) { address, length in
            Glibc.connect(socket.fd, address, length)
        }
        guard status == 0 else {
            let code: PeerSyncError.Code = (errno == ENOENT || errno == ECONNREFUSED || errno == EAGAIN) ? .connectionRefused : .io
            throw systemError(code, "connect to \(path)")
        }
        return socket
    }

    /// A socket bound to `path` and listening. Throws `.addressInUse` if the file exists.
    static func listen(at path: String, backlog: Int32 = 64) throws -> SocketDescriptor {
        let socket = try make()
        let status = try withAddress(path) { address, length in bind(socket.fd, address, length) }
        guard status == 0 else {
            throw systemError(errno == EADDRINUSE ? .addressInUse : .io, "bind \(path)")
        }
        guard Glibc.listen(socket.fd, backlog) == 0 else {
            let error = systemError(.io, "listen on \(path)")
            unlink(path)
            throw error
        }
        return socket
    }

    /// The next incoming connection (blocking), or nil once the socket was shut down.
    func accept() -> SocketDescriptor? {
        while true {
            let client = Glibc.accept(fd, nil, nil)
            if client >= 0 { return SocketDescriptor(client) }
            if errno == EINTR || errno == ECONNABORTED { continue }
            return nil
        }
    }

    private static func withAddress<R>(_ path: String,
                                       _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) throws -> R {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else {
            throw PeerSyncError(.invalidArgument, "socket path longer than \(capacity - 1) bytes", context: ["path": path])
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }
}

/// A `PeerSyncError` with `code` naming the failed call and the current `errno`.
func systemError(_ code: PeerSyncError.Code, _ call: String) -> PeerSyncError {
    let number = errno
    return PeerSyncError(code, "\(call) failed: \(String(cString: strerror(number)))", context: ["errno": "\(number)"])
}

/// Runs the blocking `body` on a new thread and returns its result to the awaiting task.
func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
        }
        thread.name = name
        thread.start()
    }
}

/// Called from a thread the transport owns (never from a task): blocks that thread until the
/// async `operation` finishes, and returns its result.
func waitFor<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
    let done = DispatchSemaphore(value: 0)
    let outcome = Mutex<Result<T, any Error>?>(nil)
    Task {
        let result: Result<T, any Error>
        do { result = .success(try await operation()) } catch { result = .failure(error) }
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return try outcome.withLock { $0! }.get()
}
