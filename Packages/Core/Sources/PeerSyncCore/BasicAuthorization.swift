// Pure stdlib: compiled into the fuzzers by Tools/fuzz/run (the HTTP parser target parses
// `Authorization` headers with it).

/// The HTTP `Authorization: Basic ...` header (RFC 7617), UTF-8 credentials. Shared by the
/// WebSocket client and server and by `PeerSyncAuth`'s Basic authenticators.
public enum BasicAuthorization {
    /// The longest header value ``parse(_:)`` accepts, in UTF-8 bytes.
    public static let maxHeaderValueLength = 8192

    /// `Basic <base64(username:password)>`.
    public static func headerValue(username: String, password: String) -> String {
        "Basic " + Base64.encode(Array("\(username):\(password)".utf8))
    }

    /// Parses a header value. Tolerant where RFC 7617 clients differ: the scheme is
    /// case-insensitive, spaces and tabs around the value and the credentials are ignored,
    /// and base64 padding is optional. Returns `nil` (never traps) for another scheme, an
    /// empty or space-containing token, invalid or non-canonical base64, non-UTF-8 text, a
    /// missing `:` or a value longer than ``maxHeaderValueLength``. The user name ends at
    /// the first `:` (it cannot contain one); the password may contain `:`.
    public static func parse(_ headerValue: String) -> (username: String, password: String)? {
        let bytes = Array(headerValue.utf8)
        guard bytes.count <= maxHeaderValueLength else { return nil }
        let value = trimmingOWS(bytes[...])
        let scheme = Array("basic ".utf8)
        guard value.count > scheme.count,
              zip(value.prefix(scheme.count), scheme).allSatisfy({ asciiLowercased($0) == $1 }) else { return nil }
        var token = Array(trimmingOWS(value.dropFirst(scheme.count)))
        guard !token.isEmpty, !token.contains(where: isOWS) else { return nil }
        switch token.count % 4 {
        case 0: break
        case 1: return nil
        case let remainder: token += Array(repeating: UInt8(ascii: "="), count: 4 - remainder)
        }
        guard let decoded = Base64.decode(String(decoding: token, as: UTF8.self)),
              let text = String(validating: decoded, as: UTF8.self),
              let colon = text.firstIndex(of: ":") else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    private static func isOWS(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
    }

    private static func trimmingOWS(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, isOWS(first) { slice.removeFirst() }
        while let last = slice.last, isOWS(last) { slice.removeLast() }
        return slice
    }
}
