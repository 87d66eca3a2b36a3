#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import PeerSyncTransport

/// A connected TCP socket as a ``ByteStream``: non-blocking, driven by the process's epoll
/// reactor (one thread for all sockets), with `TCP_NODELAY` set.
///
/// Threading: every method may be called from any task. At most one `read` and one `write`
/// may be outstanding at a time (the ``ByteStream`` contract); they may run concurrently.
/// Errors are ``PeerSyncError``s: `.closed` after ``close()``, `.connectionReset` when the
/// peer broke the connection, `.cancelled` when the waiting task is cancelled.
public final class TCPStream: ByteStream {
    let socket: Socket
    /// The peer's address, e.g. `127.0.0.1:4984` or `[::1]:4984`.
    public let remoteAddress: String?
    /// The local address of the connection.
    public let localAddress: String?

    init(socket: Socket) {
        self.socket = socket
        remoteAddress = SocketAddress.of(fd: socket.fd, peer: true)?.description
        localAddress = SocketAddress.of(fd: socket.fd, peer: false)?.description
    }

    /// Connects to `host` (a name, an IPv4 or an IPv6 address) and `port`, trying each
    /// resolved address in turn. Throws `.connectionRefused`, `.hostNotFound`,
    /// `.networkUnreachable`, or `.timeout` when `timeout` passes first.
    ///
    /// With `interface`, the socket is bound to a local address before connecting: a
    /// network interface name (e.g. `lo`, `eth0`; its address of the destination's family)
    /// or a numeric IPv4/IPv6 address. An unknown interface (or one without an address)
    /// throws `.invalidArgument` before any connection is tried; destinations of a family
    /// the interface has no address for are skipped.
    public static func connect(host: String, port: Int, timeout: Duration = .seconds(30),
                               interface: String? = nil) async throws -> TCPStream {
        if let interface { try validateLocalInterface(interface) }
        let addresses = try await SocketAddress.resolve(host: host, port: port)
        var lastError: any Error = PeerSyncError(.hostNotFound, "no address to connect to", context: ["host": host])
        for address in addresses {
            do {
                var local: SocketAddress?
                if let interface {
                    guard let bound = localAddress(interface, family: address.family) else {
                        lastError = PeerSyncError(.networkUnreachable, "the network interface has no address of the destination's family",
                                                  context: ["interface": interface, "address": address.description])
                        continue
                    }
                    local = bound
                }
                return try await connect(to: address, timeout: timeout, from: local)
            } catch let error as PeerSyncError where error.code == .cancelled {
                throw error
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    /// Throws `.invalidArgument` unless `interface` is a numeric address or the name of an
    /// interface with an address.
    static func validateLocalInterface(_ interface: String) throws(PeerSyncError) {
        if SocketAddress(numericHost: interface, port: 0) != nil { return }
        do { _ = try SocketAddress.ofInterface(interface, port: 0) } catch {
            throw PeerSyncError(.invalidArgument, "unknown network interface '\(interface)' (no such interface, or it has no address)",
                                context: ["interface": interface])
        }
    }

    /// The local address (port 0) to bind to for `interface` and a destination of `family`.
    static func localAddress(_ interface: String, family: Int32) -> SocketAddress? {
        if let numeric = SocketAddress(numericHost: interface, port: 0) {
            return numeric.family == family ? numeric : nil
        }
        return try? SocketAddress.ofInterface(interface, port: 0, family: family)
    }

    static func connect(to address: SocketAddress, timeout: Duration, from local: SocketAddress? = nil) async throws -> TCPStream {
        let fd = try checkSyscall(Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0), "socket")
        let socket = try Socket(fd: fd)
        setNoDelay(fd)
        if let local {
            let bound = try socket.withDescriptor { fd -> Int32 in
                local.withSockaddr { Glibc.bind(fd, $0, $1) } == -1 ? errno : 0
            }
            if bound != 0 {
                socket.close()
                throw systemError("bind", errno: bound).with("address", local.description)
            }
        }
        let rc = try socket.withDescriptor { fd -> (Int32, Int32) in
            let r = address.withSockaddr { Glibc.connect(fd, $0, $1) }
            return (r, r == -1 ? errno : 0)
        }
        if rc.0 == -1 {
            guard rc.1 == EINPROGRESS || rc.1 == EINTR else {
                socket.close()
                throw systemError("connect", errno: rc.1).with("address", address.description)
            }
            // Wait for writability, or time out by closing the socket (which ends the wait).
            let timer = Task {
                try await Task.sleep(for: timeout)
                socket.close()
            }
            defer { timer.cancel() }
            do {
                try await socket.wait(.write)
            } catch let error as PeerSyncError where error.code == .closed {
                throw PeerSyncError(.timeout, "connect timed out", context: ["address": address.description])
            } catch {
                socket.close()
                throw error
            }
            let soError = try socket.withDescriptor { fd -> Int32 in
                var value: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) == -1 { return errno }
                return value
            }
            if soError != 0 {
                socket.close()
                throw systemError("connect", errno: soError).with("address", address.description)
            }
        }
        return TCPStream(socket: socket)
    }

    public func read(maxBytes: Int) async throws -> [UInt8]? {
        guard maxBytes > 0 else { throw PeerSyncError(.invalidArgument, "read(maxBytes:) needs maxBytes > 0") }
        while true {
            var error: Int32 = 0
            let bytes = try socket.withDescriptor { fd in
                [UInt8](unsafeUninitializedCapacity: maxBytes) { buffer, count in
                    let n = recv(fd, buffer.baseAddress, maxBytes, 0)
                    if n < 0 { error = errno; count = 0 } else if n == 0 { error = -1; count = 0 } else { count = n }
                }
            }
            if !bytes.isEmpty { return bytes }
            switch error {
            case -1: return nil
            case EAGAIN, EWOULDBLOCK: try await socket.wait(.read)
            case EINTR: continue
            default: throw systemError("recv", errno: error)
            }
        }
    }

    /// Reads what the kernel has for this socket into `buffer` without waiting: the number
    /// of bytes, 0 at end of stream, nil when nothing is available now (then call
    /// ``waitUntilReadable()``).
    func readAvailable(into buffer: UnsafeMutableRawBufferPointer) throws(PeerSyncError) -> Int? {
        while true {
            let (n, error) = try socket.withDescriptor { fd -> (Int, Int32) in
                let n = recv(fd, buffer.baseAddress, buffer.count, 0)
                return (n, n < 0 ? errno : 0)
            }
            if n >= 0 { return n }
            switch error {
            case EAGAIN, EWOULDBLOCK: return nil
            case EINTR: continue
            default: throw systemError("recv", errno: error)
            }
        }
    }

    /// Suspends until the socket may have bytes to read (or has ended).
    func waitUntilReadable() async throws {
        try await socket.wait(.read)
    }

    public func write(_ bytes: [UInt8]) async throws {
        try await write(bytes, cancellable: true)
    }

    /// Writes all of `bytes`. When not `cancellable`, task cancellation does not stop it
    /// halfway (only completion or the socket's close ends it).
    func write(_ bytes: [UInt8], cancellable: Bool) async throws {
        var offset = 0
        while offset < bytes.count {
            let (n, error) = try socket.withDescriptor { fd -> (Int, Int32) in
                bytes.withUnsafeBytes { raw in
                    let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                    return (n, n < 0 ? errno : 0)
                }
            }
            if n > 0 {
                offset += n
                // A short write filled the socket buffer: wait for room instead of asking again.
                if offset < bytes.count { try await socket.wait(.write, cancellable: cancellable) }
                continue
            }
            switch error {
            case EAGAIN, EWOULDBLOCK: try await socket.wait(.write, cancellable: cancellable)
            case EINTR: continue
            default: throw systemError("send", errno: error)
            }
        }
    }

    public func shutdownOutput() async {
        _ = try? socket.withDescriptor { Glibc.shutdown($0, Int32(SHUT_WR)) }
    }

    public func close() async {
        socket.close()
    }

    /// Closes without suspending (for use from synchronous code).
    public func closeNow() {
        socket.close()
    }
}

private func setNoDelay(_ fd: Int32) {
    var one: Int32 = 1
    _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
}

/// A listening TCP socket. ``accept()`` suspends (on the reactor, no thread) until a
/// connection arrives. Close it to end a pending `accept` with `.closed`.
public final class TCPListener: Sendable {
    let socket: Socket
    /// The bound host (numeric) and port; with port 0 requested, the port the system picked.
    public let host: String
    public let port: Int

    /// Binds and listens.
    /// - Parameters:
    ///   - host: a numeric IPv4/IPv6 address or a name; nil (with no interface) listens on
    ///     every address, IPv4 and IPv6 (`::` dual-stack).
    ///   - port: 0 picks a free port (read ``port`` afterwards).
    ///   - interface: a network interface name (e.g. `lo`, `eth0`): binds to its first
    ///     address (IPv4 preferred). Overrides `host`.
    ///   - backlog: the kernel's accept queue length.
    /// Throws `.addressInUse`, `.hostNotFound` (unknown host or interface), `.invalidArgument`.
    public static func bind(host: String? = nil, port: Int, interface: String? = nil,
                            backlog: Int32 = 1024) async throws -> TCPListener {
        let address: SocketAddress
        if let interface {
            address = try SocketAddress.ofInterface(interface, port: port)
        } else if let host {
            guard let first = try await SocketAddress.resolve(host: host, port: port).first else {
                throw PeerSyncError(.hostNotFound, "cannot resolve host", context: ["host": host])
            }
            address = first
        } else if let any6 = SocketAddress(numericHost: "::", port: port) {
            address = any6
        } else {
            throw PeerSyncError(.invalidArgument, "port out of range", context: ["port": String(port)])
        }
        let result = Result { () throws(PeerSyncError) -> TCPListener in try TCPListener(address: address, backlog: backlog) }
        if case .failure(let error) = result, host == nil, interface == nil,
           error.code == .invalidArgument || error.code == .addressInUse,
           let any4 = SocketAddress(numericHost: "0.0.0.0", port: port) {
            // No IPv6 on this machine: fall back to IPv4 only.
            return try TCPListener(address: any4, backlog: backlog)
        }
        return try result.get()
    }

    private init(address: SocketAddress, backlog: Int32) throws(PeerSyncError) {
        let fd = try checkSyscall(Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0), "socket")
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if address.family == AF_INET6 {
            // `::` serves IPv4 too; a specific IPv6 address only IPv6.
            var v6only: Int32 = address.host == "::" ? 0 : 1
            _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &v6only, socklen_t(MemoryLayout<Int32>.size))
        }
        let bound = address.withSockaddr { Glibc.bind(fd, $0, $1) }
        if bound == -1 {
            let code = errno
            Glibc.close(fd)
            throw systemError("bind", errno: code).with("address", address.description)
        }
        if Glibc.listen(fd, backlog) == -1 {
            let code = errno
            Glibc.close(fd)
            throw systemError("listen", errno: code)
        }
        let local = SocketAddress.of(fd: fd, peer: false) ?? address
        socket = try Socket(fd: fd)
        host = local.host
        port = local.port
    }

    /// The next incoming connection. Throws `.closed` once the listener is closed.
    public func accept() async throws -> TCPStream {
        while true {
            let (fd, error) = try socket.withDescriptor { fd -> (Int32, Int32) in
                let r = Glibc.accept(fd, nil, nil)
                return (r, r < 0 ? errno : 0)
            }
            if fd >= 0 {
                let flags = fcntl(fd, F_GETFL)
                _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                setNoDelay(fd)
                return TCPStream(socket: try Socket(fd: fd))
            }
            switch error {
            case EAGAIN, EWOULDBLOCK: try await socket.wait(.read)
            case EINTR, ECONNABORTED, EPROTO: continue
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                // Out of resources: back off instead of spinning; the listener stays up.
                Logger(.network).warning("accept: \(systemError("accept", errno: error).message)")
                try await Task.sleep(for: .milliseconds(100))
            default: throw systemError("accept", errno: error)
            }
        }
    }

    /// Stops listening. Idempotent.
    public func close() {
        socket.close()
    }
}
