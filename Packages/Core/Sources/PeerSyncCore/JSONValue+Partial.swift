// Reading only some properties of a JSON object: what a query needs from a stored document
// body (the properties its expressions read), without building the others.

extension JSONValue {
    /// The top-level properties named in `keys` of the JSON object `bytes`, parsed; every
    /// other property's value is skipped over without being built (its brackets and string
    /// quotes are matched, its contents not validated). A key absent from the object is absent
    /// from the result; with duplicate keys the last one wins (as `init(parsing:options:)`).
    /// Keys compare as Swift strings do (canonical equivalence), so the result is the full
    /// parse's dictionary restricted to `keys`.
    ///
    /// Meant for bodies that were validated when stored (a database's canonical JSON): damage
    /// inside a skipped value may go unnoticed. Errors: ``PeerSyncError/Code/invalidJSON``
    /// (with the byte offset) when `bytes` is not an object or a parsed part is invalid.
    public static func objectProperties(parsing bytes: [UInt8], keys: Set<String>) throws(PeerSyncError) -> [String: JSONValue] {
        let result: Swift.Result<[String: JSONValue], PeerSyncError> = bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(buffer: buffer, options: ParseOptions())
            return Swift.Result { () throws(PeerSyncError) in try parser.parseObject(keeping: keys) }
        }
        return try result.get()
    }
}

extension JSONParser {
    /// The whole input is one object; returns its properties named in `keys`.
    mutating func parseObject(keeping keys: Set<String>) throws(PeerSyncError) -> [String: JSONValue] {
        // When every wanted key is ASCII, a stored key without escapes or non-ASCII bytes is
        // compared as bytes, without building a String (an ASCII string is canonically
        // equivalent only to itself); otherwise keys are decoded and compared as Strings.
        let allASCII = keys.allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } }
        var out: [String: JSONValue] = Dictionary(minimumCapacity: keys.count)
        skipWhitespace()
        guard index < buffer.count, buffer[index] == UInt8(ascii: "{") else { throw error("expected a JSON object") }
        index += 1
        skipWhitespace()
        if index < buffer.count && buffer[index] == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                skipWhitespace()
                guard index < buffer.count, buffer[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
                // A key without escapes or non-ASCII bytes is compared as bytes; any other is
                // decoded and looked up as a String.
                let start = index + 1
                var end = start
                var plain = true
                while end < buffer.count, buffer[end] != UInt8(ascii: "\"") {
                    if buffer[end] == UInt8(ascii: "\\") || buffer[end] >= 0x80 { plain = false; break }
                    end += 1
                }
                var wanted: String?
                if plain && allASCII {
                    guard end < buffer.count else { throw error("unterminated string") }
                    let key = UnsafeBufferPointer(rebasing: buffer[start..<end])
                    wanted = keys.first { $0.utf8.elementsEqual(key) }
                    index = end + 1
                } else {
                    let key = try parseString()
                    if keys.contains(key) { wanted = key }
                }
                skipWhitespace()
                guard index < buffer.count, buffer[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                if let wanted {
                    out[wanted] = try parseValue()
                } else {
                    try skipValue()
                }
                skipWhitespace()
                guard index < buffer.count else { throw error("unexpected end of input") }
                if buffer[index] == UInt8(ascii: ",") { index += 1; continue }
                if buffer[index] == UInt8(ascii: "}") { index += 1; break }
                throw error("expected ',' or '}'")
            }
        }
        skipWhitespace()
        if index != buffer.count { throw error("unexpected text after the JSON value") }
        return out
    }

    /// Moves past one value without building it: strings to their closing quote (escapes
    /// skipped), objects and arrays to their matching bracket, scalars to the next delimiter.
    mutating func skipValue() throws(PeerSyncError) {
        var depth = 0
        while index < buffer.count {
            switch buffer[index] {
            case UInt8(ascii: "\""):
                index += 1
                while true {
                    guard index < buffer.count else { throw error("unterminated string") }
                    let byte = buffer[index]
                    index += byte == UInt8(ascii: "\\") ? 2 : 1
                    if byte == UInt8(ascii: "\"") { break }
                }
                if depth == 0 { return }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                if depth > maxDepth { throw error("nesting deeper than \(maxDepth)") }
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if depth == 0 { return }   // a scalar ended at its enclosing object's end
                depth -= 1
                index += 1
                if depth == 0 { return }
            case UInt8(ascii: ","), 0x20, 0x0A, 0x0D, 0x09:
                if depth == 0 { return }   // a scalar ended
                index += 1
            default:
                index += 1
            }
        }
        throw error("unexpected end of input")
    }
}
