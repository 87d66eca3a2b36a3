#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import PeerSyncCore
@testable import PeerSyncPosix
import Testing

/// The reactor with descriptors that are not TCP: a pipe through the raw callback API, and an
/// `AF_UNIX` `SOCK_SEQPACKET` socket pair — the kernel's stand-in for a Bluetooth L2CAP
/// channel, which keeps message boundaries — through ``AsyncDescriptor``.
@Suite("Reactor with any descriptor", .timeLimit(.minutes(1)))
struct ReactorTests {
    /// A non-blocking, close-on-exec pipe: (read end, write end).
    static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("pipe") { pipe(&fds) }
        for fd in fds {
            let flags = try syscall("fcntl") { fcntl(fd, F_GETFL) }
            try syscall("fcntl") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
            try syscall("fcntl") { fcntl(fd, F_SETFD, FD_CLOEXEC) }
        }
        return (fds[0], fds[1])
    }

    /// Runs `body` with a connected pair of non-blocking `AF_UNIX` `SOCK_SEQPACKET` sockets,
    /// each owned by an ``AsyncDescriptor``, and closes both afterwards (closing is idempotent:
    /// `body` may close them first).
    static func withSeqPacketPair(_ body: (AsyncDescriptor, AsyncDescriptor) async throws -> Void) async throws {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        try syscall("socketpair") { socketpair(AF_UNIX, type, 0, &fds) }
        let a = try AsyncDescriptor(fd: fds[0])
        let b = try AsyncDescriptor(fd: fds[1])
        defer {
            a.close()
            b.close()
        }
        try await body(a, b)
    }

    /// Sends one packet, waiting for room if needed.
    static func sendPacket(_ descriptor: AsyncDescriptor, _ packet: [UInt8]) async throws {
        let sent = try await descriptor.perform(.write, "send") { fd in
            packet.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        #expect(sent == packet.count)
    }

    /// Receives one packet (empty at end of stream), waiting until one arrives.
    static func receivePacket(_ descriptor: AsyncDescriptor, maxBytes: Int = 65536) async throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        let count = try await descriptor.perform(.read, "recv") { fd in
            buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        }
        return Array(buffer[..<count])
    }

    @Test("a pipe registered with a callback hears it become readable when written to")
    func pipeReadinessCallback() async throws {
        let pipe = try Self.makePipe()
        defer {
            closeDescriptor(pipe.read)
            closeDescriptor(pipe.write)
        }
        let (readiness, continuation) = AsyncStream.makeStream(of: Readiness.self)
        let reactor = try Reactor.get()
        let registration = try reactor.register(fd: pipe.read) { continuation.yield($0) }
        defer { reactor.unregister(registration) }
        #expect(registration.fd == pipe.read)

        try syscall("write") { [UInt8]([42]).withUnsafeBytes { write(pipe.write, $0.baseAddress, 1) } }
        var sawReadable = false
        for await event in readiness where event.contains(.readable) {
            sawReadable = true
            break
        }
        #expect(sawReadable)
        var byte: UInt8 = 0
        #expect(try syscall("read") { read(pipe.read, &byte, 1) } == 1)
        #expect(byte == 42)
    }

    @Test("a descriptor epoll cannot poll (a regular file) is refused with the epoll_ctl error")
    func regularFileIsRefused() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("posix-reactor-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        let fd = try syscall("open") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        defer { unlink(path) }
        do {
            _ = try AsyncDescriptor(fd: fd)  // takes ownership: closes fd when it throws
            Issue.record("epoll accepted a regular file")
        } catch {
            #expect(error.context["syscall"] == "epoll_ctl")
            #expect(error.context["errno"] == String(EPERM))
        }
    }

    @Test("SOCK_SEQPACKET pair: a receive waits for the peer, and every packet arrives whole and alone")
    func seqPacketBoundaries() async throws {
        try await Self.withSeqPacketPair { a, b in
            // Started before anything is sent: it has to suspend on the reactor and be woken.
            let first = Task { try await Self.receivePacket(b) }
            let packets: [[UInt8]] = [[1, 2, 3], [4], [UInt8](repeating: 5, count: 1000), Array(0..<200)]
            for packet in packets { try await Self.sendPacket(a, packet) }
            #expect(try await first.value == packets[0])
            for packet in packets.dropFirst() {
                #expect(try await Self.receivePacket(b) == packet)
            }
            // And the other way.
            try await Self.sendPacket(b, [9, 9])
            #expect(try await Self.receivePacket(a) == [9, 9])
        }
    }

    @Test("SOCK_SEQPACKET pair: the peer's close is end of stream; our close ends a pending wait with .closed")
    func seqPacketClose() async throws {
        try await Self.withSeqPacketPair { a, b async throws in
            a.close()
            #expect(try await Self.receivePacket(b) == [])  // end of stream
        }
        try await Self.withSeqPacketPair { a, _ in
            let waiting = Task { try await Self.receivePacket(a) }
            // The receive may or may not have suspended yet: either way it ends with `.closed`.
            a.close()
            #expect(a.isClosed)
            await #expect { _ = try await waiting.value } throws: { ($0 as? PeerSyncError)?.code == .closed }
        }
    }

    @Test("a cancelled wait throws .cancelled and leaves the descriptor usable")
    func cancelledWait() async throws {
        try await Self.withSeqPacketPair { a, b in
            let waiting = Task { try await Self.receivePacket(b) }
            waiting.cancel()
            await #expect { _ = try await waiting.value } throws: { ($0 as? PeerSyncError)?.code == .cancelled }
            try await Self.sendPacket(a, [7])
            #expect(try await Self.receivePacket(b) == [7])
        }
    }
}
