import Foundation
import PeerSyncCore

/// An expression of a query (Couchbase Lite's `Expression` and `ExpressionProtocol` in one
/// value type): a property, a literal, a parameter, document metadata (``Meta``), a function
/// (``Function``, ``ArrayFunction``) or an operator applied to other expressions.
///
/// Operators follow SQL++ for Mobile's rules for MISSING (a property that does not exist) and
/// NULL (JSON `null`): see the package README ("MISSING, NULL and collation").
///
/// Foundation declares an `Expression` too (as it does for Couchbase Lite on Apple platforms):
/// in a file that imports both, write ``QueryExpression``, `PeerSyncQuery.Expression`, or
/// declare `typealias Expression = PeerSyncQuery.Expression` once in your module.
public struct Expression: Sendable, Hashable, CustomStringConvertible {
    let node: ExpressionNode

    init(_ node: ExpressionNode) { self.node = node }

    /// The SQL++ text of the expression.
    public var description: String { SQLPrinter.expression(node) }

    // MARK: Leaves

    /// A document property by its path: keys separated by `.`, array indexes in brackets
    /// (`"address.city"`, `"tags[0]"`, `"a.b[-1]"` for the last element); a backslash escapes
    /// a `.` or `[` that is part of a key. A property that does not exist is MISSING.
    public static func property(_ path: String) -> Expression {
        Expression(.property(PropertyPath.parse(path), alias: nil))
    }

    /// Every property of the document (`*`): the whole body as an object.
    public static func all() -> Expression { Expression(.all(alias: nil)) }

    /// A literal value.
    public static func value(_ value: JSONValue) -> Expression { Expression(.literal(value)) }
    /// A string literal.
    public static func string(_ value: String) -> Expression { Expression(.literal(.string(value))) }
    /// An integer literal.
    public static func int(_ value: Int) -> Expression { Expression(.literal(.int(Int64(value)))) }
    /// A 64-bit integer literal.
    public static func int64(_ value: Int64) -> Expression { Expression(.literal(.int(value))) }
    /// A floating-point literal (non-finite values become `null`).
    public static func double(_ value: Double) -> Expression { Expression(.literal(value.isFinite ? .double(value) : .null)) }
    /// A Boolean literal.
    public static func boolean(_ value: Bool) -> Expression { Expression(.literal(.bool(value))) }
    /// A date literal: its ISO 8601 string (UTC, milliseconds), as Couchbase Lite stores dates.
    public static func date(_ value: Date) -> Expression { Expression(.literal(.string(ISO8601.string(value)))) }
    /// An array literal whose elements are expressions.
    public static func array(_ elements: [Expression]) -> Expression { Expression(.makeArray(elements.map(\.node))) }
    /// JSON `null`.
    public static var null: Expression { Expression(.literal(.null)) }
    /// MISSING: no value at all.
    public static var missing: Expression { Expression(.literal(nil)) }
    /// A named parameter (`$name` in SQL++), bound from ``Query/parameters`` when the query
    /// runs; an unbound parameter is MISSING.
    public static func parameter(_ name: String) -> Expression { Expression(.parameter(name)) }

    /// `NOT expression`: false for a truthy value, true for a falsy one, MISSING/NULL kept.
    public static func not(_ expression: Expression) -> Expression { Expression(.not(expression.node)) }
    /// `-expression`.
    public static func negated(_ expression: Expression) -> Expression { Expression(.negate(expression.node)) }

    // MARK: Arithmetic

    /// `self + other` (numbers; NULL for other types).
    public func add(_ other: Expression) -> Expression { binary(.add, other) }
    /// `self - other`.
    public func subtract(_ other: Expression) -> Expression { binary(.subtract, other) }
    /// `self * other`.
    public func multiply(_ other: Expression) -> Expression { binary(.multiply, other) }
    /// `self / other`: exact for integers that divide evenly, else floating point; NULL for `/ 0`.
    public func divide(_ other: Expression) -> Expression { binary(.divide, other) }
    /// `self % other`; NULL for `% 0`.
    public func modulo(_ other: Expression) -> Expression { binary(.modulo, other) }
    /// `self || other`: string concatenation (NULL unless both are strings).
    public func concat(_ other: Expression) -> Expression { binary(.concat, other) }

    // MARK: Comparison

    /// `self = other`: false for values of different types.
    public func equalTo(_ other: Expression) -> Expression { binary(.equal, other) }
    /// `self != other`.
    public func notEqualTo(_ other: Expression) -> Expression { binary(.notEqual, other) }
    /// `self < other` (values of different types compare by collation: see the README).
    public func lessThan(_ other: Expression) -> Expression { binary(.less, other) }
    /// `self <= other`.
    public func lessThanOrEqualTo(_ other: Expression) -> Expression { binary(.lessOrEqual, other) }
    /// `self > other`.
    public func greaterThan(_ other: Expression) -> Expression { binary(.greater, other) }
    /// `self >= other`.
    public func greaterThanOrEqualTo(_ other: Expression) -> Expression { binary(.greaterOrEqual, other) }
    /// `self IS other`: equality that never returns NULL or MISSING (`MISSING IS MISSING` is true).
    public func `is`(_ other: Expression) -> Expression { binary(.is, other) }
    /// `self IS NOT other`.
    public func isNot(_ other: Expression) -> Expression { binary(.isNot, other) }
    /// `self BETWEEN lower AND upper` (both bounds included).
    public func between(_ lower: Expression, and upper: Expression) -> Expression {
        Expression(.between(node, lower.node, upper.node))
    }
    /// `self IN (values…)`: true if `self` equals one of them.
    public func `in`(_ values: [Expression]) -> Expression { Expression(.in(node, values.map(\.node))) }
    /// `self LIKE pattern`: case-sensitive; `%` matches any run of characters, `_` exactly one,
    /// `\` escapes. NULL unless both sides are strings.
    public func like(_ pattern: Expression) -> Expression { binary(.like, pattern) }
    /// `REGEXP_LIKE(self, pattern)`: whether the pattern (ICU syntax) matches anywhere in the string.
    public func regex(_ pattern: Expression) -> Expression { Expression(.function(.regexpLike, [node, pattern.node])) }
    /// `self IS VALUED`: neither NULL nor MISSING.
    public func isValued() -> Expression { Expression(.test(node, .valued)) }
    /// `self IS NOT VALUED`: NULL or MISSING.
    public func isNotValued() -> Expression { Expression(.test(node, .notValued)) }

    // MARK: Logic

    /// `self AND other`: false if either is false, true if both are true, else MISSING/NULL.
    public func and(_ other: Expression) -> Expression { binary(.and, other) }
    /// `self OR other`: true if either is true, false if both are false, else MISSING/NULL.
    public func or(_ other: Expression) -> Expression { binary(.or, other) }

    private func binary(_ op: BinaryOperator, _ other: Expression) -> Expression {
        Expression(.binary(op, node, other.node))
    }

    /// The same property or metadata expression qualified with a data source alias
    /// (`Expression.property("name").from("t")` is `t.name`).
    public func from(_ alias: String) -> Expression {
        switch node {
        case .property(let path, _): return Expression(.property(path, alias: alias))
        case .all: return Expression(.all(alias: alias))
        case .meta(let key, _): return Expression(.meta(key, alias: alias))
        default: return self
        }
    }
}

/// Another name for ``Expression``, never ambiguous with Foundation's `Expression`.
public typealias QueryExpression = Expression

/// Document metadata for queries (Couchbase Lite's `Meta`): `meta().id` and friends.
public enum Meta {
    /// The document ID (a string).
    public static var id: Expression { Expression(.meta(.id, alias: nil)) }
    /// The document's sequence in its collection (an integer; it grows with every change).
    public static var sequence: Expression { Expression(.meta(.sequence, alias: nil)) }
    /// The current revision ID (a string).
    public static var revisionID: Expression { Expression(.meta(.revisionID, alias: nil)) }
    /// Whether the document is deleted. A query that uses it anywhere also scans deleted
    /// documents (tombstones, whose body is empty); every other query skips them.
    public static var isDeleted: Expression { Expression(.meta(.deleted, alias: nil)) }
    /// The expiration time in milliseconds since 1970, MISSING when none is set.
    public static var expiration: Expression { Expression(.meta(.expiration, alias: nil)) }
}

/// Functions for queries (Couchbase Lite's `Function`). Each returns MISSING for a MISSING
/// argument and NULL for an argument of the wrong type.
public enum Function {
    /// `COUNT(expression)`: the number of rows whose value is neither NULL nor MISSING;
    /// `Function.count(Expression.all())` is `COUNT(*)`, the number of rows.
    public static func count(_ expression: Expression) -> Expression { Expression(.aggregate(.count, expression.node)) }
    /// `SUM(expression)`: the sum of the numbers (other values are skipped; NULL when there are none).
    public static func sum(_ expression: Expression) -> Expression { Expression(.aggregate(.sum, expression.node)) }
    /// `AVG(expression)`: the mean of the numbers (NULL when there are none).
    public static func avg(_ expression: Expression) -> Expression { Expression(.aggregate(.avg, expression.node)) }
    /// `MIN(expression)`: the least value by collation, NULL and MISSING skipped.
    public static func min(_ expression: Expression) -> Expression { Expression(.aggregate(.min, expression.node)) }
    /// `MAX(expression)`: the greatest value by collation, NULL and MISSING skipped.
    public static func max(_ expression: Expression) -> Expression { Expression(.aggregate(.max, expression.node)) }
    /// `LOWER(string)` (Unicode case mapping).
    public static func lower(_ expression: Expression) -> Expression { call(.lower, expression) }
    /// `UPPER(string)` (Unicode case mapping).
    public static func upper(_ expression: Expression) -> Expression { call(.upper, expression) }
    /// `LENGTH(string)`: the number of Unicode scalars (code points).
    public static func length(_ expression: Expression) -> Expression { call(.length, expression) }
    /// `TRIM(string)`: without leading and trailing white space.
    public static func trim(_ expression: Expression) -> Expression { call(.trim, expression) }
    /// `LTRIM(string)`: without leading white space.
    public static func ltrim(_ expression: Expression) -> Expression { call(.ltrim, expression) }
    /// `RTRIM(string)`: without trailing white space.
    public static func rtrim(_ expression: Expression) -> Expression { call(.rtrim, expression) }
    /// `ABS(number)`.
    public static func abs(_ expression: Expression) -> Expression { call(.abs, expression) }
    /// `FLOOR(number)`.
    public static func floor(_ expression: Expression) -> Expression { call(.floor, expression) }
    /// `CEIL(number)`.
    public static func ceil(_ expression: Expression) -> Expression { call(.ceil, expression) }
    /// `ROUND(number)`: to the nearest integer, halves away from zero.
    public static func round(_ expression: Expression) -> Expression { call(.round, expression) }
    /// `ROUND(number, digits)`: to `digits` decimal places, halves away from zero.
    public static func round(_ expression: Expression, digits: Expression) -> Expression {
        Expression(.function(.round, [expression.node, digits.node]))
    }

    private static func call(_ f: ScalarFunction, _ e: Expression) -> Expression { Expression(.function(f, [e.node])) }
}

/// Array functions for queries (Couchbase Lite's `ArrayFunction`).
public enum ArrayFunction {
    /// `ARRAY_CONTAINS(array, value)`: whether an element equals `value`; NULL if `expression`
    /// is not an array.
    public static func contains(_ expression: Expression, value: Expression) -> Expression {
        Expression(.function(.arrayContains, [expression.node, value.node]))
    }
    /// `ARRAY_LENGTH(array)`: the number of elements; NULL if `expression` is not an array.
    public static func length(_ expression: Expression) -> Expression {
        Expression(.function(.arrayLength, [expression.node]))
    }
}

/// Property paths as strings (`a.b[0]`).
enum PropertyPath {
    /// Splits `a.b[0]`: keys on unescaped `.`, `[n]` indexes; `\` escapes the next character.
    static func parse(_ path: String) -> [PathComponent] {
        var out: [PathComponent] = []
        var key = ""
        var hasKey = false
        var chars = Array(path)[...]
        func flushKey() { if hasKey || !key.isEmpty { out.append(.key(key)) }; key = ""; hasKey = false }
        while let c = chars.popFirst() {
            switch c {
            case "\\":
                if let n = chars.popFirst() { key.append(n); hasKey = true }
            case ".":
                flushKey()
            case "[":
                if let close = chars.firstIndex(of: "]"), let i = Int(String(chars[chars.startIndex..<close])) {
                    flushKey()
                    out.append(.index(i))
                    chars = chars[(close + 1)...]
                } else {
                    key.append(c); hasKey = true
                }
            default:
                key.append(c); hasKey = true
            }
        }
        flushKey()
        return out
    }
}

/// Dates as Couchbase Lite writes them in documents.
enum ISO8601 {
    static func string(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: date)
    }
}
