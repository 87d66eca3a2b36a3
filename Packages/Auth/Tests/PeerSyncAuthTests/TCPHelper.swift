import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A minimal blocking TCP stream for interop tests only: each blocking call runs on this
/// stream's own dispatch queues (never on the cooperative pool) and is bridged with a
/// continuation. The real non-blocking reactor belongs to the WebSocket package.
///
/// `fd` is immutable; concurrent use is one reader (readQueue) and one writer (writeQueue),
/// which the kernel allows; `closed` is protected by `lock`.
final class BlockingTCPStream: ByteStream, @unchecked Sendable {
    private let fd: Int32
    private let readQueue = DispatchQueue(label: "test.tcp.read")
    private let writeQueue = DispatchQueue(label: "test.tcp.write")
    private let lock = NSLock()
    private var closed = false
    let remoteAddress: String?

    init(fd: Int32, remote: String) {
        self.fd = fd
        self.remoteAddress = remote
    }

    deinit { Glibc.close(fd) }

    static func connect(port: UInt16) async throws -> BlockingTCPStream {
        // Only the descriptor crosses threads; the object is built on the calling task.
        let fd: Int32 = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: "test.tcp.connect").async {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                guard fd >= 0 else { return continuation.resume(throwing: PeerSyncError(.io, "socket failed")) }
                var address = loopback(port: port)
                let rc = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                if rc != 0 {
                    Glibc.close(fd)
                    return continuation.resume(throwing: PeerSyncError(.io, "connect failed: errno \(errno)"))
                }
                continuation.resume(returning: fd)
            }
        }
        return BlockingTCPStream(fd: fd, remote: "127.0.0.1:\(port)")
    }

    private var isClosed: Bool { lock.withLock { closed } }

    func read(maxBytes: Int) async throws -> [UInt8]? {
        try await withCheckedThrowingContinuation { continuation in
            readQueue.async { [self] in
                var buffer = [UInt8](repeating: 0, count: max(1, min(maxBytes, 65536)))
                while true {
                    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if isClosed { return continuation.resume(throwing: PeerSyncError(.closed, "tcp stream closed")) }
                    if n > 0 { return continuation.resume(returning: Array(buffer[0..<n])) }
                    if n == 0 { return continuation.resume(returning: nil) }
                    if errno == EINTR { continue }
                    return continuation.resume(throwing: PeerSyncError(.io, "recv failed: errno \(errno)"))
                }
            }
        }
    }

    func write(_ bytes: [UInt8]) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writeQueue.async { [self] in
                var offset = 0
                while offset < bytes.count {
                    if isClosed { return continuation.resume(throwing: PeerSyncError(.closed, "tcp stream closed")) }
                    let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if n < 0 {
                        if errno == EINTR { continue }
                        return continuation.resume(throwing: PeerSyncError(.io, "send failed: errno \(errno)"))
                    }
                    offset += n
                }
                continuation.resume()
            }
        }
    }

    func shutdownOutput() async { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    func close() async {
        lock.withLock { closed = true }
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }
}

/// A blocking TCP listener on 127.0.0.1 with a kernel-chosen port (tests only).
final class BlockingTCPListener: @unchecked Sendable {
    private let fd: Int32   // immutable; closed in deinit
    let port: UInt16

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw PeerSyncError(.io, "socket failed") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            Glibc.close(fd)
            throw PeerSyncError(.io, "bind/listen failed: errno \(errno)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        port = UInt16(bigEndian: actual.sin_port)
    }

    deinit { Glibc.close(fd) }

    func accept() async throws -> BlockingTCPStream {
        let listening = fd
        let client: Int32 = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue(label: "test.tcp.accept").async {
                let client = Glibc.accept(listening, nil, nil)
                if client < 0 { return continuation.resume(throwing: PeerSyncError(.io, "accept failed: errno \(errno)")) }
                continuation.resume(returning: client)
            }
        }
        return BlockingTCPStream(fd: client, remote: "127.0.0.1")
    }

    /// Wakes a pending accept (it fails).
    func shutdown() { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
}

private func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

extension ChildProcess {
    /// Runs `openssl <arguments>` (found through PATH) in `directory`, standard input piped.
    convenience init(openssl arguments: [String], directory: String) throws {
        try self.init(program: "openssl", arguments, directory: directory, standardInput: true)
    }

    /// Waits until the output contains `needle`; returns the text (nil: it did not, within
    /// `timeout` seconds, or the process ended first).
    func waitForOutput(containing needle: String, timeout: Double = 20) async -> String? {
        await wait(timeout: .seconds(timeout), untilTextContains: needle) ? text : nil
    }
}

/// Runs a short `openssl` command to completion; returns (status, stdout+stderr).
func runOpenSSL(_ arguments: [String], directory: String) async throws -> (Int32, String) {
    let child = try ChildProcess(openssl: arguments, directory: directory)
    guard let status = await child.waitForExit(timeout: .seconds(30)) else {
        await child.stop()
        throw PeerSyncError(.timeout, "\(arguments.first ?? "command") did not finish")
    }
    let text = child.text
    await child.stop()
    return (status, text)
}
