#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import PeerSyncTransport

// Every system call of PeerSyncPosix goes through `syscall` (the shape of swift-nio's
// `NIOPosix/System.swift`): it retries `EINTR`, hands the errnos a caller asked for back to it
// (typically `EAGAIN` of a non-blocking descriptor), traps on the errnos that can only mean a
// bug in this module, and turns every other errno into a `PeerSyncError` — in one place,
// `systemError(_:errno:)`. Not through it: `close` (`closeDescriptor`, never retried) and the
// library calls that report failure another way (`getaddrinfo`, `inet_pton`/`inet_ntop`,
// `if_nametoindex`, `malloc_trim`).

// `.connectionRefused`, `.connectionReset`, `.addressInUse` and `.hostNotFound` are the
// transport layer's codes (PeerSyncTransport).

/// The one place where an `errno` becomes a ``PeerSyncError``.
///
/// `.connectionRefused`, `.connectionReset` (also `EPIPE`, `ECONNABORTED`, `ENOTCONN`),
/// `.addressInUse` (also `EADDRNOTAVAIL`), `.networkUnreachable`, `.timeout`,
/// `.invalidArgument` (`EINVAL`, `EAFNOSUPPORT`, `EPROTONOSUPPORT`), else `.io`. The context
/// holds `syscall` (the operation's name) and `errno` (the number).
package func systemError(_ operation: String, errno code: Int32) -> PeerSyncError {
    let text = String(cString: strerror(code))
    let context = ["syscall": operation, "errno": String(code)]
    switch code {
    case ECONNREFUSED:
        return PeerSyncError(.connectionRefused, "\(operation): \(text)", context: context)
    case ECONNRESET, EPIPE, ECONNABORTED, ENOTCONN:
        return PeerSyncError(.connectionReset, "\(operation): \(text)", context: context)
    case EADDRINUSE, EADDRNOTAVAIL:
        return PeerSyncError(.addressInUse, "\(operation): \(text)", context: context)
    case ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN:
        return PeerSyncError(.networkUnreachable, "\(operation): \(text)", context: context)
    case ETIMEDOUT:
        return PeerSyncError(.timeout, "\(operation): \(text)", context: context)
    case EINVAL, EAFNOSUPPORT, EPROTONOSUPPORT:
        return PeerSyncError(.invalidArgument, "\(operation): \(text)", context: context)
    default:
        return PeerSyncError(.io, "\(operation): \(text)", context: context)
    }
}

/// What a system call did when its caller handles some errnos itself
/// (``syscall(_:handling:_:)``).
package enum SyscallResult<Value: FixedWidthInteger & Sendable>: Sendable, Equatable {
    /// The call succeeded with this result.
    case succeeded(Value)
    /// The call failed with one of the errnos the caller handles.
    case failed(errno: Int32)
}

/// The errnos of a non-blocking descriptor that has nothing to give or no room now.
package let wouldBlockErrnos: [Int32] = [EAGAIN, EWOULDBLOCK]  // the same number on Linux

/// Makes one system call: `call` returns -1 and sets `errno` on failure (the C convention).
///
/// - `EINTR` (a signal arrived): `call` runs again.
/// - An errno in `handled`: returned as `.failed(errno:)` for the caller to act on (e.g.
///   ``wouldBlockErrnos`` for non-blocking I/O, `EINPROGRESS` for `connect`).
/// - `EBADF`, `EFAULT`: traps. A descriptor this module owns is never used after its close
///   (``AsyncDescriptor/withDescriptor(_:)``) and buffers are Swift's, so these can only mean
///   a bug here, which must not be turned into an error that is retried or ignored.
/// - Any other errno: throws ``systemError(_:errno:)``.
///
/// Runs on the calling thread; `call` must not block for long (descriptors here are
/// non-blocking), so this is safe on the cooperative pool.
@inline(__always)
package func syscall<Value: FixedWidthInteger & Sendable>(
    _ operation: @autoclosure () -> String, handling handled: [Int32], _ call: () -> Value
) throws(PeerSyncError) -> SyscallResult<Value> {
    while true {
        let result = call()
        if result != -1 { return .succeeded(result) }
        let code = errno
        if code == EINTR { continue }
        if handled.contains(code) { return .failed(errno: code) }
        if code == EBADF || code == EFAULT {
            preconditionFailure("\(operation()) failed with errno \(code) (\(String(cString: strerror(code)))): a bug in PeerSyncPosix")
        }
        throw systemError(operation(), errno: code)
    }
}

/// Makes one system call whose every failure is an error: as ``syscall(_:handling:_:)`` with
/// no handled errno (`EINTR` retried, `EBADF`/`EFAULT` trap, the rest thrown). Returns the
/// call's result.
@inline(__always) @discardableResult
package func syscall<Value: FixedWidthInteger & Sendable>(
    _ operation: @autoclosure () -> String, _ call: () -> Value
) throws(PeerSyncError) -> Value {
    switch try syscall(operation(), handling: [], call) {
    case .succeeded(let value): return value
    case .failed(let code): throw systemError(operation(), errno: code)  // unreachable: nothing handled
    }
}

/// Closes a descriptor this module owns. Never retried: on Linux `close` releases the
/// descriptor even when it reports `EINTR`, and a retry could close a descriptor another
/// thread has just been given. Errors are ignored (the descriptor is gone either way).
package func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// Sets an integer socket option, as a syscall (errors thrown).
package func setSocketOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) throws(PeerSyncError) {
    var value = value
    try syscall("setsockopt") { setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size)) }
}

let closedStreamError = PeerSyncError(.closed, "the socket is closed")
