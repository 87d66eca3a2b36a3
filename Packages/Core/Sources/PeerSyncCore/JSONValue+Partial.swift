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
        try objectProperties(parsing: bytes, selecting: PropertySelection(keys))
    }

    /// ``objectProperties(parsing:keys:)`` with the keys prepared once
    /// (``PropertySelection``): a reader parsing many bodies for the same keys (a query's
    /// scan) does not examine the key set again for each one. Same result, same errors.
    public static func objectProperties(parsing bytes: [UInt8], selecting selection: PropertySelection) throws(PeerSyncError) -> [String: JSONValue] {
        var properties: [String: JSONValue] = Dictionary(minimumCapacity: selection.names.count)
        try objectProperties(parsing: bytes, selecting: selection, into: &properties)
        return properties
    }

    /// ``objectProperties(parsing:selecting:)`` into `properties`, which is emptied first
    /// with its storage kept: a reader parsing body after body into one dictionary, holding
    /// no other reference to it in between, allocates no dictionary per body. After an error,
    /// `properties` holds some of the object's properties; use it only on success.
    ///
    /// `uniqueKeys`: the caller knows the object holds no key twice (no two keys equal as
    /// Swift strings: the canonical JSON a database stored, made from a dictionary). Parsing
    /// then stops as soon as every selected key is found, and the text after it is not read
    /// (not checked either). Default false: the whole object is read, the last duplicate wins.
    public static func objectProperties(parsing bytes: [UInt8], selecting selection: PropertySelection,
                                        into properties: inout [String: JSONValue],
                                        uniqueKeys: Bool = false) throws(PeerSyncError) {
        properties.removeAll(keepingCapacity: true)
        let error = bytes.withUnsafeBufferPointer { buffer -> PeerSyncError? in
            var parser = JSONParser(buffer: buffer, options: ParseOptions())
            do throws(PeerSyncError) {
                try parser.parseObject(keeping: selection, into: &properties, stoppingWhenAllFound: uniqueKeys)
                return nil
            } catch {
                return error
            }
        }
        if let error { throw error }
    }

    /// The top-level keys a reader wants from JSON objects, prepared for
    /// ``objectProperties(parsing:selecting:)``: when every key is ASCII, their UTF-8 bytes
    /// side by side, so a stored key is matched by comparing bytes, without building a String
    /// or walking a `Set`. Immutable and thread-safe.
    public struct PropertySelection: Sendable, Hashable {
        /// The keys, as given.
        public let keys: Set<String>
        /// Whether every key is ASCII (then ``bytes``/``ends``/``names`` hold them).
        let allASCII: Bool
        /// The keys' UTF-8 bytes one after another; key `i` ends at `ends[i]`.
        let bytes: [UInt8]
        let ends: [Int]
        let names: [String]

        /// The selection of `keys`.
        public init(_ keys: Set<String>) {
            self.keys = keys
            let names = keys.sorted()
            self.allASCII = names.allSatisfy { $0.utf8.allSatisfy { $0 < 0x80 } }
            var bytes: [UInt8] = [], ends: [Int] = []
            for name in names {
                bytes.append(contentsOf: name.utf8)
                ends.append(bytes.count)
            }
            self.bytes = bytes
            self.ends = ends
            self.names = names
        }

        /// Selections are equal when their keys are (the prepared bytes follow from them).
        public static func == (a: PropertySelection, b: PropertySelection) -> Bool { a.keys == b.keys }
        /// Hashes the keys, as `==` compares them.
        public func hash(into hasher: inout Hasher) { hasher.combine(keys) }

        /// The index in ``names`` of the key whose ASCII bytes are `key`, or nil.
        @inline(__always)
        func index(ofASCII key: UnsafeBufferPointer<UInt8>) -> Int? {
            bytes.withUnsafeBufferPointer { all -> Int? in
                var start = 0
                for (i, end) in ends.enumerated() {
                    defer { start = end }
                    guard end - start == key.count else { continue }
                    var same = true
                    var j = 0
                    while j < key.count {
                        if all[start + j] != key[j] { same = false; break }
                        j += 1
                    }
                    if same { return i }
                }
                return nil
            }
        }
    }
}

extension JSONParser {
    /// The whole input is one object; adds its properties named in `selection` to `out`
    /// (empty at the call). `stoppingWhenAllFound`: returns once `out` holds every selected
    /// key, the rest unread (for objects known to hold each key once).
    mutating func parseObject(keeping selection: JSONValue.PropertySelection,
                              into out: inout [String: JSONValue],
                              stoppingWhenAllFound: Bool = false) throws(PeerSyncError) {
        let stopAt = stoppingWhenAllFound ? selection.keys.count : -1
        // When every wanted key is ASCII, a stored key without escapes or non-ASCII bytes is
        // compared as bytes, without building a String (an ASCII string is canonically
        // equivalent only to itself); otherwise keys are decoded and compared as Strings.
        let allASCII = selection.allASCII
        skipWhitespace()
        guard index < buffer.count, buffer[index] == UInt8(ascii: "{") else { throw error("expected a JSON object") }
        index += 1
        if stopAt == 0 { return }
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
                    wanted = selection.index(ofASCII: key).map { selection.names[$0] }
                    index = end + 1
                } else {
                    let key = try parseString()
                    if selection.keys.contains(key) { wanted = key }
                }
                skipWhitespace()
                guard index < buffer.count, buffer[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                if let wanted {
                    out[wanted] = try parseValue()
                    if out.count == stopAt { return }
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
