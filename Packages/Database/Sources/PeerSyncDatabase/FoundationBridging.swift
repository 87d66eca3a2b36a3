import Foundation
import PeerSyncCore

// Bridging to and from Foundation's untyped values (`[String: Any]`, `[Any]`, `NSNumber`,
// `NSNull`), for code ported from Couchbase Lite (`MutableDocument(data:)`, `toDictionary()`)
// and for `JSONSerialization` output. Typed code is better served by `JSONValue` literals and
// by `Codable` (`MutableDocument(encoding:)`, `decode(as:)`).

extension JSONValue {
    /// A JSON value from a Foundation-style value:
    ///
    /// - `nil` (an `Optional` holding none) and `NSNull` → `.null`;
    /// - `Bool` (and an `NSNumber` holding a boolean) → `.bool`;
    /// - Swift integers and integral `NSNumber`s that fit `Int64` → `.int` (a `UInt64` above
    ///   `Int64.max` → `.double`);
    /// - `Double`, `Float` and other `NSNumber`s → `.double` (non-finite values → `.null`, as
    ///   JSON has no NaN or infinity — the same rule as `MutableDocument.setDouble`);
    /// - `String` (and `Substring`) → `.string`; `Date` → its ISO-8601 string as Couchbase Lite
    ///   stores dates (UTC, milliseconds);
    /// - `[Any]` → `.array`, `[String: Any]` → `.object`, recursively; a `JSONValue` as is.
    ///
    /// Throws `.invalidArgument` (context `type`: the Swift type) for anything else — `Data`,
    /// `Blob` (set blobs with `MutableDocument.setBlob(_:forKey:)`), custom types (encode them
    /// with `Codable` instead).
    public init(any value: Any) throws(PeerSyncError) {
        self = try Self.bridging(value)
    }

    /// The value as Foundation-style types: `.null` → `NSNull()`, `.bool` → `Bool`, `.int` →
    /// `Int` (`Int64` on a 32-bit platform when it does not fit), `.double` → `Double`,
    /// `.string` → `String`, `.array` → `[Any]`, `.object` → `[String: Any]`. The inverse of
    /// ``init(any:)`` for every value it produces (`JSONValue(any: v.anyValue) == v`).
    public var anyValue: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let b): return b
        case .int(let i): return Int(exactly: i).map { $0 as Any } ?? i
        case .double(let d): return d
        case .string(let s): return s
        case .array(let a): return a.map(\.anyValue)
        case .object(let o): return o.mapValues(\.anyValue)
        }
    }

    private static func bridging(_ value: Any) throws(PeerSyncError) -> JSONValue {
        // Native Swift types first, by exact type: `as?` would bridge an `Int` 1 to `Bool`
        // through `NSNumber` on some platforms.
        switch value {
        case let v as JSONValue: return v
        case let s as String: return .string(s)
        case let s as Substring: return .string(String(s))
        case let d as Date: return .string(ISO8601.format(d))
        case is NSNull: return .null
        default: break
        }
        if let b = value as? Bool, type(of: value) == Bool.self { return .bool(b) }
        if type(of: value) == Double.self || type(of: value) == Float.self,
           let d = (value as? Double) ?? (value as? Float).map(Double.init) {
            return d.isFinite ? .double(d) : .null
        }
        if let i = value as? any BinaryInteger, !(value is NSNumber) {
            if let exact = Int64(exactly: i) { return .int(exact) }
            return .double(Double(i))
        }
        if let n = value as? NSNumber { return number(n) }
        if let array = value as? [Any] {
            var out: [JSONValue] = []
            out.reserveCapacity(array.count)
            for element in array { out.append(try bridging(element)) }
            return .array(out)
        }
        if let object = value as? [String: Any] {
            var out: [String: JSONValue] = [:]
            out.reserveCapacity(object.count)
            for (key, element) in object { out[key] = try bridging(element) }
            return .object(out)
        }
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .optional {
            guard let wrapped = mirror.children.first?.value else { return .null }
            return try bridging(wrapped)
        }
        throw PeerSyncError(.invalidArgument, "\(type(of: value)) cannot be stored in a JSON document",
                            context: ["type": "\(type(of: value))"])
    }

    /// An `NSNumber` (as `JSONSerialization` produces) by the C type it holds: a boolean
    /// (`c`/`B`; an `Int8` number reads as a boolean too, as the types cannot be told apart),
    /// an integer that fits `Int64`, else a double.
    private static func number(_ n: NSNumber) -> JSONValue {
        switch String(cString: n.objCType) {
        case "c", "B": return .bool(n.boolValue)
        case "C", "s", "S", "i", "I", "l", "L", "q": return .int(n.int64Value)
        case "Q" where n.uint64Value <= UInt64(Int64.max): return .int(n.int64Value)
        default:
            let d = n.doubleValue
            return d.isFinite ? .double(d) : .null
        }
    }
}

extension MutableDocument {
    /// A new document whose properties are bridged from a Foundation dictionary (Couchbase
    /// Lite's `MutableDocument(id:data:)` with `[String: Any]`; the label differs so that a
    /// dictionary literal keeps meaning `[String: JSONValue]`). A unique ID is generated when
    /// `id` is nil. Throws `.invalidArgument` for a value `JSONValue.init(any:)` refuses.
    public init(id: String? = nil, dictionary: [String: Any]) throws(PeerSyncError) {
        self.init(id: id, data: try Self.properties(bridging: dictionary))
    }

    /// Replaces every property with those bridged from a Foundation dictionary (Couchbase
    /// Lite's `setData(_:)` with `[String: Any]`; labelled so that `setData([...])` with a
    /// literal keeps meaning `[String: JSONValue]`). Throws `.invalidArgument` for a value
    /// `JSONValue.init(any:)` refuses, and then changes nothing.
    public mutating func setData(dictionary: [String: Any]) throws(PeerSyncError) {
        properties = try Self.properties(bridging: dictionary)
    }

    private static func properties(bridging dictionary: [String: Any]) throws(PeerSyncError) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (key, value) in dictionary { out[key] = try JSONValue(any: value) }
        return out
    }
}

extension DocumentProperties {
    /// The properties as a Foundation dictionary (Couchbase Lite's `toDictionary()`), values
    /// as `JSONValue.anyValue` gives them; blobs appear as their metadata dictionaries.
    public func toDictionary() -> [String: Any] {
        properties.mapValues(\.anyValue)
    }
}
