// HTTP/1.1 message values and serialization.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

/// One header line.
public struct HTTPHeaderField: Sendable, Hashable {
    /// The field name as sent; compare it case-insensitively.
    public var name: String
    /// The field value, without surrounding whitespace.
    public var value: String
    /// A field, taken as given (``HTTPHeaders/validate()`` checks it).
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// An ordered list of header fields with case-insensitive lookup (RFC 9110 §5).
public struct HTTPHeaders: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral {
    /// Every field in order, duplicates included.
    public private(set) var fields: [HTTPHeaderField] = []

    /// No fields.
    public init() {}
    /// These name–value fields, in this order.
    public init(_ fields: [(String, String)]) {
        self.fields = fields.map { HTTPHeaderField(name: $0.0, value: $0.1) }
    }
    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    public func makeIterator() -> IndexingIterator<[HTTPHeaderField]> { fields.makeIterator() }
    /// The number of fields.
    public var count: Int { fields.count }
    /// Whether there are no fields.
    public var isEmpty: Bool { fields.isEmpty }

    /// The first value of the header `name` (case-insensitive), or nil.
    public subscript(_ name: String) -> String? {
        fields.first { asciiCaseInsensitiveEquals($0.name, name) }?.value
    }

    /// Every value of the header `name`, in order.
    public func values(for name: String) -> [String] {
        fields.filter { asciiCaseInsensitiveEquals($0.name, name) }.map(\.value)
    }

    /// The comma-separated list elements of every `name` header, trimmed, empty ones dropped.
    public func tokens(for name: String) -> [String] {
        values(for: name).flatMap { $0.split(separator: ",") }
            .map { trimOWS(String($0)) }
            .filter { !$0.isEmpty }
    }

    /// Whether the list header `name` contains `token` (case-insensitive), e.g.
    /// `Connection: keep-alive, Upgrade` contains `upgrade`.
    public func containsToken(_ token: String, for name: String) -> Bool {
        tokens(for: name).contains { asciiCaseInsensitiveEquals($0, token) }
    }

    /// Appends a field (keeps existing ones with the same name).
    public mutating func add(_ name: String, _ value: String) {
        fields.append(HTTPHeaderField(name: name, value: value))
    }

    /// Replaces every field named `name` by one with `value`.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    /// Removes every field named `name` (case-insensitive).
    public mutating func remove(_ name: String) {
        fields.removeAll { asciiCaseInsensitiveEquals($0.name, name) }
    }

    /// Throws `.invalidArgument` if a name is not an HTTP token or a value holds a control
    /// character (CR/LF would let a caller inject header lines).
    public func validate() throws(PeerSyncError) {
        for field in fields {
            guard !field.name.isEmpty, field.name.utf8.allSatisfy(isTokenChar) else {
                throw PeerSyncError(.invalidArgument, "invalid HTTP header name",
                                    context: ["header": field.name])
            }
            guard field.value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                throw PeerSyncError(.invalidArgument, "HTTP header value contains a control character",
                                    context: ["header": field.name])
            }
        }
    }
}

/// `HTTP/<major>.<minor>`.
public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
    /// The major version (1).
    public var major: Int
    /// The minor version (0 or 1).
    public var minor: Int
    /// `HTTP/major.minor`.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }
    /// `HTTP/1.1`, what PeerSync sends.
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    /// `HTTP/1.0`.
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// An HTTP/1.1 request.
public struct HTTPRequest: Sendable, Hashable {
    /// The method as sent, e.g. `GET` (methods are case-sensitive).
    public var method: String
    /// The request target as sent, e.g. `/db/_blipsync?x=1`.
    public var target: String
    /// The protocol version of the request line.
    public var version: HTTPVersion
    /// The header fields, in order.
    public var headers: HTTPHeaders
    /// The body (decoded from chunked transfer encoding when it was sent so).
    public var body: [UInt8]

    /// A request with these parts; defaults: `GET`, HTTP/1.1, no headers, no body.
    public init(method: String = "GET", target: String, version: HTTPVersion = .http1_1,
                headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// The target without its query string, percent-decoding left to the caller.
    public var path: String {
        if let q = target.firstIndex(of: "?") { return String(target[..<q]) }
        return target
    }

    /// The query string (without `?`), or nil.
    public var query: String? {
        guard let q = target.firstIndex(of: "?") else { return nil }
        return String(target[target.index(after: q)...])
    }

    /// The wire form. Adds `Content-Length` when there is a body and none is set.
    public func serialized() -> [UInt8] {
        var text = "\(method) \(target) \(version)\r\n"
        var headers = self.headers
        if !body.isEmpty && headers["Content-Length"] == nil && headers["Transfer-Encoding"] == nil {
            headers.add("Content-Length", String(body.count))
        }
        for field in headers { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + body
    }
}

/// An HTTP/1.1 response.
public struct HTTPResponse: Sendable, Hashable {
    /// The status code, e.g. 101 or 404.
    public var status: Int
    /// The reason phrase of the status line (informational only).
    public var reason: String
    /// The protocol version of the status line.
    public var version: HTTPVersion
    /// The header fields, in order.
    public var headers: HTTPHeaders
    /// The body.
    public var body: [UInt8]

    /// `reason` defaults to the standard phrase of `status`.
    public init(status: Int, reason: String? = nil, version: HTTPVersion = .http1_1,
                headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.reason = reason ?? HTTPResponse.standardReason(status)
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// A `text/plain; charset=utf-8` response.
    public static func text(_ status: Int, _ text: String, headers: HTTPHeaders = HTTPHeaders()) -> HTTPResponse {
        var headers = headers
        if headers["Content-Type"] == nil { headers.add("Content-Type", "text/plain; charset=utf-8") }
        return HTTPResponse(status: status, headers: headers, body: Array(text.utf8))
    }

    /// Whether a response with this status never has a body (1xx, 204, 304).
    public var statusForbidsBody: Bool { (100..<200).contains(status) || status == 204 || status == 304 }

    /// The wire form. Adds `Content-Length` (also `0`) unless the status forbids a body or
    /// the headers already frame it.
    public func serialized() -> [UInt8] {
        var text = "\(version) \(status) \(reason)\r\n"
        var headers = self.headers
        if !statusForbidsBody && headers["Content-Length"] == nil && headers["Transfer-Encoding"] == nil {
            headers.add("Content-Length", String(body.count))
        }
        for field in headers { text += "\(field.name): \(field.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + (statusForbidsBody ? [] : body)
    }

    /// The standard reason phrase of `status` (RFC 9110), e.g. `Not Found`; a generic one for
    /// unknown codes.
    public static func standardReason(_ status: Int) -> String {
        switch status {
        case 101: "Switching Protocols"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 426: "Upgrade Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}

// MARK: - Character classes shared by the parser and serializers

/// RFC 9110 `tchar`.
@inline(__always)
package func isTokenChar(_ c: UInt8) -> Bool {
    switch c {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
         UInt8(ascii: "0")...UInt8(ascii: "9"):
        return true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
         UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
         UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
        return true
    default:
        return false
    }
}

/// Lowercases ASCII letters only (header names and tokens compare case-insensitively in ASCII,
/// never by locale).
package func asciiLowercased(_ s: String) -> String {
    String(decoding: s.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
}

func asciiCaseInsensitiveEquals(_ a: String, _ b: String) -> Bool {
    let x = a.utf8, y = b.utf8
    guard x.count == y.count else { return false }
    for (p, q) in zip(x, y) {
        let lp = p >= 0x41 && p <= 0x5A ? p + 0x20 : p
        let lq = q >= 0x41 && q <= 0x5A ? q + 0x20 : q
        if lp != lq { return false }
    }
    return true
}

/// Trims spaces and horizontal tabs (HTTP optional whitespace).
package func trimOWS(_ s: String) -> String {
    let bytes = Array(s.utf8)
    var start = 0, end = bytes.count
    while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
    while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
    return String(decoding: bytes[start..<end], as: UTF8.self)
}
