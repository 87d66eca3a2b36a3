#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
@testable import PeerSyncPosix
import PeerSyncTransport
import Testing

/// The one syscall helper: what it retries, what it hands back, and which error each errno
/// becomes. The calls are stand-ins that set `errno` as a failing system call does.
@Suite("syscall helper")
struct SyscallTests {
    /// A stand-in system call failing with `failures` in turn (-1 and `errno`), then
    /// returning `result`.
    final class ScriptedCall {
        private var failures: [Int32]
        private let result: Int32
        private(set) var calls = 0

        init(failing failures: [Int32], then result: Int32 = 7) {
            self.failures = failures
            self.result = result
        }

        func callAsFunction() -> Int32 {
            calls += 1
            guard !failures.isEmpty else { return result }
            errno = failures.removeFirst()
            return -1
        }
    }

    @Test("EINTR is retried until the call completes")
    func retriesInterruptedCalls() throws {
        let call = ScriptedCall(failing: [EINTR, EINTR, EINTR])
        #expect(try syscall("stand-in") { call() } == 7)
        #expect(call.calls == 4)
    }

    @Test("a handled errno is returned, after retrying EINTR; success is returned as such")
    func handledErrnosAreReturned() throws {
        let blocked = ScriptedCall(failing: [EINTR, EAGAIN])
        #expect(try syscall("stand-in", handling: wouldBlockErrnos) { blocked() } == .failed(errno: EAGAIN))
        #expect(blocked.calls == 2)
        let inProgress = ScriptedCall(failing: [EINPROGRESS])
        #expect(try syscall("connect", handling: [EINPROGRESS, EALREADY]) { inProgress() } == .failed(errno: EINPROGRESS))
        let succeeding = ScriptedCall(failing: [])
        #expect(try syscall("stand-in", handling: wouldBlockErrnos) { succeeding() } == .succeeded(7))
    }

    @Test("an errno that is not handled is thrown, EAGAIN too", arguments: [
        (ECONNREFUSED, PeerSyncError.Code.connectionRefused),
        (ECONNRESET, .connectionReset), (EPIPE, .connectionReset), (ECONNABORTED, .connectionReset),
        (ENOTCONN, .connectionReset),
        (EADDRINUSE, .addressInUse), (EADDRNOTAVAIL, .addressInUse),
        (ENETUNREACH, .networkUnreachable), (EHOSTUNREACH, .networkUnreachable),
        (ENETDOWN, .networkUnreachable), (EHOSTDOWN, .networkUnreachable),
        (ETIMEDOUT, .timeout),
        (EINVAL, .invalidArgument), (EAFNOSUPPORT, .invalidArgument), (EPROTONOSUPPORT, .invalidArgument),
        (EAGAIN, .io), (EMFILE, .io), (EPERM, .io), (ENOMEM, .io),
    ])
    func errnoMapping(code: Int32, expected: PeerSyncError.Code) {
        let call = ScriptedCall(failing: [EINTR, code])
        do {
            try syscall("bind") { call() }
            Issue.record("errno \(code) was not thrown")
        } catch {
            #expect(error.code == expected)
            #expect(error.context["syscall"] == "bind")
            #expect(error.context["errno"] == String(code))
            #expect(error.message.hasPrefix("bind: "))
        }
        #expect(call.calls == 2)
    }

    @Test("a real failing call: bind on a socket that is already bound is EINVAL")
    func realFailingCall() throws {
        let fd = try syscall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        defer { closeDescriptor(fd) }
        let address = try #require(SocketAddress(numericHost: "127.0.0.1", port: 0))
        try syscall("bind") { address.withSockaddr { bind(fd, $0, $1) } }
        #expect(throws: PeerSyncError(.invalidArgument, "bind: Invalid argument", context: ["syscall": "bind", "errno": String(EINVAL)])) {
            try syscall("bind") { address.withSockaddr { bind(fd, $0, $1) } }
        }
    }
}
