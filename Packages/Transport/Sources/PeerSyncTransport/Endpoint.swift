import PeerSyncCore

/// Where a transport connects to or listens on: a parsed URL `scheme://host[:port][/path][?query]`.
///
/// Examples: `ws://127.0.0.1:4984/db`, `wss://[::1]:443/db/_blipsync`, `loopback://peerA`,
/// `loopback://peerA:0` (listen on a free port). The scheme is lowercased; the host is kept as
/// written (IPv6 literals without their brackets). User info (`user:password@`) and fragments
/// (`#...`) are rejected: credentials belong in an authenticator, not in a URL.
///
/// Each transport documents which schemes it accepts and what the parts mean to it.
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// The lowercased scheme, e.g. `ws`, `wss`, `loopback`.
    public var scheme: String
    /// The host name, IP address (IPv6 without brackets) or loopback name. Never empty.
    public var host: String
    /// The port, or `nil` when the URL has none (the transport's default applies). `0` asks a
    /// listener to pick a free port.
    public var port: Int?
    /// The path, empty or starting with `/`, percent-encoding kept as written.
    public var path: String
    /// The query without its `?`, or `nil` when there is none.
    public var query: String?

    /// Creates an endpoint from its parts. Throws `PeerSyncError.Code.invalidArgument` if a
    /// part is malformed (empty host, port outside 0...65535, path not starting with `/`, ...).
    public init(scheme: String, host: String, port: Int? = nil, path: String = "", query: String? = nil) throws {
        guard Endpoint.isValidScheme(scheme) else {
            throw PeerSyncError(.invalidArgument, "invalid URL scheme", context: ["scheme": scheme])
        }
        guard !host.isEmpty, host.unicodeScalars.allSatisfy(Endpoint.isHostScalar) else {
            throw PeerSyncError(.invalidArgument, "invalid host in endpoint", context: ["host": host])
        }
        if let port, !(0...65535).contains(port) {
            throw PeerSyncError(.invalidArgument, "port out of range 0...65535", context: ["port": String(port)])
        }
        guard path.isEmpty || path.hasPrefix("/"), path.unicodeScalars.allSatisfy(Endpoint.isPathScalar) else {
            throw PeerSyncError(.invalidArgument, "invalid path in endpoint", context: ["path": path])
        }
        if let query, !query.unicodeScalars.allSatisfy(Endpoint.isPathScalar) {
            throw PeerSyncError(.invalidArgument, "invalid query in endpoint", context: ["query": query])
        }
        self.scheme = scheme.lowercased()
        self.host = host
        self.port = port
        self.path = path
        self.query = query
    }

    /// Parses `scheme://host[:port][/path][?query]`. Throws `PeerSyncError.Code.invalidArgument`
    /// with the offending URL in the context when it does not parse.
    public init(url: String) throws {
        func fail(_ why: String) -> PeerSyncError {
            PeerSyncError(.invalidArgument, "invalid endpoint URL: \(why)", context: ["url": url])
        }
        guard let schemeEnd = url.range(of: "://") else { throw fail("missing '://'") }
        let scheme = String(url[url.startIndex..<schemeEnd.lowerBound])
        var rest = url[schemeEnd.upperBound...]
        if rest.contains("#") { throw fail("fragments are not allowed") }

        var query: String?
        if let q = rest.firstIndex(of: "?") {
            query = String(rest[rest.index(after: q)...])
            rest = rest[rest.startIndex..<q]
        }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[rest.startIndex..<slash]
        let path = String(rest[slash...])
        if authority.contains("@") { throw fail("user info is not allowed; use an authenticator") }

        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw fail("unterminated IPv6 literal") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail("unexpected text after IPv6 literal") }
                portText = after.dropFirst()
            }
            guard host.contains(":") else { throw fail("bracketed host is not an IPv6 address") }
        } else {
            let parts = authority.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count <= 2 else { throw fail("IPv6 addresses must be in brackets") }
            host = parts[0]
            if parts.count == 2 { portText = parts[1] }
        }
        if host.isEmpty { throw fail("empty host") }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let value = Int(portText), value <= 65535 else {
                throw fail("invalid port")
            }
            port = value
        }
        do {
            try self.init(scheme: scheme, host: String(host), port: port, path: path, query: query)
        } catch let error as PeerSyncError {
            throw error.with("url", url)
        }
    }

    /// A copy with another port, e.g. the port a listener actually bound when asked for `0`.
    public func with(port: Int?) -> Endpoint {
        var copy = self
        copy.port = port
        return copy
    }

    /// A copy with another path.
    public func with(path: String) throws -> Endpoint {
        try Endpoint(scheme: scheme, host: host, port: port, path: path, query: query)
    }

    /// `host` or `host:port`, IPv6 literals in brackets.
    public var authority: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        if let port { return "\(hostPart):\(port)" }
        return hostPart
    }

    /// The URL text, e.g. `ws://127.0.0.1:4984/db`. `Endpoint(url: e.description) == e`.
    public var description: String {
        var text = "\(scheme)://\(authority)\(path)"
        if let query { text += "?\(query)" }
        return text
    }

    private static func isValidScheme(_ scheme: String) -> Bool {
        guard let first = scheme.unicodeScalars.first, first.isASCIILetter else { return false }
        return scheme.unicodeScalars.allSatisfy { $0.isASCIILetter || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0) }
    }

    private static func isHostScalar(_ s: Unicode.Scalar) -> Bool {
        !(s.value <= 0x20 || s.value == 0x7F || "/?#@[]".unicodeScalars.contains(s))
    }

    private static func isPathScalar(_ s: Unicode.Scalar) -> Bool {
        !(s.value <= 0x20 || s.value == 0x7F || s == "#")
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}
