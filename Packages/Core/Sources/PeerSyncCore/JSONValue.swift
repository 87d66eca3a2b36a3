/// A JSON value. Objects keep no key order; ``canonicalData`` sorts keys, so equal values
/// always serialize to equal bytes (revision digests depend on it).
///
/// Integers that fit in `Int64` and are written without fraction or exponent stay integers
/// (`.int`), everything else numeric is `.double`; `.int(1)` and `.double(1)` compare equal
/// (an integer and a double are equal only when they are exactly the same number).
public enum JSONValue: Sendable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number written without fraction or exponent that fits in `Int64`.
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object; its keys have no order (``canonicalData`` sorts them).
    case object([String: JSONValue])
}

extension JSONValue: Hashable {
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.int(a), .int(b)): return a == b
        case let (.double(a), .double(b)): return a == b
        // Exact: `Double(a) == b` rounds `a` (beyond 2^53), which made `.int(2^53 + 1)` equal
        // to `.double(2^53)` and `==` non-transitive, so a delta could drop a changed number.
        case let (.int(a), .double(b)), let (.double(b), .int(a)): return Int64(exactly: b) == a
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let b): hasher.combine(b)
        case .int(let i): hasher.combine(Double(i))
        case .double(let d): hasher.combine(d)
        case .string(let s): hasher.combine(s)
        case .array(let a): hasher.combine(a)
        case .object(let o): hasher.combine(o)
        }
    }
}

/// Literals build values directly: `let v: JSONValue = ["title": "pid \(pid)", "n": 1, "done": false]`.
/// A string literal, interpolated or not, is a `.string`; an integer literal an `.int`; a
/// floating-point literal a `.double`; `nil` is `.null`.
extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral {
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue {
    /// The members if this is an object, else nil.
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    /// The elements if this is an array, else nil.
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    /// The string if this is a string, else nil.
    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    /// The value if this is a Boolean, else nil.
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    /// Whether this is JSON `null`.
    public var isNull: Bool { if case .null = self { return true }; return false }
    /// The value as an integer: `.int`, or a `.double` with no fractional part that fits.
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d): return d.rounded() == d && abs(d) < 9.2e18 ? Int64(d) : nil
        default: return nil
        }
    }
    /// The value as a floating-point number, from `.int` or `.double`.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
    /// `self[key]` for objects, `nil` otherwise.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }
}

// MARK: - Serialization

extension JSONValue {
    /// Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, shortest
    /// round-tripping number form. Used for revision digests and storage.
    public var canonicalData: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(to: &out)
        return out
    }

    /// The value its ``canonicalData`` parses back to, computed without encoding: non-finite
    /// doubles become `.null`, integral doubles within ±9.2e18 become `.int` (the canonical text
    /// writes them as integers), everything else is kept, arrays and objects element by
    /// element. So `canonicalized` has exactly the cases and values of
    /// `JSONValue(parsing: canonicalData)`; what a database stores is that.
    public var canonicalized: JSONValue {
        switch self {
        case .null, .bool, .int, .string: return self
        case .double(let d):
            if !d.isFinite { return .null }
            if d.rounded() == d && abs(d) < 9.2e18 { return .int(Int64(d)) }
            return self
        case .array(let items):
            if !items.contains(where: \.needsCanonicalizing) { return self }
            return .array(items.map(\.canonicalized))
        case .object(let members):
            if !members.values.contains(where: \.needsCanonicalizing) { return self }
            return .object(members.mapValues(\.canonicalized))
        }
    }

    /// Whether ``canonicalized`` differs from `self` in its cases (a double to change inside).
    private var needsCanonicalizing: Bool {
        switch self {
        case .null, .bool, .int, .string: return false
        case .double(let d): return !d.isFinite || (d.rounded() == d && abs(d) < 9.2e18)
        case .array(let items): return items.contains(where: \.needsCanonicalizing)
        case .object(let members): return members.values.contains(where: \.needsCanonicalizing)
        }
    }

    /// Canonical JSON as a `String`.
    public var canonicalString: String { String(decoding: canonicalData, as: UTF8.self) }

    /// Appends the canonical form of `self` to `out`.
    public func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): out.append(contentsOf: String(i).utf8)
        case .double(let d): JSONValue.writeDouble(d, to: &out)
        case .string(let s): JSONValue.writeString(s, to: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            // Sort by UTF-8 bytes (Swift's String < compares by Unicode scalars, which orders
            // the same as UTF-8 bytes for valid strings).
            var first = true
            for key in o.keys.sorted(by: JSONValue.utf8Less) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                o[key]!.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private func writeString(_ s: String, to out: inout [UInt8]) { JSONValue.writeString(s, to: &out) }

    static func utf8Less(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    static func writeDouble(_ d: Double, to out: inout [UInt8]) {
        if !d.isFinite {
            // JSON has no NaN/Infinity; write null rather than invalid text.
            out.append(contentsOf: "null".utf8)
            return
        }
        if d.rounded() == d && abs(d) < 9.2e18 {
            // Integral doubles print as integers, so that equal values (1.0 == 1, and up to the
            // Int64 range, e.g. 1e15 == 1000000000000000) serialize alike.
            out.append(contentsOf: String(Int64(d)).utf8)
            return
        }
        out.append(contentsOf: d.description.utf8)
    }

    static func writeString(_ s: String, to out: inout [UInt8]) {
        // Fast path: nothing to escape (the common case) is one bulk copy.
        var s = s
        let plain = s.withUTF8 { bytes in
            !bytes.contains { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }
        }
        if plain {
            out.append(UInt8(ascii: "\""))
            s.withUTF8 { out.append(contentsOf: $0) }
            out.append(UInt8(ascii: "\""))
            return
        }
        out.append(UInt8(ascii: "\""))
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "\\"))
            case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
            case 0x08: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "f"))
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension JSONValue: CustomStringConvertible {
    public var description: String { canonicalString }
}

// MARK: - Parsing

extension JSONValue {
    /// Limits applied while parsing untrusted JSON.
    public struct ParseOptions: Sendable {
        /// Maximum nesting of arrays and objects (default 256).
        public var maxDepth: Int = 256
        /// Throw ``PeerSyncError/Code/invalidJSON`` for an object with the same key twice
        /// (default false: the last one wins). Keys are compared as Swift strings, i.e. up to
        /// Unicode canonical equivalence — exactly the keys that would otherwise overwrite
        /// each other. Used where users hand in documents (CLI, REST), so that
        /// `{"a":1,"a":2}` is an error rather than silently `{"a":2}`.
        public var rejectsDuplicateKeys: Bool = false
        /// Options with the given limits; the defaults (depth 256, duplicate keys allowed, the last
        /// one wins) are what the parsing initializers use when given no options.
        public init(maxDepth: Int = 256, rejectsDuplicateKeys: Bool = false) {
            self.maxDepth = maxDepth
            self.rejectsDuplicateKeys = rejectsDuplicateKeys
        }
        /// The options for documents from users: duplicate keys are an error.
        public static let strict = ParseOptions(rejectsDuplicateKeys: true)
    }

    /// Parses JSON text (RFC 8259). Throws ``PeerSyncError/Code/invalidJSON`` with the byte
    /// offset of the problem. Duplicate object keys: the last one wins, unless
    /// ``ParseOptions/rejectsDuplicateKeys`` is set.
    public init(parsing bytes: some Collection<UInt8>, options: ParseOptions = ParseOptions()) throws(PeerSyncError) {
        let result: Result<JSONValue, PeerSyncError> = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(buffer: buffer, options: options)
            return Result { () throws(PeerSyncError) in try parser.parseDocument() }
        } ?? {
            let array = Array(bytes)
            return array.withUnsafeBufferPointer { buffer in
                var parser = JSONParser(buffer: buffer, options: options)
                return Result { () throws(PeerSyncError) in try parser.parseDocument() }
            }
        }()
        self = try result.get()
    }

    /// Parses JSON text from a string.
    public init(parsing text: String, options: ParseOptions = ParseOptions()) throws(PeerSyncError) {
        var text = text
        let result: Result<JSONValue, PeerSyncError> = text.withUTF8 { buffer in
            var parser = JSONParser(buffer: buffer, options: options)
            return Result { () throws(PeerSyncError) in try parser.parseDocument() }
        }
        self = try result.get()
    }
}

struct JSONParser {
    let buffer: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    let rejectsDuplicateKeys: Bool
    var index = 0
    var depth = 0

    init(buffer: UnsafeBufferPointer<UInt8>, options: JSONValue.ParseOptions) {
        self.buffer = buffer
        self.maxDepth = options.maxDepth
        self.rejectsDuplicateKeys = options.rejectsDuplicateKeys
    }

    mutating func parseDocument() throws(PeerSyncError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if index != buffer.count { throw error("unexpected text after the JSON value") }
        return value
    }

    func error(_ message: String) -> PeerSyncError {
        PeerSyncError(.invalidJSON, message, context: ["offset": String(index)])
    }

    mutating func skipWhitespace() {
        while index < buffer.count {
            switch buffer[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(PeerSyncError) -> JSONValue {
        guard index < buffer.count else { throw error("unexpected end of input") }
        switch buffer[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("unexpected character")
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(PeerSyncError) {
        let count = literal.utf8CodeUnitCount
        guard buffer.count - index >= count else { throw error("unexpected end of input") }
        let bytes = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for i in 0..<count where buffer[index + i] != bytes[i] {
            throw error("invalid literal")
        }
        index += count
    }

    mutating func enter() throws(PeerSyncError) {
        depth += 1
        if depth > maxDepth { throw error("nesting deeper than \(maxDepth)") }
    }

    mutating func parseObject() throws(PeerSyncError) -> JSONValue {
        try enter()
        index += 1
        var object: [String: JSONValue] = [:]
        skipWhitespace()
        if index < buffer.count && buffer[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < buffer.count, buffer[index] == UInt8(ascii: "\"") else {
                throw error("expected a string key")
            }
            let keyOffset = index
            let key = try parseString()
            if rejectsDuplicateKeys && object[key] != nil {
                throw PeerSyncError(.invalidJSON, "duplicate key \"\(key)\" in a JSON object",
                                    context: ["offset": String(keyOffset)])
            }
            skipWhitespace()
            guard index < buffer.count, buffer[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            object[key] = try parseValue()
            skipWhitespace()
            guard index < buffer.count else { throw error("unexpected end of input") }
            if buffer[index] == UInt8(ascii: ",") { index += 1; continue }
            if buffer[index] == UInt8(ascii: "}") { index += 1; break }
            throw error("expected ',' or '}'")
        }
        depth -= 1
        return .object(object)
    }

    mutating func parseArray() throws(PeerSyncError) -> JSONValue {
        try enter()
        index += 1
        var array: [JSONValue] = []
        skipWhitespace()
        if index < buffer.count && buffer[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(array)
        }
        while true {
            skipWhitespace()
            array.append(try parseValue())
            skipWhitespace()
            guard index < buffer.count else { throw error("unexpected end of input") }
            if buffer[index] == UInt8(ascii: ",") { index += 1; continue }
            if buffer[index] == UInt8(ascii: "]") { index += 1; break }
            throw error("expected ',' or ']'")
        }
        depth -= 1
        return .array(array)
    }

    mutating func parseString() throws(PeerSyncError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes.
        while index < buffer.count {
            let byte = buffer[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: buffer[start..<index])
                index += 1
                guard let s = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                return s
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            index += 1
        }
        var bytes = Array(buffer[start..<index])
        while true {
            guard index < buffer.count else { throw error("unterminated string") }
            let byte = buffer[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let s = String(validating: bytes, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                return s
            case UInt8(ascii: "\\"):
                guard index < buffer.count else { throw error("unterminated escape") }
                let escaped = buffer[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""): bytes.append(0x22)
                case UInt8(ascii: "\\"): bytes.append(0x5C)
                case UInt8(ascii: "/"): bytes.append(0x2F)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard buffer.count - index >= 6, buffer[index] == UInt8(ascii: "\\"),
                              buffer[index + 1] == UInt8(ascii: "u") else {
                            throw error("unpaired surrogate")
                        }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid surrogate pair") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("unpaired surrogate")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    bytes.append(contentsOf: String(Character(unicode)).utf8)
                default:
                    throw error("invalid escape")
                }
            case 0..<0x20:
                throw error("control character in string")
            default:
                bytes.append(byte)
            }
        }
    }

    mutating func parseHex4() throws(PeerSyncError) -> UInt32 {
        guard buffer.count - index >= 4 else { throw error("truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let c = buffer[index]
            index += 1
            let digit: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw error("invalid hex digit in \\u escape")
            }
            value = value << 4 | digit
        }
        return value
    }

    mutating func parseNumber() throws(PeerSyncError) -> JSONValue {
        let start = index
        var isInteger = true
        if buffer[index] == UInt8(ascii: "-") { index += 1 }
        guard index < buffer.count else { throw error("truncated number") }
        if buffer[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(buffer[index]) {
            while index < buffer.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(buffer[index]) { index += 1 }
        } else {
            throw error("invalid number")
        }
        if index < buffer.count, buffer[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digits = index
            while index < buffer.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(buffer[index]) { index += 1 }
            if index == digits { throw error("invalid number: no digits after '.'") }
        }
        if index < buffer.count, buffer[index] == UInt8(ascii: "e") || buffer[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < buffer.count, buffer[index] == UInt8(ascii: "+") || buffer[index] == UInt8(ascii: "-") { index += 1 }
            let digits = index
            while index < buffer.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(buffer[index]) { index += 1 }
            if index == digits { throw error("invalid number: no exponent digits") }
        }
        // An integer of at most 18 digits cannot overflow Int64: summed here, without the
        // String and the generic parse the other numbers go through (the common case of a
        // stored document's numbers).
        let negative = buffer[start] == UInt8(ascii: "-")
        let firstDigit = negative ? start + 1 : start
        if isInteger && index - firstDigit <= 18 {
            var value: Int64 = 0
            for i in firstDigit..<index { value = value &* 10 &+ Int64(buffer[i] &- UInt8(ascii: "0")) }
            return .int(negative ? -value : value)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: buffer[start..<index]), as: UTF8.self)
        if isInteger, let i = Int64(text) { return .int(i) }
        guard let d = Double(text), d.isFinite else { throw error("number out of range") }
        return .double(d)
    }
}
