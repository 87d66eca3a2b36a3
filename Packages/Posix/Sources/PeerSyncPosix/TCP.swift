#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PeerSyncCore
import PeerSyncTransport

/// A connected TCP socket as a `ByteStream`: non-blocking, driven by the process's
/// `Reactor` (one thread for all descriptors), with `TCP_NODELAY` set.
///
/// Threading: every method may be called from any task. At most one `read` and one `write`
/// may be outstanding at a time (the `ByteStream` contract); they may run concurrently.
/// Errors are `PeerSyncError`s: `.closed` after ``close()``, `.connectionReset` when the
/// peer broke the connection, `.cancelled` when the waiting task is cancelled.
public final class TCPStream: ByteStream {
    package let socket: AsyncDescriptor
    /// The peer's address, e.g. `127.0.0.1:4984` or `[::1]:4984`.
    public let remoteAddress: String?
    /// The local address of the connection.
    public let localAddress: String?

    init(socket: AsyncDescriptor) {
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
        let socket = try AsyncDescriptor(fd: try openStreamSocket(family: address.family))
        if let local {
            do {
                try socket.withDescriptor { fd throws(PeerSyncError) in
                    try syscall("bind") { local.withSockaddr { Glibc.bind(fd, $0, $1) } }
                }
            } catch {
                socket.close()
                throw error.with("address", local.description)
            }
        }
        let started: SyscallResult<Int32>
        do {
            // EINPROGRESS: the non-blocking connect goes on. After a signal interrupted the call
            // (EINTR) `syscall` asks again: EALREADY, it is still going on; EISCONN, it is done.
            started = try socket.withDescriptor { fd throws(PeerSyncError) in
                try syscall("connect", handling: [EINPROGRESS, EALREADY, EISCONN]) { address.withSockaddr { Glibc.connect(fd, $0, $1) } }
            }
        } catch {
            socket.close()
            throw error.with("address", address.description)
        }
        if case .failed(let code) = started, code != EISCONN {
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
            let soError = try socket.withDescriptor { fd throws(PeerSyncError) -> Int32 in
                var value: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                try syscall("getsockopt") { getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) }
                return value
            }
            if soError != 0 {
                socket.close()
                throw systemError("connect", errno: soError).with("address", address.description)
            }
        }
        return TCPStream(socket: socket)
    }

    /// The next bytes the kernel has (1 to `maxBytes`), suspending on the reactor (no thread) until
    /// some arrive; nil once the peer shut down its side. Throws `.invalidArgument` for `maxBytes`
    /// ≤ 0, `.closed` after ``close()``, and the socket's errors (`.connectionReset`, …). One read at
    /// a time.
    public func read(maxBytes: Int) async throws -> [UInt8]? {
        guard maxBytes > 0 else { throw PeerSyncError(.invalidArgument, "read(maxBytes:) needs maxBytes > 0") }
        while true {
            var wouldBlock = false
            let bytes = try [UInt8](unsafeUninitializedCapacity: maxBytes) { buffer, count in
                guard let n = try readAvailable(into: UnsafeMutableRawBufferPointer(buffer)) else {
                    wouldBlock = true
                    return
                }
                count = n
            }
            if !wouldBlock { return bytes.isEmpty ? nil : bytes }
            try await socket.wait(.read)
        }
    }

    /// Reads what the kernel has for this socket into `buffer` without waiting: the number
    /// of bytes, 0 at end of stream, nil when nothing is available now (then call
    /// ``waitUntilReadable()``).
    package func readAvailable(into buffer: UnsafeMutableRawBufferPointer) throws(PeerSyncError) -> Int? {
        let result = try socket.withDescriptor { fd throws(PeerSyncError) in
            try syscall("recv", handling: wouldBlockErrnos) { recv(fd, buffer.baseAddress, buffer.count, 0) }
        }
        switch result {
        case .succeeded(let n): return n
        case .failed: return nil
        }
    }

    /// Suspends until the socket may have bytes to read (or has ended).
    package func waitUntilReadable() async throws {
        try await socket.wait(.read)
    }

    /// Hands all of `bytes` to the kernel, suspending on the reactor while its buffer is full.
    /// Throws `.closed` after ``close()`` and the socket's errors (`.connectionReset`, …). One write
    /// at a time.
    public func write(_ bytes: [UInt8]) async throws {
        try await write(bytes, cancellable: true)
    }

    /// Writes all of `bytes`. When not `cancellable`, task cancellation does not stop it
    /// halfway (only completion or the socket's close ends it).
    package func write(_ bytes: [UInt8], cancellable: Bool) async throws {
        var offset = 0
        while offset < bytes.count {
            let start = offset
            offset += try await socket.perform(.write, "send", cancellable: cancellable) { fd in
                bytes.withUnsafeBytes { raw in send(fd, raw.baseAddress! + start, raw.count - start, Int32(MSG_NOSIGNAL)) }
            }
            // A short write filled the socket buffer: wait for room instead of asking again.
            if offset < bytes.count { try await socket.wait(.write, cancellable: cancellable) }
        }
    }

    public func shutdownOutput() async {
        _ = try? socket.withDescriptor { fd throws(PeerSyncError) in
            try syscall("shutdown") { Glibc.shutdown(fd, Int32(SHUT_WR)) }
        }
    }

    /// Closes the socket; pending reads and writes end with `.closed`. Idempotent.
    public func close() async {
        socket.close()
    }

    /// Closes without suspending (for use from synchronous code).
    public func closeNow() {
        socket.close()
    }
}

/// A new non-blocking, close-on-exec TCP socket of `family` with `TCP_NODELAY` set.
private func openStreamSocket(family: Int32) throws(PeerSyncError) -> Int32 {
    let fd = try syscall("socket") {
        Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }
    setNoDelay(fd)
    return fd
}

/// Sets `TCP_NODELAY` (best effort: a socket without it is slower, not broken).
private func setNoDelay(_ fd: Int32) {
    try? setSocketOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
}

/// A listening TCP socket. ``accept()`` suspends (on the reactor, no thread) until a
/// connection arrives. Close it to end a pending `accept` with `.closed`.
public final class TCPListener: Sendable {
    let socket: AsyncDescriptor
    /// The bound host (numeric) and port; with port 0 requested, the port the system picked.
    public let host: String
    /// The bound port (the system's pick when 0 was requested).
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
        let fd = try syscall("socket") {
            Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do throws(PeerSyncError) {
            try setSocketOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
            if address.family == AF_INET6 {
                // `::` serves IPv4 too; a specific IPv6 address only IPv6.
                try setSocketOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, address.host == "::" ? 0 : 1)
            }
            do {
                try syscall("bind") { address.withSockaddr { Glibc.bind(fd, $0, $1) } }
            } catch {
                throw error.with("address", address.description)
            }
            try syscall("listen") { Glibc.listen(fd, backlog) }
        } catch {
            closeDescriptor(fd)
            throw error
        }
        let local = SocketAddress.of(fd: fd, peer: false) ?? address
        socket = try AsyncDescriptor(fd: fd)
        host = local.host
        port = local.port
    }

    /// The next incoming connection. Throws `.closed` once the listener is closed.
    public func accept() async throws -> TCPStream {
        while true {
            let result = try socket.withDescriptor { fd throws(PeerSyncError) in
                try syscall("accept", handling: Self.retriedAcceptErrnos + Self.outOfResourcesErrnos + wouldBlockErrnos) {
                    Glibc.accept(fd, nil, nil)
                }
            }
            switch result {
            case .succeeded(let fd):
                // (`accept4`, which sets both flags at once, is not exported by Swift's Glibc.)
                do {
                    let flags = try syscall("fcntl") { fcntl(fd, F_GETFL) }
                    try syscall("fcntl") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
                    try syscall("fcntl") { fcntl(fd, F_SETFD, FD_CLOEXEC) }
                } catch {
                    closeDescriptor(fd)
                    throw error
                }
                setNoDelay(fd)
                return TCPStream(socket: try AsyncDescriptor(fd: fd))
            case .failed(let error) where wouldBlockErrnos.contains(error):
                try await socket.wait(.read)
            case .failed(let error) where Self.retriedAcceptErrnos.contains(error):
                continue
            case .failed(let error):
                // Out of resources: back off instead of spinning; the listener stays up.
                Logger(.network).warning("accept: \(systemError("accept", errno: error).message)")
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// The connection went away while it waited in the queue: take the next one.
    private static let retriedAcceptErrnos = [ECONNABORTED, EPROTO]
    /// Out of descriptors or memory: back off and try again instead of spinning.
    private static let outOfResourcesErrnos = [EMFILE, ENFILE, ENOBUFS, ENOMEM]

    /// Stops listening. Idempotent.
    public func close() {
        socket.close()
    }
}
