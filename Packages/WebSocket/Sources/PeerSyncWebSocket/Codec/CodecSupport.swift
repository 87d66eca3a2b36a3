// Pure codec support: error codes and Base64. No dependency beyond the Swift standard library
// and PeerSyncCore's `PeerSyncError` / `SHA1` (Tools/fuzz/run compiles this file together with
// those two Core sources into the fuzzers).

#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

extension PeerSyncError.Code {
    /// A WebSocket text message or close reason that is not valid UTF-8 (close code 1007).
    public static let invalidUTF8 = Self(rawValue: "invalidUTF8")
    /// A malformed HTTP/1.1 message (HTTP status 400 on the server side).
    public static let malformedHTTP = Self(rawValue: "malformedHTTP")
    /// An HTTP header block larger than the configured limit (HTTP status 431).
    public static let httpHeadersTooLarge = Self(rawValue: "httpHeadersTooLarge")
    /// An HTTP version other than 1.0 / 1.1 (HTTP status 505).
    public static let httpVersionNotSupported = Self(rawValue: "httpVersionNotSupported")
    /// The WebSocket opening handshake failed: the server answered with a status other than
    /// 101, or the 101 answer is invalid (missing or wrong `Sec-WebSocket-Accept`, ...).
    /// `context["status"]` holds the HTTP status when there was one.
    public static let webSocketHandshakeFailed = Self(rawValue: "webSocketHandshakeFailed")
    /// The client asked for subprotocols and the server accepted none of them (or chose one
    /// the client did not offer).
    public static let webSocketSubprotocolRejected = Self(rawValue: "webSocketSubprotocolRejected")
    /// The server answered `401 Unauthorized` and no credentials were configured, or the
    /// retry with credentials was refused again.
    public static let webSocketUnauthorized = Self(rawValue: "webSocketUnauthorized")
}

extension PeerSyncError {
    /// The WebSocket close code that reports this decoding error to the peer:
    /// 1009 for `.tooLarge`, 1007 for `.invalidUTF8`, 1002 for every other protocol error.
    public var webSocketCloseCode: UInt16 {
        switch code {
        case .tooLarge: 1009
        case .invalidUTF8: 1007
        default: 1002
        }
    }

    /// The HTTP status that reports this parsing error to an HTTP client:
    /// 431 for oversized headers, 413 for an oversized body, 505 for a bad version, else 400.
    public var httpStatus: Int {
        switch code {
        case .httpHeadersTooLarge: 431
        case .tooLarge: 413
        case .httpVersionNotSupported: 505
        default: 400
        }
    }
}

/// RFC 4648 Base64 with padding (the alphabet used by `Sec-WebSocket-Key` and
/// `Authorization: Basic`).
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= input.count {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            i += 3
        }
        let rest = input.count - i
        if rest == 1 {
            let n = UInt32(input[i]) << 16
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(UInt8(ascii: "="))
            out.append(UInt8(ascii: "="))
        } else if rest == 2 {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(UInt8(ascii: "="))
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes canonical padded Base64; returns nil for any other input.
    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 4 * 3)
        func value(_ c: UInt8) -> UInt32? {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(c - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(c - UInt8(ascii: "a") + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(c - UInt8(ascii: "0") + 52)
            case UInt8(ascii: "+"): 62
            case UInt8(ascii: "/"): 63
            default: nil
            }
        }
        var i = 0
        while i < chars.count {
            let last = i + 4 == chars.count
            let pad = last ? (chars[i + 3] == UInt8(ascii: "=") ? (chars[i + 2] == UInt8(ascii: "=") ? 2 : 1) : 0) : 0
            guard let a = value(chars[i]), let b = value(chars[i + 1]) else { return nil }
            let c: UInt32, d: UInt32
            if pad == 2 {
                c = 0; d = 0
            } else {
                guard let cv = value(chars[i + 2]) else { return nil }
                c = cv
                if pad == 1 { d = 0 } else {
                    guard let dv = value(chars[i + 3]) else { return nil }
                    d = dv
                }
            }
            let n = a << 18 | b << 12 | c << 6 | d
            out.append(UInt8(truncatingIfNeeded: n >> 16))
            if pad < 2 { out.append(UInt8(truncatingIfNeeded: n >> 8)) }
            if pad < 1 { out.append(UInt8(truncatingIfNeeded: n)) }
            // Non-canonical encodings (bits set in the padding) are rejected.
            if pad == 2, n & 0xFFFF != 0 { return nil }
            if pad == 1, n & 0xFF != 0 { return nil }
            i += 4
        }
        return out
    }
}
