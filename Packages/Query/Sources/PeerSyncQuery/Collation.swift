import PeerSyncCore

/// Couchbase Lite's collation of query values (pure: no database).
///
/// A query value is a `JSONValue?`: `nil` is MISSING (a property that does not exist), `.null`
/// is JSON `null`. Values of different types order by type:
/// MISSING < null < false < true < numbers < strings < arrays < objects.
/// Within a type: numbers by value (`.int` and `.double` compare exactly, `1 == 1.0`), strings
/// by their UTF-8 bytes (Couchbase Lite's default binary collation, also SQLite's `BINARY`),
/// arrays element by element (a prefix first), objects by their keys sorted in UTF-8 order,
/// then key by key, value by value (fewer keys first on a common prefix).
enum Collation {
    /// The type rank: MISSING 0, null 1, false 2, true 3, number 4, string 5, array 6, object 7.
    static func rank(_ value: JSONValue?) -> Int {
        guard let value else { return 0 }
        switch value {
        case .null: return 1
        case .bool(let b): return b ? 3 : 2
        case .int, .double: return 4
        case .string: return 5
        case .array: return 6
        case .object: return 7
        }
    }

    /// -1, 0 or 1 as `a` orders before, with or after `b`.
    static func compare(_ a: JSONValue?, _ b: JSONValue?) -> Int {
        let ra = rank(a), rb = rank(b)
        if ra != rb { return ra < rb ? -1 : 1 }
        guard let a, let b else { return 0 }
        switch (a, b) {
        case (.int, _), (.double, _): return compareNumbers(a, b)
        case let (.string(x), .string(y)): return compareStrings(x, y)
        case let (.array(x), .array(y)):
            for (l, r) in zip(x, y) {
                let c = compare(l, r)
                if c != 0 { return c }
            }
            return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
        case let (.object(x), .object(y)):
            let kx = x.keys.sorted { compareStrings($0, $1) < 0 }, ky = y.keys.sorted { compareStrings($0, $1) < 0 }
            for (l, r) in zip(kx, ky) {
                let c = compareStrings(l, r)
                if c != 0 { return c }
                let v = compare(x[l], y[r])
                if v != 0 { return v }
            }
            return kx.count == ky.count ? 0 : (kx.count < ky.count ? -1 : 1)
        default: return 0  // null/null, bool/bool of equal rank
        }
    }

    /// Strings by UTF-8 bytes (not Swift's canonical-equivalence `<`).
    static func compareStrings(_ x: String, _ y: String) -> Int {
        var i = x.utf8.makeIterator(), j = y.utf8.makeIterator()
        while true {
            switch (i.next(), j.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case let (l?, r?): if l != r { return l < r ? -1 : 1 }
            }
        }
    }

    /// Two numbers (`.int` or `.double`), exactly.
    static func compareNumbers(_ a: JSONValue, _ b: JSONValue) -> Int {
        switch (a, b) {
        case let (.int(x), .int(y)): return x == y ? 0 : (x < y ? -1 : 1)
        case let (.int(x), .double(y)): return -compareDoubleInt(y, x)
        case let (.double(x), .int(y)): return compareDoubleInt(x, y)
        case let (.double(x), .double(y)): return x == y ? 0 : (x < y ? -1 : 1)
        default: return 0
        }
    }

    private static func compareDoubleInt(_ d: Double, _ i: Int64) -> Int {
        if d.isNaN { return -1 }
        if d >= 9_223_372_036_854_775_808.0 { return 1 }
        if d < -9_223_372_036_854_775_808.0 { return -1 }
        let t = d.rounded(.towardZero)
        let ti = Int64(t)
        if ti != i { return ti < i ? -1 : 1 }
        let frac = d - t
        return frac == 0 ? 0 : (frac < 0 ? -1 : 1)
    }

    /// Equality under the collation (`compare == 0`): strings byte for byte, `1 == 1.0`.
    static func equal(_ a: JSONValue?, _ b: JSONValue?) -> Bool { compare(a, b) == 0 }
}
