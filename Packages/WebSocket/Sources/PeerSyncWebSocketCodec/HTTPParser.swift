// Incremental HTTP/1.1 request and response parsers, synchronous.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

/// Parses HTTP/1.1 requests from a byte stream, one after the other (pipelining works).
///
/// Limits: the request line plus headers may not exceed `maxHeaderBytes`
/// (`.httpHeadersTooLarge`, status 431); a body may not exceed `maxBodyBytes` (`.tooLarge`,
/// status 413). Bodies are framed by `Content-Length` or `Transfer-Encoding: chunked`;
/// a request with both is rejected (request smuggling), and so is one with any other
/// transfer coding (`.httpNotImplemented`, status 501: the body would stay encoded) or with
/// two `Authorization` headers (status 400). Errors are `PeerSyncError`s and
/// `PeerSyncError.httpStatus` gives the status to answer; after an error the parser stays
/// failed. Not thread-safe.
public struct HTTPRequestParser: Sendable {
    private var engine: HTTPMessageParser

    /// A parser refusing a head over `maxHeaderBytes` (431; default 16 KiB) and a body over
    /// `maxBodyBytes` (413; default 1 MiB).
    public init(maxHeaderBytes: Int = 16 * 1024, maxBodyBytes: Int = 1 << 20) {
        engine = HTTPMessageParser(isRequest: true, maxHeaderBytes: maxHeaderBytes, maxBodyBytes: maxBodyBytes)
    }

    /// Adds received bytes.
    public mutating func feed(_ bytes: [UInt8]) { engine.feed(bytes) }

    /// The next complete request, or nil if more bytes are needed.
    public mutating func next() throws(PeerSyncError) -> HTTPRequest? {
        guard let head = try engine.next() else { return nil }
        return HTTPRequest(method: head.method, target: head.target, version: head.version,
                           headers: head.headers, body: head.body)
    }

    /// Bytes received after the last complete message (e.g. WebSocket frames after an
    /// upgrade request); clears them from the parser.
    public mutating func takeRemainder() -> [UInt8] { engine.takeRemainder() }

    /// Whether a partial message is buffered.
    public var hasPartialMessage: Bool { engine.hasPartialMessage }
}

/// Parses HTTP/1.1 responses. Same limits and error rules as ``HTTPRequestParser``; a
/// response without `Content-Length` or chunked framing (and whose status allows a body) ends
/// at end of input: call ``finish()`` when the stream ends.
public struct HTTPResponseParser: Sendable {
    private var engine: HTTPMessageParser

    /// A parser with these limits (defaults: 16 KiB of head, 1 MiB of body).
    public init(maxHeaderBytes: Int = 16 * 1024, maxBodyBytes: Int = 1 << 20) {
        engine = HTTPMessageParser(isRequest: false, maxHeaderBytes: maxHeaderBytes, maxBodyBytes: maxBodyBytes)
    }

    /// Adds received bytes.
    public mutating func feed(_ bytes: [UInt8]) { engine.feed(bytes) }

    /// The next complete response, or nil if more bytes are needed.
    public mutating func next() throws(PeerSyncError) -> HTTPResponse? {
        guard let head = try engine.next() else { return nil }
        return HTTPResponse(status: head.status, reason: head.reason, version: head.version,
                            headers: head.headers, body: head.body)
    }

    /// Signals end of input: completes a body framed by end of stream, or throws
    /// `.malformedHTTP` if a message is incomplete. Returns nil if nothing was pending.
    public mutating func finish() throws(PeerSyncError) -> HTTPResponse? {
        guard let head = try engine.finish() else { return nil }
        return HTTPResponse(status: head.status, reason: head.reason, version: head.version,
                            headers: head.headers, body: head.body)
    }

    /// Bytes received after the last complete response (e.g. WebSocket frames right after a 101);
    /// clears them from the parser.
    public mutating func takeRemainder() -> [UInt8] { engine.takeRemainder() }
}

/// The shared engine of both parsers.
struct HTTPMessageParser: Sendable {
    struct Message: Sendable {
        var method = ""
        var target = ""
        var status = 0
        var reason = ""
        var version = HTTPVersion.http1_1
        var headers = HTTPHeaders()
        var body: [UInt8] = []
    }

    private enum BodyFraming: Sendable {
        case length(Int)
        case chunked
        case untilEOF
    }

    private enum ChunkState: Sendable {
        case size
        case data(Int)
        case dataEnd
        case trailers
    }

    private enum State: Sendable {
        case head
        case body(BodyFraming)
        case failed(PeerSyncError)
    }

    let isRequest: Bool
    let maxHeaderBytes: Int
    let maxBodyBytes: Int
    private var buffer: [UInt8] = []
    private var cursor = 0
    private var scanFrom = 0
    private var state: State = .head
    private var chunkState: ChunkState = .size
    private var trailerBytes = 0
    private var current = Message()

    init(isRequest: Bool, maxHeaderBytes: Int, maxBodyBytes: Int) {
        self.isRequest = isRequest
        self.maxHeaderBytes = max(64, maxHeaderBytes)
        self.maxBodyBytes = max(0, maxBodyBytes)
    }

    var hasPartialMessage: Bool {
        if case .head = state { return cursor < buffer.count }
        return true
    }

    mutating func feed(_ bytes: [UInt8]) {
        if case .failed = state { return }
        buffer.append(contentsOf: bytes)
    }

    mutating func takeRemainder() -> [UInt8] {
        let rest = Array(buffer[cursor...])
        buffer = []
        cursor = 0
        scanFrom = 0
        return rest
    }

    mutating func next() throws(PeerSyncError) -> Message? {
        if case .failed(let error) = state { throw error }
        do {
            return try step()
        } catch {
            state = .failed(error)
            buffer = []
            cursor = 0
            throw error
        }
    }

    mutating func finish() throws(PeerSyncError) -> Message? {
        if let message = try next() { return message }
        switch state {
        case .head:
            if cursor < buffer.count {
                let error = PeerSyncError(.malformedHTTP, "HTTP message truncated in its header")
                state = .failed(error)
                throw error
            }
            return nil
        case .body(.untilEOF):
            current.body.append(contentsOf: buffer[cursor...])
            if current.body.count > maxBodyBytes { throw tooLarge() }
            cursor = buffer.count
            return complete()
        case .body:
            let error = PeerSyncError(.malformedHTTP, "HTTP message truncated in its body")
            state = .failed(error)
            throw error
        case .failed(let error):
            throw error
        }
    }

    private func tooLarge() -> PeerSyncError {
        PeerSyncError(.tooLarge, "HTTP body larger than \(maxBodyBytes) bytes", context: ["limit": String(maxBodyBytes)])
    }

    private mutating func complete() -> Message {
        let message = current
        current = Message()
        state = .head
        chunkState = .size
        trailerBytes = 0
        // Drop consumed bytes so the buffer does not grow across pipelined messages.
        if cursor > 0 {
            buffer.removeSubrange(0..<cursor)
            cursor = 0
        }
        scanFrom = 0
        return message
    }

    private mutating func step() throws(PeerSyncError) -> Message? {
        while true {
            switch state {
            case .failed(let error):
                throw error
            case .head:
                guard let end = findHeaderEnd() else {
                    if buffer.count - cursor > maxHeaderBytes { throw headersTooLarge() }
                    return nil
                }
                if end + 4 - cursor > maxHeaderBytes { throw headersTooLarge() }
                let headBytes = Array(buffer[cursor..<end])
                cursor = end + 4
                try parseHead(headBytes)
            case .body(let framing):
                switch framing {
                case .length(let n):
                    guard buffer.count - cursor >= n else { return nil }
                    current.body = Array(buffer[cursor..<(cursor + n)])
                    cursor += n
                    return complete()
                case .untilEOF:
                    // Collected by finish(); keep the limit while waiting.
                    if buffer.count - cursor > maxBodyBytes { throw tooLarge() }
                    return nil
                case .chunked:
                    guard try stepChunked() else { return nil }
                    return complete()
                }
            }
        }
    }

    private func headersTooLarge() -> PeerSyncError {
        PeerSyncError(.httpHeadersTooLarge, "HTTP header block larger than \(maxHeaderBytes) bytes",
                      context: ["limit": String(maxHeaderBytes)])
    }

    /// Index of the `\r\n\r\n` ending the header block, scanning only new bytes.
    private mutating func findHeaderEnd() -> Int? {
        var i = max(cursor, scanFrom)
        while i + 3 < buffer.count {
            if buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                return i
            }
            i += 1
        }
        scanFrom = max(cursor, buffer.count - 3)
        return nil
    }

    /// Index of the next `\r\n` at or after `from`, or nil.
    private func findLineEnd(from: Int) -> Int? {
        var i = from
        while i + 1 < buffer.count {
            if buffer[i] == 13 && buffer[i + 1] == 10 { return i }
            i += 1
        }
        return nil
    }

    /// Advances through chunks; true when the whole chunked body (and trailers) is read.
    private mutating func stepChunked() throws(PeerSyncError) -> Bool {
        while true {
            switch chunkState {
            case .size:
                guard let end = findLineEnd(from: cursor) else {
                    if buffer.count - cursor > 1024 {
                        throw PeerSyncError(.malformedHTTP, "HTTP chunk size line too long")
                    }
                    return false
                }
                if end - cursor > 1024 { throw PeerSyncError(.malformedHTTP, "HTTP chunk size line too long") }
                var size = 0
                var digits = 0
                var i = cursor
                while i < end, let v = hexValue(buffer[i]) {
                    // At most 15 hex digits (< 2^60): checked before multiplying, so a long
                    // size can never overflow (found by the http-parser fuzzer).
                    if digits == 15 { throw PeerSyncError(.malformedHTTP, "HTTP chunk size too long") }
                    size = size * 16 + v
                    digits += 1
                    i += 1
                }
                guard digits > 0 else { throw PeerSyncError(.malformedHTTP, "HTTP chunk size is not hexadecimal") }
                // Anything after the digits must be whitespace or a chunk extension.
                if i < end, buffer[i] != UInt8(ascii: ";"), buffer[i] != 0x20, buffer[i] != 0x09 {
                    throw PeerSyncError(.malformedHTTP, "invalid HTTP chunk size line")
                }
                cursor = end + 2
                if size == 0 {
                    chunkState = .trailers
                } else {
                    if current.body.count + size > maxBodyBytes { throw tooLarge() }
                    chunkState = .data(size)
                }
            case .data(let remaining):
                let available = buffer.count - cursor
                if available == 0 { return false }
                let take = min(available, remaining)
                current.body.append(contentsOf: buffer[cursor..<(cursor + take)])
                cursor += take
                chunkState = remaining - take == 0 ? .dataEnd : .data(remaining - take)
            case .dataEnd:
                guard buffer.count - cursor >= 2 else { return false }
                guard buffer[cursor] == 13, buffer[cursor + 1] == 10 else {
                    throw PeerSyncError(.malformedHTTP, "HTTP chunk not followed by CRLF")
                }
                cursor += 2
                chunkState = .size
            case .trailers:
                guard let end = findLineEnd(from: cursor) else {
                    if trailerBytes + buffer.count - cursor > maxHeaderBytes { throw headersTooLarge() }
                    return false
                }
                trailerBytes += end + 2 - cursor
                if trailerBytes > maxHeaderBytes { throw headersTooLarge() }
                let empty = end == cursor
                cursor = end + 2
                if empty { return true }  // trailer fields are read and ignored
            }
        }
    }

    private func hexValue(_ c: UInt8) -> Int? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(c - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(c - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(c - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    // MARK: Head

    private mutating func parseHead(_ head: [UInt8]) throws(PeerSyncError) {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var i = 0
        while i + 1 < head.count {
            if head[i] == 13 && head[i + 1] == 10 {
                lines.append(head[start..<i])
                i += 2
                start = i
            } else {
                i += 1
            }
        }
        lines.append(head[start..<head.count])
        guard let first = lines.first, !first.isEmpty else {
            throw PeerSyncError(.malformedHTTP, "empty HTTP start line")
        }
        var message = Message()
        if isRequest {
            try parseRequestLine(first, into: &message)
        } else {
            try parseStatusLine(first, into: &message)
        }
        for line in lines.dropFirst() {
            message.headers.add(contentsOf: try parseHeaderLine(line))
        }
        // `Authorization` is a singleton (RFC 9110 §11.6.2): with two, which one a server
        // checks is arbitrary, so a request carrying two is refused outright.
        if isRequest && message.headers.values(for: "Authorization").count > 1 {
            throw PeerSyncError(.malformedHTTP, "HTTP request with more than one Authorization header")
        }
        current = message
        state = .body(try framing(of: message))
    }

    private func parseRequestLine(_ line: ArraySlice<UInt8>, into message: inout Message) throws(PeerSyncError) {
        let parts = line.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw PeerSyncError(.malformedHTTP, "HTTP request line is not `method target version`")
        }
        guard !parts[0].isEmpty, parts[0].allSatisfy(isTokenChar) else {
            throw PeerSyncError(.malformedHTTP, "invalid HTTP method")
        }
        guard !parts[1].isEmpty, parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw PeerSyncError(.malformedHTTP, "invalid HTTP request target")
        }
        message.method = String(decoding: parts[0], as: UTF8.self)
        message.target = String(decoding: parts[1], as: UTF8.self)
        message.version = try parseVersion(parts[2])
    }

    private func parseStatusLine(_ line: ArraySlice<UInt8>, into message: inout Message) throws(PeerSyncError) {
        // HTTP-version SP 3DIGIT SP [reason]
        guard let sp = line.firstIndex(of: 0x20) else {
            throw PeerSyncError(.malformedHTTP, "HTTP status line without a status code")
        }
        message.version = try parseVersion(line[line.startIndex..<sp])
        let rest = line[(sp + 1)...]
        guard rest.count >= 3 else { throw PeerSyncError(.malformedHTTP, "HTTP status code is not 3 digits") }
        var status = 0
        for c in rest.prefix(3) {
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else {
                throw PeerSyncError(.malformedHTTP, "HTTP status code is not 3 digits")
            }
            status = status * 10 + Int(c - UInt8(ascii: "0"))
        }
        guard status >= 100 else { throw PeerSyncError(.malformedHTTP, "HTTP status code below 100") }
        let afterCode = rest.dropFirst(3)
        if let c = afterCode.first, c != 0x20 {
            throw PeerSyncError(.malformedHTTP, "HTTP status code is not 3 digits")
        }
        let reason = afterCode.dropFirst()
        guard reason.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }) else {
            throw PeerSyncError(.malformedHTTP, "control character in HTTP reason phrase")
        }
        message.status = status
        message.reason = String(decoding: reason, as: UTF8.self)
    }

    private func parseVersion(_ bytes: ArraySlice<UInt8>) throws(PeerSyncError) -> HTTPVersion {
        let v = Array(bytes)
        guard v.count == 8, v[0] == UInt8(ascii: "H"), v[1] == UInt8(ascii: "T"), v[2] == UInt8(ascii: "T"),
              v[3] == UInt8(ascii: "P"), v[4] == UInt8(ascii: "/"), v[6] == UInt8(ascii: "."),
              (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(v[5]),
              (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(v[7]) else {
            throw PeerSyncError(.malformedHTTP, "invalid HTTP version")
        }
        let version = HTTPVersion(major: Int(v[5] - UInt8(ascii: "0")), minor: Int(v[7] - UInt8(ascii: "0")))
        guard version.major == 1 else {
            throw PeerSyncError(.httpVersionNotSupported, "unsupported HTTP version \(version)")
        }
        return version
    }

    private func parseHeaderLine(_ line: ArraySlice<UInt8>) throws(PeerSyncError) -> HTTPHeaderField {
        guard let first = line.first else { throw PeerSyncError(.malformedHTTP, "empty HTTP header line") }
        if first == 0x20 || first == 0x09 {
            throw PeerSyncError(.malformedHTTP, "obsolete HTTP header line folding")
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
            throw PeerSyncError(.malformedHTTP, "HTTP header line without a colon")
        }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty, name.allSatisfy(isTokenChar) else {
            throw PeerSyncError(.malformedHTTP, "invalid HTTP header name")
        }
        var value = line[(colon + 1)...]
        while let c = value.first, c == 0x20 || c == 0x09 { value = value.dropFirst() }
        while let c = value.last, c == 0x20 || c == 0x09 { value = value.dropLast() }
        guard value.allSatisfy({ $0 == 0x09 || $0 >= 0x20 && $0 != 0x7F }) else {
            throw PeerSyncError(.malformedHTTP, "control character in HTTP header value")
        }
        return HTTPHeaderField(name: String(decoding: name, as: UTF8.self),
                               value: String(decoding: value, as: UTF8.self))
    }

    private func framing(of message: Message) throws(PeerSyncError) -> BodyFraming {
        if !isRequest && ((100..<200).contains(message.status) || message.status == 204 || message.status == 304) {
            return .length(0)
        }
        let transferCodings = message.headers.tokens(for: "Transfer-Encoding")
        let lengths = message.headers.values(for: "Content-Length")
        if !transferCodings.isEmpty {
            if isRequest && !lengths.isEmpty {
                throw PeerSyncError(.malformedHTTP, "HTTP request with both Content-Length and Transfer-Encoding")
            }
            if isRequest {
                // Only `chunked` alone is decoded; any other coding (`gzip, chunked`, ...) would
                // leave the body encoded, so it is refused with 501 (RFC 9112 §6.1).
                guard transferCodings.count == 1, asciiCaseInsensitiveEquals(transferCodings[0], "chunked") else {
                    throw PeerSyncError(.httpNotImplemented, "HTTP request with an unsupported Transfer-Encoding "
                                        + "(only chunked alone is supported)")
                }
                return .chunked
            }
            if let last = transferCodings.last, asciiCaseInsensitiveEquals(last, "chunked") {
                return .chunked
            }
            return .untilEOF
        }
        if !lengths.isEmpty {
            var value: Int?
            for text in lengths.flatMap({ $0.split(separator: ",") }) {
                let digits = trimOWS(String(text))
                guard !digits.isEmpty, digits.utf8.count <= 18,
                      digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                      let n = Int(digits) else {
                    throw PeerSyncError(.malformedHTTP, "invalid HTTP Content-Length")
                }
                if let value, value != n {
                    throw PeerSyncError(.malformedHTTP, "conflicting HTTP Content-Length values")
                }
                value = n
            }
            guard let length = value else { throw PeerSyncError(.malformedHTTP, "invalid HTTP Content-Length") }
            if length > maxBodyBytes { throw tooLarge() }
            return .length(length)
        }
        return isRequest ? .length(0) : .untilEOF
    }
}

extension HTTPHeaders {
    fileprivate mutating func add(contentsOf field: HTTPHeaderField) { add(field.name, field.value) }
}
