// Pure stdlib: compiled into the fuzzers by Tools/fuzz/run.

/// RFC 4648 Base64 (standard alphabet, with padding), as used by `Sec-WebSocket-Key`,
/// `Sec-WebSocket-Accept` and `Authorization: Basic`. Pure stdlib (the fuzzers compile it).
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Encodes `bytes`, padded with `=` to a multiple of 4 characters.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
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

    /// Decodes canonical padded Base64; returns nil for any other input (wrong length,
    /// characters outside the alphabet, whitespace, bits set in the padding).
    public static func decode(_ text: String) -> [UInt8]? {
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
