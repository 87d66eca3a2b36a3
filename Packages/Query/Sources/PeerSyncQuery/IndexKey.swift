import PeerSyncCore

/// The order-preserving encoding of index entries (pure: no database).
///
/// A value index stores one entry per live document: its key is the encoding of the indexed
/// values (one per index expression) followed by ``separator`` and the document ID. Storage
/// keys are strings compared by their UTF-8 bytes (the `Storage` contract), so the encoding is
/// built so that byte order is ``Collation`` order:
///
/// - each value starts with a type tag that orders as the collation's types:
///   MISSING `02` < null `03` < false `04` < true `05` < number `06` < string `07` <
///   array `08` < object `09`;
/// - a number: 16 hex digits of its value as a `Double` with the sign bit flipped (all bits
///   flipped for negatives), then 4 hex digits of how far an `Int64` lies from that double
///   (non-zero only beyond 2^53, where doubles cannot hold every integer), so `1` and `1.0`
///   encode alike and integers keep their exact order;
/// - a string: its UTF-8 bytes with `00` written `01 02` and `01` written `01 03`, then `01 01`:
///   byte order, and a string sorts before every longer string it starts;
/// - an array: its elements' encodings, then `01`;
/// - an object: for each key in UTF-8 order, `02`, the key as a string, the value; then `01`.
///
/// Every value's encoding is self-delimiting and none is a prefix of another's, and every
/// byte written is below `0x0A` except inside numbers (hex digits) and strings (whose bytes
/// follow their content), so: all entries whose first values equal `v…` lie in
/// `[encode(v…), encode(v…) + "\n")` (``prefixRange(_:)``), and ties between equal values
/// sort by document ID, the order of a collection scan. No key holds a NUL byte, and every
/// key is valid UTF-8.
enum IndexKey {
    /// Between the values and the document ID.
    static let separator: UInt8 = 0x01
    static let end: UInt8 = 0x01
    static let objectKeyMark: UInt8 = 0x02

    enum Tag: UInt8 {
        case missing = 0x02, null = 0x03, `false` = 0x04, `true` = 0x05
        case number = 0x06, string = 0x07, array = 0x08, object = 0x09
    }

    /// The byte after every possible continuation of a complete value (see the type comment).
    static let afterValue: UInt8 = 0x0A

    /// The key of the entry of document `id` whose indexed values are `values`.
    static func entryKey(_ values: [JSONValue?], documentID id: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24 * values.count + 1 + id.utf8.count)
        for value in values { append(value, to: &bytes) }
        return entryKey(encodedValues: &bytes, documentID: id)
    }

    /// The key of the entry of document `id` whose indexed values' encoding is in `bytes`
    /// (``append(_:to:)`` of each); `bytes` is left holding the key's bytes.
    static func entryKey(encodedValues bytes: inout [UInt8], documentID id: String) -> String {
        bytes.append(separator)
        bytes.append(contentsOf: id.utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The encoding of `values` (a prefix of entry keys).
    static func encode(_ values: [JSONValue?]) -> [UInt8] {
        var bytes: [UInt8] = []
        for value in values { append(value, to: &bytes) }
        return bytes
    }

    static func string(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    /// Appends the encoding of one value.
    static func append(_ value: JSONValue?, to bytes: inout [UInt8]) {
        guard let value else { bytes.append(Tag.missing.rawValue); return }
        switch value {
        case .null: bytes.append(Tag.null.rawValue)
        case .bool(let b): bytes.append(b ? Tag.true.rawValue : Tag.false.rawValue)
        case .int(let i):
            bytes.append(Tag.number.rawValue)
            appendNumber(double: Double(i), offset: intOffset(i), to: &bytes)
        case .double(let d):
            bytes.append(Tag.number.rawValue)
            appendNumber(double: d == 0 ? 0 : d, offset: 0, to: &bytes)   // -0.0 == 0.0
        case .string(let s):
            bytes.append(Tag.string.rawValue)
            appendString(s, to: &bytes)
        case .array(let items):
            bytes.append(Tag.array.rawValue)
            for item in items { append(item, to: &bytes) }
            bytes.append(end)
        case .object(let dict):
            bytes.append(Tag.object.rawValue)
            for key in dict.keys.sorted(by: { Collation.compareStrings($0, $1) < 0 }) {
                bytes.append(objectKeyMark)
                appendString(key, to: &bytes)
                append(dict[key], to: &bytes)
            }
            bytes.append(end)
        }
    }

    /// A string's escaped bytes and its terminator.
    static func appendString(_ s: String, to bytes: inout [UInt8]) {
        appendEscaped(s.utf8, to: &bytes)
        bytes.append(0x01)
        bytes.append(0x01)
    }

    /// A string's escaped bytes without the terminator: the common prefix of the encodings of
    /// every string that starts with `s`.
    static func appendEscaped(_ utf8: some Sequence<UInt8>, to bytes: inout [UInt8]) {
        for byte in utf8 {
            switch byte {
            case 0x00: bytes.append(0x01); bytes.append(0x02)
            case 0x01: bytes.append(0x01); bytes.append(0x03)
            default: bytes.append(byte)
            }
        }
    }

    /// The lowercase hex digit of `d` (0...15), computed: a table in a global costs a lazy
    /// initialization check per digit on the upkeep path of every save.
    @inline(__always)
    private static func hexDigit(_ d: UInt64) -> UInt8 {
        let d = UInt8(truncatingIfNeeded: d)
        return d < 10 ? 0x30 &+ d : 0x57 &+ d   // "0"…"9", "a"…"f"
    }

    private static func appendNumber(double: Double, offset: Int64, to bytes: inout [UInt8]) {
        let bits = double.bitPattern
        let sortable = double.sign == .minus ? ~bits : bits | (1 << 63)
        let biased = UInt64(UInt16(clamping: Int(offset) + 0x8000))
        // The 20 digits written into a buffer, then appended at once (not 20 appends, each
        // checking the array's capacity and uniqueness: on the upkeep path of every save).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            for i in 0..<16 { digits[i] = hexDigit(sortable >> UInt64(60 - 4 * i) & 0xF) }
            for i in 0..<4 { digits[16 + i] = hexDigit(biased >> UInt64(12 - 4 * i) & 0xF) }
            bytes.append(contentsOf: digits)
        }
    }

    /// `i` minus the integer value of `Double(i)` (0 up to 2^53; at most ±1024 beyond).
    static func intOffset(_ i: Int64) -> Int64 {
        let d = Double(i)
        if let exact = Int64(exactly: d) { return i - exact }
        // Double(i) rounded up to 2^63, which Int64 cannot hold: i - 2^63 = (i - (2^63 - 2048)) - 2048.
        return (i - (Int64.max - 2047)) - 2048
    }

    // MARK: Ranges

    /// Every entry whose leading values are `values`.
    static func prefixRange(_ values: [JSONValue?]) -> (lower: String, upper: String) {
        let bytes = encode(values)
        return (string(bytes), string(bytes + [afterValue]))
    }

    /// The smallest key of any entry whose value after `prefix` has type tag `tag`, and the
    /// key after every such entry: `[prefix + tag, prefix + (tag + 1))`.
    static func typeRange(_ prefix: [UInt8], _ tag: Tag) -> (lower: String, upper: String) {
        (string(prefix + [tag.rawValue]), string(prefix + [tag.rawValue + 1]))
    }

    /// The range of entries whose value after `prefix` is a string starting with `start`
    /// (for `LIKE 'start%'`).
    static func stringPrefixRange(_ prefix: [UInt8], _ start: String) -> (lower: String, upper: String) {
        var scalars = Array(start.unicodeScalars)
        let lower = prefix + [Tag.string.rawValue] + escaped(start)
        // The upper bound: the same text with its last scalar incremented (byte order of UTF-8
        // is scalar order), dropping trailing U+10FFFF; no scalar left: every string.
        while let last = scalars.popLast() {
            var next = last.value + 1
            if next == 0xD800 { next = 0xE000 }
            if let scalar = Unicode.Scalar(next) {
                scalars.append(scalar)
                var text = String.UnicodeScalarView()
                text.append(contentsOf: scalars)
                return (string(lower), string(prefix + [Tag.string.rawValue] + escaped(String(text))))
            }
        }
        return (string(lower), string(prefix + [Tag.string.rawValue + 1]))
    }

    private static func escaped(_ s: String) -> [UInt8] {
        var bytes: [UInt8] = []
        appendEscaped(s.utf8, to: &bytes)
        return bytes
    }

    // MARK: Decoding

    /// The byte length of the first `count` values of `key` (nil for a key this encoding did
    /// not write).
    static func valuesLength(_ bytes: [UInt8], count: Int) -> Int? {
        var i = 0
        for _ in 0..<count {
            guard let next = skipValue(bytes, i) else { return nil }
            i = next
        }
        return i
    }

    /// The document ID at the end of an entry key whose index has `count` expressions.
    static func documentID(_ key: String, count: Int) -> String? {
        let bytes = Array(key.utf8)
        guard let length = valuesLength(bytes, count: count), length < bytes.count, bytes[length] == separator else { return nil }
        return String(decoding: bytes[(length + 1)...], as: UTF8.self)
    }

    static func skipValue(_ b: [UInt8], _ start: Int) -> Int? {
        guard start < b.count, let tag = Tag(rawValue: b[start]) else { return nil }
        var i = start + 1
        switch tag {
        case .missing, .null, .false, .true: return i
        case .number: return i + 20 <= b.count ? i + 20 : nil
        case .string: return skipString(b, i)
        case .array:
            while i < b.count, b[i] != end {
                guard let next = skipValue(b, i) else { return nil }
                i = next
            }
            return i < b.count ? i + 1 : nil
        case .object:
            while i < b.count, b[i] == objectKeyMark {
                guard let afterKey = skipString(b, i + 1), let next = skipValue(b, afterKey) else { return nil }
                i = next
            }
            return i < b.count && b[i] == end ? i + 1 : nil
        }
    }

    private static func skipString(_ b: [UInt8], _ start: Int) -> Int? {
        var i = start
        while i < b.count {
            if b[i] == 0x01 {
                guard i + 1 < b.count else { return nil }
                if b[i + 1] == 0x01 { return i + 2 }
                i += 2
            } else {
                i += 1
            }
        }
        return nil
    }
}

// MARK: Reading values back (covering index reads)

extension IndexKey {
    /// The values of the entry key `bytes` (of an index of `count` expressions) at `positions`
    /// (ascending indexes of the index's expressions), as a stored body reads them — or nil when
    /// the key cannot give them exactly, and the caller reads the document instead.
    ///
    /// Only values taken from a stored (canonical) body decode: in canonical JSON an integral
    /// number within ±9.2e18 is written as an integer, so reads back as `.int`, which is what an
    /// integral number of the key decodes to. Not decoded (nil): an object (its keys are Swift
    /// strings, which may merge canonically equivalent keys), an integral number of magnitude
    /// ≥ 9.2e18 that the key does not mark as an integer (the body could hold it either as an
    /// integer or as a double written with an exponent), MISSING inside an array, a key this
    /// encoding did not write.
    static func decodeStoredValues(_ bytes: [UInt8], count: Int, positions: [Int]) -> [JSONValue?]? {
        var values: [JSONValue?] = []
        values.reserveCapacity(positions.count)
        var i = 0
        var next = 0
        for position in 0..<count {
            if next < positions.count, positions[next] == position {
                guard let (value, end) = decodeValue(bytes, i) else { return nil }
                values.append(value)
                i = end
                next += 1
            } else {
                guard let end = skipValue(bytes, i) else { return nil }
                i = end
            }
        }
        guard next == positions.count, i < bytes.count, bytes[i] == separator else { return nil }
        return values
    }

    /// One value starting at `start` (nil value: MISSING) and the index after it.
    private static func decodeValue(_ b: [UInt8], _ start: Int) -> (JSONValue?, Int)? {
        guard start < b.count, let tag = Tag(rawValue: b[start]) else { return nil }
        let i = start + 1
        switch tag {
        case .missing: return (nil, i)
        case .null: return (.null, i)
        case .false: return (.bool(false), i)
        case .true: return (.bool(true), i)
        case .number:
            guard i + 20 <= b.count, let value = decodeNumber(b[i..<(i + 20)]) else { return nil }
            return (value, i + 20)
        case .string:
            guard let (text, end) = decodeString(b, i) else { return nil }
            return (.string(text), end)
        case .array:
            var items: [JSONValue] = []
            var j = i
            while j < b.count, b[j] != end {
                guard let (item, next) = decodeValue(b, j), let item else { return nil }
                items.append(item)
                j = next
            }
            return j < b.count ? (.array(items), j + 1) : nil
        case .object:
            return nil
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt64? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt64(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt64(byte - UInt8(ascii: "a") + 10)
        default: return nil
        }
    }

    /// 16 hex digits of the sortable double, 4 of the integer offset (see `appendNumber`).
    private static func decodeNumber(_ digits: ArraySlice<UInt8>) -> JSONValue? {
        var sortable: UInt64 = 0
        var biased: UInt64 = 0
        for (n, byte) in digits.enumerated() {
            guard let v = hexValue(byte) else { return nil }
            if n < 16 { sortable = sortable << 4 | v } else { biased = biased << 4 | v }
        }
        let bits = sortable & (1 << 63) != 0 ? sortable & ~(1 << 63) : ~sortable
        let double = Double(bitPattern: bits)
        let offset = Int64(biased) - 0x8000
        guard double.isFinite else { return nil }
        if offset != 0 {
            // Only an integer beyond 2^53 has an offset (see `intOffset`).
            if double == 0x1p63 { return .int((offset + 2048) + (Int64.max - 2047)) }
            guard let base = Int64(exactly: double) else { return nil }
            let (value, overflow) = base.addingReportingOverflow(offset)
            return overflow ? nil : .int(value)
        }
        if double.rounded() == double {
            // As canonical JSON writes it (`JSONValue.writeDouble`): an integer below 9.2e18.
            return abs(double) < 9.2e18 ? .int(Int64(double)) : nil
        }
        return .double(double)
    }

    /// A string's escaped bytes up to its `01 01` terminator; the index after it.
    private static func decodeString(_ b: [UInt8], _ start: Int) -> (String, Int)? {
        var out: [UInt8] = []
        var i = start
        while i < b.count {
            if b[i] == 0x01 {
                guard i + 1 < b.count else { return nil }
                switch b[i + 1] {
                case 0x01: return (String(decoding: out, as: UTF8.self), i + 2)
                case 0x02: out.append(0x00)
                case 0x03: out.append(0x01)
                default: return nil
                }
                i += 2
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return nil
    }
}
