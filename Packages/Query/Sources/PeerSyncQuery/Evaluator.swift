import Foundation
import PeerSyncCore

/// One document as a query sees it (pure: built from a stored document by the scan, or by
/// hand in tests and fuzzers).
struct QueryDocument: Sendable {
    var id: String
    var sequence: UInt64
    /// The revision ID's UTF-8 bytes, as stored (decoded only when `meta().revisionID` is read).
    var revision: [UInt8]
    var revisionID: String { String(decoding: revision, as: UTF8.self) }
    var isDeleted: Bool
    /// Milliseconds since 1970, nil when none is set.
    var expiration: Int64?
    var properties: [String: JSONValue]
    /// In a join: the document of each joined data source by alias, nil for an unmatched
    /// `LEFT OUTER JOIN` (MISSING). Empty for a query over one data source.
    var joined: [String: QueryDocument?] = [:]

    init(id: String, sequence: UInt64, revisionID: String, isDeleted: Bool, expiration: Int64?,
         properties: [String: JSONValue]) {
        self.init(id: id, sequence: sequence, revision: Array(revisionID.utf8), isDeleted: isDeleted,
                  expiration: expiration, properties: properties)
    }

    init(id: String, sequence: UInt64, revision: [UInt8], isDeleted: Bool, expiration: Int64?,
         properties: [String: JSONValue]) {
        self.id = id
        self.sequence = sequence
        self.revision = revision
        self.isDeleted = isDeleted
        self.expiration = expiration
        self.properties = properties
    }

    /// The document an expression qualified with `alias` reads: a joined source's (nil when
    /// unmatched), else this one (unqualified, or the `FROM` source's alias).
    func source(_ alias: String?) -> QueryDocument? {
        guard let alias, let other = joined[alias] else { return self }
        return other
    }
}

/// Evaluates expressions with SQL++ for Mobile's rules (pure: no database). Values are
/// `JSONValue?`, nil meaning MISSING.
///
/// MISSING and NULL: an operator with a MISSING operand is MISSING, else with a NULL operand
/// (or an operand of the wrong type, e.g. `"a" + 1`) NULL. `AND` is false if either side is
/// false, else MISSING/NULL as above; `OR` is true if either side is true. Comparisons of two
/// values of different types follow the collation (``Collation``): `1 < "a"`, `true < 0`;
/// `=` between different types is false. `WHERE`/`HAVING` keep a row only when the condition
/// is truthy (true, a non-zero number, a non-empty string/array/object).
struct Evaluator {
    let parameters: [String: JSONValue]
    private let regexes = RegexCache()

    init(parameters: [String: JSONValue]) { self.parameters = parameters }

    /// The value of `node` for `document` (nil document: no row, every property is MISSING).
    /// `aggregates` holds the values of the aggregate nodes when a group is evaluated.
    func evaluate(_ node: ExpressionNode, _ document: QueryDocument?,
                  aggregates: [ExpressionNode: JSONValue?]? = nil) throws(PeerSyncError) -> JSONValue? {
        switch node {
        case .literal(let v): return v
        case .property(let path, let alias):
            // One data source (no join): the document itself, not a copy of it per property read.
            guard let document else { return nil }
            if document.joined.isEmpty { return Evaluator.resolve(path, in: document.properties) }
            guard let source = document.source(alias) else { return nil }
            return Evaluator.resolve(path, in: source.properties)
        case .all(let alias):
            guard let document = document?.source(alias) else { return nil }
            return .object(document.properties)
        case .parameter(let name): return parameters[name]
        case .meta(let key, let alias):
            guard let document else { return nil }
            if document.joined.isEmpty { return Evaluator.meta(key, of: document) }
            guard let source = document.source(alias) else { return nil }
            return Evaluator.meta(key, of: source)
        case .aggregate:
            guard let aggregates, let value = aggregates[node] else {
                throw PeerSyncError(.invalidQuery, "an aggregate function is used outside of an aggregate query")
            }
            return value
        case .negate(let e):
            let v = try evaluate(e, document, aggregates: aggregates)
            return try Evaluator.arithmetic(.subtract, .int(0), v)
        case .not(let e):
            guard let v = try evaluate(e, document, aggregates: aggregates) else { return nil }
            guard let t = Evaluator.truth(v) else { return .null }
            return .bool(!t)
        case .binary(let op, let l, let r):
            switch op {
            case .and, .or:
                let a = try evaluate(l, document, aggregates: aggregates)
                let b = try evaluate(r, document, aggregates: aggregates)
                return Evaluator.logic(op, a, b)
            default:
                let a = try evaluate(l, document, aggregates: aggregates)
                let b = try evaluate(r, document, aggregates: aggregates)
                return try binary(op, a, b)
            }
        case .between(let e, let lo, let hi):
            let v = try evaluate(e, document, aggregates: aggregates)
            let ge = Evaluator.comparison(.greaterOrEqual, v, try evaluate(lo, document, aggregates: aggregates))
            let le = Evaluator.comparison(.lessOrEqual, v, try evaluate(hi, document, aggregates: aggregates))
            return Evaluator.logic(.and, ge, le)
        case .in(let e, let list):
            guard let v = try evaluate(e, document, aggregates: aggregates) else { return nil }
            if v.isNull { return .null }
            for item in list where Collation.equal(v, try evaluate(item, document, aggregates: aggregates)) {
                return .bool(true)
            }
            return .bool(false)
        case .test(let e, let test):
            let v = try evaluate(e, document, aggregates: aggregates)
            switch test {
            case .null: return v.map { .bool($0.isNull) }
            case .notNull: return v.map { .bool(!$0.isNull) }
            case .missing: return .bool(v == nil)
            case .notMissing: return .bool(v != nil)
            case .valued: return .bool(v != nil && v?.isNull == false)
            case .notValued: return .bool(v == nil || v?.isNull == true)
            }
        case .function(let f, let args):
            var values: [JSONValue?] = []
            for arg in args { values.append(try evaluate(arg, document, aggregates: aggregates)) }
            return try function(f, values)
        case .array(let items):
            var out: [JSONValue] = []
            for item in items { out.append(try evaluate(item, document, aggregates: aggregates) ?? .null) }
            return .array(out)
        }
    }

    /// The value of `meta().key` for `document`.
    static func meta(_ key: MetaKey, of document: QueryDocument) -> JSONValue? {
        switch key {
        case .id: return .string(document.id)
        case .sequence: return .int(Int64(clamping: document.sequence))
        case .revisionID: return .string(document.revisionID)
        case .deleted: return .bool(document.isDeleted)
        case .expiration: return document.expiration.map { .int($0) }
        }
    }

    /// Whether a condition's value keeps a row (`WHERE`, `HAVING`).
    static func isTrue(_ value: JSONValue?) -> Bool {
        guard let value else { return false }
        return truth(value) == true
    }

    /// The truth of a value: nil for null; booleans as they are; numbers: non-zero; strings,
    /// arrays, objects: non-empty.
    static func truth(_ value: JSONValue) -> Bool? {
        switch value {
        case .null: return nil
        case .bool(let b): return b
        case .int(let i): return i != 0
        case .double(let d): return d != 0
        case .string(let s): return !s.isEmpty
        case .array(let a): return !a.isEmpty
        case .object(let o): return !o.isEmpty
        }
    }

    /// A property path inside a document's properties; nil (MISSING) where it leads nowhere.
    /// A negative index counts from the end (`[-1]` is the last element).
    static func resolve(_ path: [PathComponent], in properties: [String: JSONValue]) -> JSONValue? {
        guard let first = path.first, case .key(let k) = first, var current = properties[k] else { return nil }
        for component in path.dropFirst() {
            switch component {
            case .key(let key):
                guard case .object(let o) = current, let next = o[key] else { return nil }
                current = next
            case .index(let index):
                guard case .array(let a) = current else { return nil }
                let i = index < 0 ? a.count + index : index
                guard i >= 0, i < a.count else { return nil }
                current = a[i]
            }
        }
        return current
    }

    // MARK: Operators

    static func logic(_ op: BinaryOperator, _ a: JSONValue?, _ b: JSONValue?) -> JSONValue? {
        let ta = a.flatMap(truth), tb = b.flatMap(truth)
        if op == .and {
            if ta == false || tb == false { return .bool(false) }
        } else {
            if ta == true || tb == true { return .bool(true) }
        }
        if a == nil || b == nil { return nil }
        if ta == nil || tb == nil { return .null }
        return .bool(op == .and)
    }

    static func comparison(_ op: BinaryOperator, _ a: JSONValue?, _ b: JSONValue?) -> JSONValue? {
        guard let a, let b else { return nil }
        if a.isNull || b.isNull { return .null }
        let c = Collation.compare(a, b)
        switch op {
        case .equal: return .bool(c == 0)
        case .notEqual: return .bool(c != 0)
        case .less: return .bool(c < 0)
        case .lessOrEqual: return .bool(c <= 0)
        case .greater: return .bool(c > 0)
        case .greaterOrEqual: return .bool(c >= 0)
        default: return .null
        }
    }

    func binary(_ op: BinaryOperator, _ a: JSONValue?, _ b: JSONValue?) throws(PeerSyncError) -> JSONValue? {
        switch op {
        case .equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual:
            return Evaluator.comparison(op, a, b)
        case .is: return .bool(Collation.equal(a, b))
        case .isNot: return .bool(!Collation.equal(a, b))
        case .add, .subtract, .multiply, .divide, .modulo: return try Evaluator.arithmetic(op, a, b)
        case .concat:
            guard let a, let b else { return nil }
            guard case .string(let x) = a, case .string(let y) = b else { return .null }
            return .string(x + y)
        case .like:
            guard let a, let b else { return nil }
            guard case .string(let s) = a, case .string(let p) = b else { return .null }
            return .bool(Like.matches(s, pattern: p))
        case .regex:
            return try function(.regexpLike, [a, b])
        case .and, .or: return Evaluator.logic(op, a, b)
        }
    }

    /// Numbers only: integers stay integers while they fit (overflow becomes a double);
    /// division is exact when it can be (`6 / 3` is 2, `5 / 2` is 2.5); `x / 0` and `x % 0`
    /// are NULL.
    static func arithmetic(_ op: BinaryOperator, _ a: JSONValue?, _ b: JSONValue?) throws(PeerSyncError) -> JSONValue? {
        guard let a, let b else { return nil }
        guard let x = a.doubleValue, let y = b.doubleValue else { return .null }
        if case .int(let i) = a, case .int(let j) = b {
            switch op {
            case .add: let (r, o) = i.addingReportingOverflow(j); return o ? .double(x + y) : .int(r)
            case .subtract: let (r, o) = i.subtractingReportingOverflow(j); return o ? .double(x - y) : .int(r)
            case .multiply: let (r, o) = i.multipliedReportingOverflow(by: j); return o ? .double(x * y) : .int(r)
            case .divide:
                if j == 0 { return .null }
                if j == -1 && i == .min { return .double(-x) }
                return i % j == 0 ? .int(i / j) : .double(x / y)
            case .modulo:
                if j == 0 { return .null }
                if j == -1 { return .int(0) }
                return .int(i % j)
            default: return .null
            }
        }
        let r: Double
        switch op {
        case .add: r = x + y
        case .subtract: r = x - y
        case .multiply: r = x * y
        case .divide: if y == 0 { return .null }; r = x / y
        case .modulo: if y == 0 { return .null }; r = fmod(x, y)
        default: return .null
        }
        return r.isFinite ? .double(r) : .null
    }

    // MARK: Functions

    func function(_ f: ScalarFunction, _ args: [JSONValue?]) throws(PeerSyncError) -> JSONValue? {
        guard f.arity.contains(args.count) else {
            throw PeerSyncError(.invalidQuery, "\(f.rawValue) takes \(f.arity.lowerBound == f.arity.upperBound ? "\(f.arity.lowerBound)" : "\(f.arity.lowerBound) or \(f.arity.upperBound)") argument(s), not \(args.count)")
        }
        if args.contains(where: { $0 == nil }) { return nil }
        let values = args.map { $0! }
        switch f {
        case .lower, .upper, .length, .trim, .ltrim, .rtrim:
            guard case .string(let s) = values[0] else { return .null }
            switch f {
            case .lower: return .string(s.lowercased())
            case .upper: return .string(s.uppercased())
            case .length: return .int(Int64(s.unicodeScalars.count))
            case .trim: return .string(Evaluator.trim(s, leading: true, trailing: true))
            case .ltrim: return .string(Evaluator.trim(s, leading: true, trailing: false))
            default: return .string(Evaluator.trim(s, leading: false, trailing: true))
            }
        case .abs:
            switch values[0] {
            case .int(let i): return i == .min ? .double(-Double(i)) : .int(Swift.abs(i))
            case .double(let d): return .double(Swift.abs(d))
            default: return .null
            }
        case .floor, .ceil:
            switch values[0] {
            case .int: return values[0]
            case .double(let d): return .double(f == .floor ? d.rounded(.down) : d.rounded(.up))
            default: return .null
            }
        case .round:
            var digits: Int64 = 0
            if values.count == 2 {
                guard let d = values[1].intValue else { return .null }
                digits = Swift.max(-20, Swift.min(20, d))
            }
            switch values[0] {
            case .int(let i) where digits >= 0: return .int(i)
            case .int, .double:
                let x = values[0].doubleValue!
                if digits == 0 { return .double(x.rounded(.toNearestOrAwayFromZero)) }
                let scale = pow(10.0, Double(digits))
                return .double((x * scale).rounded(.toNearestOrAwayFromZero) / scale)
            default: return .null
            }
        case .arrayContains:
            guard case .array(let a) = values[0] else { return .null }
            return .bool(a.contains { Collation.equal($0, values[1]) })
        case .arrayLength:
            guard case .array(let a) = values[0] else { return .null }
            return .int(Int64(a.count))
        case .regexpLike:
            guard case .string(let s) = values[0], case .string(let p) = values[1] else { return .null }
            return .bool(try regexes.matches(s, pattern: p))
        }
    }

    static func trim(_ s: String, leading: Bool, trailing: Bool) -> String {
        var scalars = Substring.UnicodeScalarView(s.unicodeScalars)
        if leading { while let c = scalars.first, c.properties.isWhitespace { scalars.removeFirst() } }
        if trailing { while let c = scalars.last, c.properties.isWhitespace { scalars.removeLast() } }
        return String(scalars)
    }
}

/// Compiled regular expressions of one query run (`REGEXP_LIKE` finds a match anywhere in
/// the string, as `regex_search` does). Not shared between threads: one per evaluator, used
/// by the thread that runs the query.
final class RegexCache: @unchecked Sendable {
    // Only ever used by the one thread running a query (the evaluator is not shared).
    private var compiled: [String: NSRegularExpression] = [:]

    func matches(_ string: String, pattern: String) throws(PeerSyncError) -> Bool {
        let regex: NSRegularExpression
        if let cached = compiled[pattern] {
            regex = cached
        } else {
            do { regex = try NSRegularExpression(pattern: pattern) } catch {
                throw PeerSyncError(.invalidQuery, "invalid regular expression", context: ["pattern": pattern])
            }
            compiled[pattern] = regex
        }
        let range = NSRange(string.startIndex..<string.endIndex, in: string)
        return regex.firstMatch(in: string, range: range) != nil
    }
}

/// SQL `LIKE`, case-sensitive: `%` matches any run of characters, `_` exactly one (Unicode
/// scalar), `\` makes the next character literal.
enum Like {
    static func matches(_ string: String, pattern: String) -> Bool {
        let s = Array(string.unicodeScalars)
        var p: [(scalar: Unicode.Scalar, literal: Bool)] = []
        var escape = false
        for c in pattern.unicodeScalars {
            if escape { p.append((c, true)); escape = false } else if c == "\\" { escape = true } else { p.append((c, false)) }
        }
        if escape { p.append(("\\", true)) }
        // Iterative wildcard matching with backtracking to the last `%`.
        var si = 0, pi = 0, starP = -1, starS = 0
        while si < s.count {
            if pi < p.count, !p[pi].literal, p[pi].scalar == "%" {
                starP = pi; starS = si; pi += 1
            } else if pi < p.count, (!p[pi].literal && p[pi].scalar == "_") || p[pi].scalar == s[si] {
                si += 1; pi += 1
            } else if starP >= 0 {
                pi = starP + 1; starS += 1; si = starS
            } else {
                return false
            }
        }
        while pi < p.count, !p[pi].literal, p[pi].scalar == "%" { pi += 1 }
        return pi == p.count
    }
}
