#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import PeerSyncTransport

extension PeerSyncError.Code {
    /// The network or host cannot be reached (`ENETUNREACH`, `EHOSTUNREACH`).
    public static let networkUnreachable = Self(rawValue: "networkUnreachable")
}

// `.connectionRefused`, `.connectionReset`, `.addressInUse` and `.hostNotFound` are the
// transport layer's codes (PeerSyncTransport).

/// The one place where an `errno` becomes a ``PeerSyncError``.
func systemError(_ operation: String, errno code: Int32) -> PeerSyncError {
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

/// Checks a syscall result: `-1` becomes the ``PeerSyncError`` of the current `errno`.
@discardableResult
func checkSyscall<T: BinaryInteger>(_ result: T, _ operation: String) throws(PeerSyncError) -> T {
    if result == -1 { throw systemError(operation, errno: errno) }
    return result
}

let closedStreamError = PeerSyncError(.closed, "the socket is closed")
