#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

/// The 3-bit type field of a BLIP frame.
public enum BLIPMessageType: UInt8, Sendable {
    /// A request (MSG).
    case request = 0
    /// A successful response (RPY).
    case response = 1
    /// An error response (ERR).
    case error = 2
    /// Flow-control acknowledgement of an incoming request's bytes (ACKMSG).
    case ackRequest = 4
    /// Flow-control acknowledgement of an incoming response's bytes (ACKRPY).
    case ackResponse = 5

    var isAck: Bool { self == .ackRequest || self == .ackResponse }
}

/// Frame flag bits above the type field.
public struct BLIPFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// The body is deflate-compressed (set by the sender; the receiver inflates).
    public static let compressed = BLIPFlags(rawValue: 0x08)
    /// The message's frames are sent ahead of non-urgent ones.
    public static let urgent = BLIPFlags(rawValue: 0x10)
    /// The sender of a request wants no response.
    public static let noReply = BLIPFlags(rawValue: 0x20)
    /// More frames of this message follow (framing only).
    public static let moreComing = BLIPFlags(rawValue: 0x40)
    static let typeMask: UInt8 = 0x07
}

/// Ordered string properties of a BLIP message (order is kept as sent; lookups take the
/// first match).
public struct BLIPProperties: Sendable, Hashable, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral, Sequence {
    /// Every property in order, duplicates included.
    public private(set) var pairs: [(key: String, value: String)]

    /// No properties.
    public init() { pairs = [] }
    /// These properties, in this order (duplicates kept).
    public init(_ pairs: [(String, String)]) { self.pairs = pairs.map { (key: $0.0, value: $0.1) } }
    /// Keeps the literal's order.
    public init(dictionaryLiteral elements: (String, String)...) { self.init(elements) }
    public init(arrayLiteral elements: (String, String)...) { self.init(elements) }

    /// The value of the first property named `key`. Setting replaces that first one's value (or
    /// appends the property); setting nil removes it.
    public subscript(key: String) -> String? {
        get { pairs.first { $0.key == key }?.value }
        set {
            if let i = pairs.firstIndex(where: { $0.key == key }) {
                if let newValue { pairs[i].value = newValue } else { pairs.remove(at: i) }
            } else if let newValue {
                pairs.append((key: key, value: newValue))
            }
        }
    }

    /// A boolean property as LiteCore reads it: `true`/`yes` (any case) or a non-zero integer.
    public func bool(_ key: String) -> Bool {
        guard let v = self[key] else { return false }
        if let i = Int(v) { return i != 0 }
        return v.lowercased() == "true" || v.lowercased() == "yes"
    }

    /// An integer property, or nil when absent or not an integer.
    public func int(_ key: String) -> Int? { self[key].flatMap { Int($0) } }

    public func makeIterator() -> IndexingIterator<[(key: String, value: String)]> { pairs.makeIterator() }

    public static func == (a: BLIPProperties, b: BLIPProperties) -> Bool {
        a.pairs.elementsEqual(b.pairs) { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        for (k, v) in pairs { hasher.combine(k); hasher.combine(v) }
    }

    /// Throws `PeerSyncError.Code.invalidArgument` when a key or value contains NUL: NUL
    /// separates properties on the wire, so such a message would reach the peer malformed
    /// (an odd number of strings, or shifted pairs). Every send checks this first.
    public func checkSendable() throws(PeerSyncError) {
        for (k, v) in pairs where k.utf8.contains(0) || v.utf8.contains(0) {
            let which = k.utf8.contains(0) ? "name" : "value"
            throw PeerSyncError(.invalidArgument, "BLIP property \(which) contains NUL, which the protocol cannot carry",
                                context: ["property": k.split(separator: "\u{0}", omittingEmptySubsequences: false).joined(separator: "\\u{0}")])
        }
    }

    /// `key NUL value NUL ...`
    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        for (k, v) in pairs {
            out.append(contentsOf: k.utf8); out.append(0)
            out.append(contentsOf: v.utf8); out.append(0)
        }
        return out
    }

    /// Parses `key NUL value NUL ...`; the bytes must end with NUL and hold an even number of them.
    static func decode(_ bytes: ArraySlice<UInt8>) throws(PeerSyncError) -> BLIPProperties {
        if bytes.isEmpty { return BLIPProperties() }
        guard bytes.last == 0 else {
            throw PeerSyncError(.protocolError, "message properties do not end with NUL")
        }
        // One pass over the bytes, no array of slices; each string is made from its bytes
        // directly (`split` plus `String(validating:)` on array slices, which ran generically,
        // was ~1 % of a replication's CPU: every message is decoded).
        let strings: [String]? = bytes.withUnsafeBufferPointer { buffer in
            var strings: [String] = []
            var start = 0
            for i in 0..<buffer.count where buffer[i] == 0 {
                guard let string = Self.validUTF8(UnsafeBufferPointer(rebasing: buffer[start..<i])) else { return nil }
                strings.append(string)
                start = i + 1
            }
            return strings
        }
        // Checked in this order before too: the count, then the encoding.
        guard bytes.count(where: { $0 == 0 }) % 2 == 0 else {
            throw PeerSyncError(.protocolError, "message properties have an odd number of strings")
        }
        guard let strings else {
            throw PeerSyncError(.protocolError, "message properties are not valid UTF-8")
        }
        var result = BLIPProperties()
        result.pairs.reserveCapacity(strings.count / 2)
        var i = 0
        while i < strings.count {
            result.pairs.append((key: strings[i], value: strings[i + 1]))
            i += 2
        }
        return result
    }

    /// The string of `bytes`, or nil when they are not valid UTF-8. `String(decoding:)`
    /// replaces invalid sequences with U+FFFD, so its result has the same bytes exactly when
    /// the input was valid.
    private static func validUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var string = String(decoding: bytes, as: UTF8.self)
        let valid = string.withUTF8 { $0.elementsEqual(bytes) }
        return valid ? string : nil
    }
}

/// A complete BLIP message: a request, a response or an error response.
public struct BLIPMessage: Sendable, Hashable {
    /// Request, response or error response.
    public var type: BLIPMessageType
    /// Request number (for responses: the number of the request answered). Assigned by the
    /// connection when a request is sent.
    public var number: UInt64
    /// `.urgent`, `.compressed`, `.noReply` (`.moreComing` is a framing detail, never set here).
    public var flags: BLIPFlags
    /// The properties, in the order sent.
    public var properties: BLIPProperties
    /// The body, uncompressed.
    public var body: [UInt8]

    /// A message with these parts (`.moreComing` is dropped from `flags`). Defaults: a request
    /// with number 0 (the connection assigns it), no flags, properties or body.
    public init(type: BLIPMessageType = .request, number: UInt64 = 0, flags: BLIPFlags = [],
                properties: BLIPProperties = [:], body: [UInt8] = []) {
        self.type = type
        self.number = number
        self.flags = flags.subtracting(.moreComing)
        self.properties = properties
        self.body = body
    }

    /// A request with a `Profile` property (written first, as LiteCore does).
    public static func request(_ profile: String, properties: BLIPProperties = [:], body: [UInt8] = [],
                               flags: BLIPFlags = []) -> BLIPMessage {
        var props = BLIPProperties([("Profile", profile)])
        for (k, v) in properties where k != "Profile" { props[k] = v }
        return BLIPMessage(type: .request, flags: flags, properties: props, body: body)
    }

    /// An error response: `Error-Domain`, `Error-Code`, message in the body.
    public static func error(domain: String, code: Int, message: String) -> BLIPMessage {
        BLIPMessage(type: .error, properties: [("Error-Domain", domain), ("Error-Code", String(code))],
                    body: Array(message.utf8))
    }

    /// The `Profile` property of a request.
    public var profile: String? { properties["Profile"] }
    /// Whether this is an error response.
    public var isError: Bool { type == .error }
    /// `Error-Domain` of an error response (default `BLIP`).
    public var errorDomain: String? { type == .error ? (properties["Error-Domain"] ?? "BLIP") : nil }
    /// `Error-Code` of an error response (0 if absent); nil for other messages.
    public var errorCode: Int? { type == .error ? (properties.int("Error-Code") ?? 0) : nil }
    /// The body as UTF-8 text (invalid bytes replaced).
    public var bodyString: String { String(decoding: body, as: UTF8.self) }

    /// `varint(properties length) ‖ properties ‖ body`: the bytes that get framed.
    func encodedContent() -> [UInt8] {
        let props = properties.encoded()
        var out: [UInt8] = []
        out.reserveCapacity(props.count + body.count + 4)
        Varint.append(UInt64(props.count), to: &out)
        out.append(contentsOf: props)
        out.append(contentsOf: body)
        return out
    }
}
