#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import PeerSyncCore
import PeerSyncTransport

/// An IPv4 or IPv6 socket address (internal: public APIs use host strings and ports).
struct SocketAddress: Sendable, CustomStringConvertible {
    /// `sockaddr_in` or `sockaddr_in6` bytes.
    private var storage: sockaddr_storage
    let length: socklen_t

    var family: Int32 { Int32(storage.ss_family) }

    init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    /// Parses a numeric IPv4 (`127.0.0.1`) or IPv6 (`::1`, `[::1]`, `fe80::1%lo`) address.
    init?(numericHost host: String, port: Int) {
        guard (0...65535).contains(port) else { return nil }
        var host = host
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var scopeID: UInt32 = 0
        if let percent = host.firstIndex(of: "%") {
            let name = String(host[host.index(after: percent)...])
            scopeID = if_nametoindex(name)
            if scopeID == 0, let n = UInt32(name) { scopeID = n }
            host = String(host[..<percent])
        }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = in_port_t(UInt16(port).bigEndian)
            sin.sin_addr = v4
            var storage = sockaddr_storage()
            withUnsafeBytes(of: &sin) { src in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) }
            }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = in_port_t(UInt16(port).bigEndian)
            sin6.sin6_addr = v6
            sin6.sin6_scope_id = scopeID
            var storage = sockaddr_storage()
            withUnsafeBytes(of: &sin6) { src in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) }
            }
            self.init(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
            return
        }
        return nil
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    var port: Int {
        withUnsafeBytes(of: storage) { raw -> Int in
            if family == AF_INET {
                return Int(UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port))
            } else if family == AF_INET6 {
                return Int(UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port))
            }
            return 0
        }
    }

    /// The numeric host, without brackets.
    var host: String {
        withUnsafeBytes(of: storage) { raw -> String in
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            if family == AF_INET {
                var addr = raw.load(as: sockaddr_in.self).sin_addr
                _ = inet_ntop(AF_INET, &addr, &buffer, socklen_t(buffer.count))
            } else if family == AF_INET6 {
                var addr = raw.load(as: sockaddr_in6.self).sin6_addr
                _ = inet_ntop(AF_INET6, &addr, &buffer, socklen_t(buffer.count))
            } else {
                return "?"
            }
            let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// `1.2.3.4:80` or `[::1]:80`.
    var description: String {
        family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The local or peer address of a socket.
    static func of(fd: Int32, peer: Bool) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = try? syscall(peer ? "getpeername" : "getsockname") {
            withUnsafeMutablePointer(to: &storage) { ptr in
                ptr.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
                }
            }
        }
        guard named != nil else { return nil }  // e.g. ENOTCONN: the peer is already gone
        return SocketAddress(storage: storage, length: length)
    }

    /// Resolves a host name (or numeric address) to addresses, IPv4 and IPv6. Numeric hosts
    /// never touch the resolver; names are resolved with `getaddrinfo` on a Dispatch thread so
    /// no cooperative thread blocks.
    static func resolve(host: String, port: Int) async throws -> [SocketAddress] {
        guard (0...65535).contains(port) else {
            throw PeerSyncError(.invalidArgument, "port out of range", context: ["port": String(port)])
        }
        if let numeric = SocketAddress(numericHost: host, port: port) { return [numeric] }
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try resolveBlocking(host: host, port: port) })
            }
        }
    }

    private static func resolveBlocking(host: String, port: Int) throws(PeerSyncError) -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0, let first = result else {
            let reason = String(cString: gai_strerror(rc))
            throw PeerSyncError(.hostNotFound, "cannot resolve host: \(reason)", context: ["host": host])
        }
        defer { freeaddrinfo(first) }
        var addresses: [SocketAddress] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            if let addr = info.pointee.ai_addr,
               info.pointee.ai_family == AF_INET || info.pointee.ai_family == AF_INET6 {
                var storage = sockaddr_storage()
                let length = min(Int(info.pointee.ai_addrlen), MemoryLayout<sockaddr_storage>.size)
                withUnsafeMutableBytes(of: &storage) { dst in
                    dst.copyMemory(from: UnsafeRawBufferPointer(start: addr, count: length))
                }
                addresses.append(SocketAddress(storage: storage, length: socklen_t(length)))
            }
            cursor = info.pointee.ai_next
        }
        if addresses.isEmpty {
            throw PeerSyncError(.hostNotFound, "host has no IPv4 or IPv6 address", context: ["host": host])
        }
        return addresses
    }

    /// The first address of a network interface (IPv4 preferred unless `family` says
    /// otherwise), with `port`.
    static func ofInterface(_ name: String, port: Int, family: Int32? = nil) throws(PeerSyncError) -> SocketAddress {
        var list: UnsafeMutablePointer<ifaddrs>?
        try syscall("getifaddrs") { getifaddrs(&list) }
        defer { freeifaddrs(list) }
        var v4: SocketAddress?, v6: SocketAddress?
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let namePtr = entry.pointee.ifa_name, String(cString: namePtr) == name,
                  let addr = entry.pointee.ifa_addr else { continue }
            let fam = Int32(addr.pointee.sa_family)
            var storage = sockaddr_storage()
            if fam == AF_INET, v4 == nil {
                var sin = UnsafeRawPointer(addr).loadUnaligned(as: sockaddr_in.self)
                sin.sin_port = in_port_t(UInt16(port).bigEndian)
                withUnsafeBytes(of: &sin) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
                v4 = SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in>.size))
            } else if fam == AF_INET6, v6 == nil {
                var sin6 = UnsafeRawPointer(addr).loadUnaligned(as: sockaddr_in6.self)
                sin6.sin6_port = in_port_t(UInt16(port).bigEndian)
                withUnsafeBytes(of: &sin6) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
                v6 = SocketAddress(storage: storage, length: socklen_t(MemoryLayout<sockaddr_in6>.size))
            }
        }
        let chosen: SocketAddress? = switch family {
        case AF_INET6: v6
        case AF_INET: v4
        default: v4 ?? v6
        }
        guard let chosen else {
            throw PeerSyncError(.hostNotFound, "network interface not found or without an address",
                                context: ["interface": name])
        }
        return chosen
    }
}
