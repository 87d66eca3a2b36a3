import PeerSyncCore

/// Prints a plan as SQL++ text that ``SQLParser`` parses back into the same plan (pure).
/// Every composite expression is parenthesized, names are quoted with backticks, strings
/// with double quotes (JSON escapes).
enum SQLPrinter {
    static func query(_ plan: QueryPlan) -> String {
        var s = "SELECT "
        if plan.distinct { s += "DISTINCT " }
        s += plan.columns.map { c in
            var text: String
            if case .all(let alias) = c.expression {
                text = alias.map { identifier($0) + ".*" } ?? "*"
            } else {
                text = expression(c.expression)
            }
            if let alias = c.alias { text += " AS " + identifier(alias) }
            return text
        }.joined(separator: ", ")
        s += " FROM " + source(plan.source)
        for join in plan.joins {
            s += " " + join.kind.rawValue + " " + source(join.source)
            if let on = join.on { s += " ON " + expression(on) }
        }
        if let w = plan.whereClause { s += " WHERE " + expression(w) }
        if !plan.groupBy.isEmpty { s += " GROUP BY " + plan.groupBy.map(expression).joined(separator: ", ") }
        if let h = plan.having { s += " HAVING " + expression(h) }
        if !plan.orderBy.isEmpty {
            s += " ORDER BY " + plan.orderBy.map { expression($0.expression) + ($0.descending ? " DESC" : "") }.joined(separator: ", ")
        }
        if let l = plan.limit { s += " LIMIT " + expression(l) }
        if let o = plan.offset { s += " OFFSET " + expression(o) }
        return s
    }

    /// `scope.name AS alias`.
    static func source(_ source: SourceName) -> String {
        var s = ""
        if let scope = source.scope { s += identifier(scope) + "." }
        s += identifier(source.collection)
        if let alias = source.alias { s += " AS " + identifier(alias) }
        return s
    }

    /// A name, bare when it is a plain identifier that is no keyword, else in backticks.
    static func identifier(_ name: String) -> String {
        if SQLLexer.isPlainIdentifier(name) && !SQLLexer.keywords.contains(name.uppercased()) { return name }
        return "`" + name.replacingOccurrences(of: "`", with: "``") + "`"
    }

    static func literal(_ value: JSONValue?) -> String {
        guard let value else { return "MISSING" }
        switch value {
        case .null: return "NULL"
        case .bool(let b): return b ? "TRUE" : "FALSE"
        case .int, .double, .string: return value.canonicalString
        case .array(let a): return "[" + a.map { literal($0) }.joined(separator: ", ") + "]"
        case .object(let o):
            return "{" + o.keys.sorted { Collation.compareStrings($0, $1) < 0 }
                .map { JSONValue.string($0).canonicalString + ": " + literal(o[$0]) }.joined(separator: ", ") + "}"
        }
    }

    static func expression(_ node: ExpressionNode) -> String {
        switch node {
        case .literal(let v):
            // A negative number is parenthesized so that `x - -1` stays unambiguous.
            if let d = v?.doubleValue, d < 0 || (d == 0 && d.sign == .minus) { return "(" + literal(v) + ")" }
            return literal(v)
        case .property(let path, let alias):
            var s = alias.map { identifier($0) } ?? ""
            for (i, c) in path.enumerated() {
                switch c {
                case .key(let k): s += (i == 0 && alias == nil ? "" : ".") + identifier(k)
                case .index(let n): s += "[\(n)]"
                }
            }
            return s
        case .all(let alias): return alias.map { identifier($0) + ".*" } ?? "*"
        case .parameter(let name): return "$" + identifier(name)
        case .meta(let key, let alias): return "meta(\(alias.map(identifier) ?? "")).\(key.rawValue)"
        case .negate(let e): return "(-(" + expression(e) + "))"  // `-(1)`: not the literal -1
        case .not(let e): return "(NOT " + expression(e) + ")"
        case .binary(let op, let l, let r):
            var right = expression(r)
            // `x IS NULL` would parse as the IS NULL test: keep IS with a literal an operator.
            if op == .is || op == .isNot, case .literal = r { right = "(" + right + ")" }
            if op == .regex { return "REGEXP_LIKE(" + expression(l) + ", " + right + ")" }
            return "(" + expression(l) + " " + op.rawValue + " " + right + ")"
        case .between(let e, let lo, let hi):
            return "(" + expression(e) + " BETWEEN " + expression(lo) + " AND " + expression(hi) + ")"
        case .in(let e, let list):
            return "(" + expression(e) + " IN (" + list.map(expression).joined(separator: ", ") + "))"
        case .test(let e, let t): return "(" + expression(e) + " " + t.rawValue + ")"
        case .function(let f, let args): return f.rawValue + "(" + args.map(expression).joined(separator: ", ") + ")"
        case .aggregate(let a, let arg):
            if case .all(nil) = arg { return a.rawValue + "(*)" }
            return a.rawValue + "(" + expression(arg) + ")"
        case .array(let items): return "[" + items.map(expression).joined(separator: ", ") + "]"
        }
    }
}

extension ExpressionNode {
    /// An array of expressions; all literals (none MISSING) fold into one literal array, so a
    /// printed and re-parsed plan is the same plan.
    static func makeArray(_ items: [ExpressionNode]) -> ExpressionNode {
        var values: [JSONValue] = []
        for item in items {
            guard case .literal(let v?) = item else { return .array(items) }
            values.append(v)
        }
        return .literal(.array(values))
    }
}
