#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore

/// A connected `SOCK_SEQPACKET` socket on the `Reactor`: reliable, ordered, and every
/// ``send(_:)`` arrives as exactly one ``receive(maxBytes:)`` (message boundaries kept). A
/// Bluetooth L2CAP channel is one (the BLE transport opens it); ``pair()`` makes two connected
/// `AF_UNIX` ones, with the kernel's real seqpacket semantics, for tests and simulations.
///
/// Threading: any method from any task; at most one task sending and one receiving at a
/// time (a second concurrent waiter in one direction fails with `.internalError`).
/// Errors: `PeerSyncError` from `systemError(_:errno:)` (`.connectionReset` when the peer
/// is gone), `.closed` once ``close()`` has run, `.invalidArgument` for a packet larger than
/// the socket can carry in one message (`EMSGSIZE`).
public final class SeqPacketSocket: Sendable {
    package let socket: AsyncDescriptor

    /// Takes ownership of `fd`: a connected `SOCK_SEQPACKET` socket, made non-blocking here.
    package init(adopting fd: Int32) throws(PeerSyncError) {
        let flags = fcntl(fd, F_GETFL)
        if flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 {
            let code = errno
            closeDescriptor(fd)
            throw systemError("fcntl", errno: code)
        }
        socket = try AsyncDescriptor(fd: fd)
    }

    /// Two connected `AF_UNIX` `SOCK_SEQPACKET` sockets.
    public static func pair() throws(PeerSyncError) -> (SeqPacketSocket, SeqPacketSocket) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") {
            socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
        }
        let first: SeqPacketSocket
        do { first = try SeqPacketSocket(adopting: fds[0]) } catch {
            closeDescriptor(fds[1])
            throw error
        }
        return (first, try SeqPacketSocket(adopting: fds[1]))
    }

    /// Sends `packet` as one message, waiting while the socket's buffer is full
    /// (back-pressure). An empty packet is refused (`.invalidArgument`): the receiver could not
    /// tell it from the end of the stream.
    public func send(_ packet: [UInt8]) async throws {
        guard !packet.isEmpty else { throw PeerSyncError(.invalidArgument, "a seqpacket message cannot be empty") }
        let sent = try await socket.perform(.write, "send") { fd in
            packet.withUnsafeBytes { raw in Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL)) }
        }
        guard sent == packet.count else {
            throw PeerSyncError(.io, "a seqpacket send was cut short", context: ["sent": "\(sent)", "size": "\(packet.count)"])
        }
    }

    /// The next message, at most `maxBytes` long (the rest of a longer one is discarded, as
    /// `recv` does), or nil once the peer has closed or shut down its side.
    public func receive(maxBytes: Int) async throws -> [UInt8]? {
        guard maxBytes > 0 else { throw PeerSyncError(.invalidArgument, "receive(maxBytes:) needs maxBytes > 0") }
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        let count = try await socket.perform(.read, "recv") { fd in
            buffer.withUnsafeMutableBytes { raw in recv(fd, raw.baseAddress, raw.count, 0) }
        }
        // A zero-length message and the end of the stream both read as 0 bytes; PeerSync never
        // sends empty messages on a seqpacket socket (``send(_:)`` refuses them), so 0 is the end.
        if count == 0 { return nil }
        buffer.removeSubrange(count...)
        return buffer
    }

    /// Shuts down the sending side: the peer's ``receive(maxBytes:)`` returns nil.
    public func shutdownOutput() {
        _ = try? socket.withDescriptor { fd throws(PeerSyncError) in
            try syscall("shutdown") { Glibc.shutdown(fd, Int32(SHUT_WR)) }
        }
    }

    /// Closes the socket; pending sends and receives end with `.closed`. Idempotent.
    public func close() {
        socket.close()
    }
}
