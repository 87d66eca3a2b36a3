import Foundation
import PeerSyncCore
import PeerSyncDatabase

/// The rows a query returned (Couchbase Lite's `ResultSet`): a `Sequence` of ``Result``,
/// iterable any number of times.
public struct ResultSet: Sequence, Sendable {
    /// The column names, in order (see ``Result``).
    public let columnNames: [String]
    let rows: [[JSONValue?]]

    init(columnNames: [String], rows: [[JSONValue?]]) {
        self.columnNames = columnNames
        self.rows = rows
    }

    /// The number of rows.
    public var count: Int { rows.count }

    /// Every row, in order.
    public func allResults() -> [Result] { Array(self) }

    /// Decodes every row with ``Result/data(as:dataKey:)``.
    public func data<T: Decodable>(as type: T.Type, dataKey: String? = nil) throws -> [T] {
        try map { try $0.data(as: type, dataKey: dataKey) }
    }

    /// Iterates over the rows.
    public func makeIterator() -> IndexingIterator<[Result]> {
        rows.map { Result(columnNames: columnNames, values: $0) }.makeIterator()
    }
}

/// One row of a ``ResultSet`` (Couchbase Lite's `Result`): values by column index or by
/// column name. A column whose value is MISSING (e.g. a property the document lacks) has no
/// value: `value(at:)` returns nil and ``toDictionary()`` leaves its key out; a JSON `null`
/// is `.null`.
///
/// Column names: the `AS` alias; else a property's last key (`address.city` → `city`), a
/// `Meta` column's name (`id`, `sequence`, `revisionID`, `deleted`, `expiration`), `*` → the
/// data source's alias or collection name; any other expression `$1`, `$2`, … numbering the
/// unnamed columns. A repeated name gets ` #2`, ` #3`, ….
///
/// Typed getters follow Couchbase Lite: numbers and Booleans are 0/false when the value is
/// missing or of another type; strings, arrays and dictionaries are nil.
public struct Result: Sendable, Hashable {
    /// The column names, in order.
    public let keys: [String]
    let values: [JSONValue?]

    init(columnNames: [String], values: [JSONValue?]) {
        self.keys = columnNames
        self.values = values
    }

    /// The number of columns.
    public var count: Int { values.count }

    /// The value of column `index` (nil for MISSING or an index out of range).
    public func value(at index: Int) -> JSONValue? { values.indices.contains(index) ? values[index] : nil }
    /// The value of the column named `key` (nil for MISSING or an unknown key).
    public func value(forKey key: String) -> JSONValue? { keys.firstIndex(of: key).flatMap { value(at: $0) } }
    /// Whether a column named `key` exists and has a value (also `null`).
    public func contains(key: String) -> Bool { value(forKey: key) != nil }

    /// The string in column `index`, nil otherwise.
    public func string(at index: Int) -> String? { value(at: index)?.stringValue }
    /// The string in column `key`, nil otherwise.
    public func string(forKey key: String) -> String? { value(forKey: key)?.stringValue }
    /// The integer in column `index` (a double truncated), 0 otherwise.
    public func int(at index: Int) -> Int { Int(truncatingIfNeeded: int64(at: index)) }
    /// The integer in column `key` (a double truncated), 0 otherwise.
    public func int(forKey key: String) -> Int { Int(truncatingIfNeeded: int64(forKey: key)) }
    /// The 64-bit integer in column `index`, 0 otherwise.
    public func int64(at index: Int) -> Int64 { Result.int64(value(at: index)) }
    /// The 64-bit integer in column `key`, 0 otherwise.
    public func int64(forKey key: String) -> Int64 { Result.int64(value(forKey: key)) }
    /// The number in column `index`, 0 otherwise.
    public func double(at index: Int) -> Double { value(at: index)?.doubleValue ?? 0 }
    /// The number in column `key`, 0 otherwise.
    public func double(forKey key: String) -> Double { value(forKey: key)?.doubleValue ?? 0 }
    /// The Boolean in column `index` (a non-zero number is true), false otherwise.
    public func boolean(at index: Int) -> Bool { Result.bool(value(at: index)) }
    /// The Boolean in column `key` (a non-zero number is true), false otherwise.
    public func boolean(forKey key: String) -> Bool { Result.bool(value(forKey: key)) }
    /// The array in column `index`, nil otherwise.
    public func array(at index: Int) -> [JSONValue]? { value(at: index)?.arrayValue }
    /// The array in column `key`, nil otherwise.
    public func array(forKey key: String) -> [JSONValue]? { value(forKey: key)?.arrayValue }
    /// The object in column `index`, nil otherwise.
    public func dictionary(at index: Int) -> [String: JSONValue]? { value(at: index)?.objectValue }
    /// The object in column `key`, nil otherwise.
    public func dictionary(forKey key: String) -> [String: JSONValue]? { value(forKey: key)?.objectValue }

    /// The values in column order, MISSING as `null` (Couchbase Lite's `toArray()`).
    public func toArray() -> [JSONValue] { values.map { $0 ?? .null } }
    /// Column name → value, MISSING columns left out.
    public func toDictionary() -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (key, value) in zip(keys, values) { if let value { out[key] = value } }
        return out
    }
    /// ``toDictionary()`` as canonical JSON text (sorted keys, no white space).
    public func toJSON() -> String { JSONValue.object(toDictionary()).canonicalString }

    /// Decodes the row into `type` (Couchbase Lite's `Result.data(as:)`): the whole row
    /// (``toDictionary()``) or, with `dataKey`, the object in that column (typically the `*`
    /// column of `SELECT *`). Dates are read as ISO 8601 strings. Errors: the decoder's
    /// error; `DecodingError.valueNotFound` when `dataKey` holds no object.
    public func data<T: Decodable>(as type: T.Type, dataKey: String? = nil) throws -> T {
        var object = toDictionary()
        if let dataKey {
            guard let inner = value(forKey: dataKey)?.objectValue else {
                throw DecodingError.valueNotFound(type, .init(codingPath: [], debugDescription: "no object in column \(dataKey)"))
            }
            object = inner
        }
        return try MutableDocument(data: object).decode(as: type)
    }

    private static func int64(_ value: JSONValue?) -> Int64 {
        guard let value else { return 0 }
        switch value {
        case .int(let i): return i
        case .double(let d): return d.isFinite && Swift.abs(d) < 9.2e18 ? Int64(d) : 0
        case .bool(let b): return b ? 1 : 0
        default: return 0
        }
    }

    private static func bool(_ value: JSONValue?) -> Bool {
        guard let value else { return false }
        switch value {
        case .bool(let b): return b
        case .int(let i): return i != 0
        case .double(let d): return d != 0
        default: return false
        }
    }
}
