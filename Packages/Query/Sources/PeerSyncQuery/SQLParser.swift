import PeerSyncCore

/// A token of SQL++ text.
struct SQLToken: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case identifier(String)        // bare (keywords are identifiers matched case-insensitively)
        case quotedIdentifier(String)  // `backticks`: never a keyword
        case string(String)
        case number(JSONValue)
        case parameter(String)
        case symbol(String)            // ( ) [ ] { } , . : * + - / % = == != <> < <= > >= || ;
        case end
    }
    var kind: Kind
    /// Offset of the first character, in characters.
    var offset: Int
}

/// Splits SQL++ text into tokens (pure).
struct SQLLexer {
    static let keywords: Set<String> = [
        "SELECT", "DISTINCT", "ALL", "FROM", "AS", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "ASC", "DESC",
        "LIMIT", "OFFSET", "AND", "OR", "NOT", "LIKE", "IN", "BETWEEN", "IS", "NULL", "MISSING", "VALUED",
        "TRUE", "FALSE", "JOIN", "ON", "LEFT", "INNER", "OUTER", "CROSS", "UNNEST", "NEST", "ANY", "EVERY", "SATISFIES", "END",
        "COLLATE", "EXISTS", "CASE", "WHEN", "THEN", "ELSE", "MATCH",
    ]

    static func isPlainIdentifier(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, first == "_" || first.properties.isAlphabetic else { return false }
        return s.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
    }

    let chars: [Character]

    init(_ text: String) { chars = Array(text) }

    func error(_ message: String, at offset: Int) -> PeerSyncError {
        SQLParser.syntaxError(message, at: offset, in: chars)
    }

    func tokens() throws(PeerSyncError) -> [SQLToken] {
        var out: [SQLToken] = []
        var i = 0
        let n = chars.count
        func peek(_ k: Int) -> Character? { i + k < n ? chars[i + k] : nil }
        while i < n {
            let c = chars[i]
            if c.isWhitespace { i += 1; continue }
            if c == "-", peek(1) == "-" {  // -- comment to end of line
                while i < n, chars[i] != "\n" { i += 1 }
                continue
            }
            if c == "/", peek(1) == "*" {
                let start = i
                i += 2
                while i < n, !(chars[i] == "*" && peek(1) == "/") { i += 1 }
                if i >= n { throw error("unterminated comment", at: start) }
                i += 2
                continue
            }
            let start = i
            if c == "'" || c == "\"" {
                out.append(SQLToken(kind: .string(try quoted(&i, quote: c)), offset: start))
            } else if c == "`" {
                out.append(SQLToken(kind: .quotedIdentifier(try backticked(&i)), offset: start))
            } else if c.isASCII, c.isNumber || (c == "." && (peek(1)?.isASCII ?? false) && (peek(1)?.isNumber ?? false)) {
                out.append(SQLToken(kind: .number(try number(&i)), offset: start))
            } else if c == "$" {
                i += 1
                if i < n, chars[i] == "`" {
                    out.append(SQLToken(kind: .parameter(try backticked(&i)), offset: start))
                } else {
                    let name = word(&i)
                    if name.isEmpty { throw error("expected a parameter name after '$'", at: start) }
                    out.append(SQLToken(kind: .parameter(name), offset: start))
                }
            } else if c == "_" || c.isLetter {
                out.append(SQLToken(kind: .identifier(word(&i)), offset: start))
            } else {
                let two = peek(1).map { String([c, $0]) } ?? ""
                if ["==", "!=", "<>", "<=", ">=", "||"].contains(two) {
                    out.append(SQLToken(kind: .symbol(two), offset: start))
                    i += 2
                } else if "()[]{},.:*+-/%=<>;".contains(c) {
                    out.append(SQLToken(kind: .symbol(String(c)), offset: start))
                    i += 1
                } else {
                    throw error("unexpected character '\(c)'", at: start)
                }
            }
        }
        out.append(SQLToken(kind: .end, offset: n))
        return out
    }

    private func word(_ i: inout Int) -> String {
        var s = ""
        while i < chars.count, chars[i] == "_" || chars[i].isLetter || (chars[i].isASCII && chars[i].isNumber) {
            s.append(chars[i]); i += 1
        }
        return s
    }

    private func backticked(_ i: inout Int) throws(PeerSyncError) -> String {
        let start = i
        i += 1
        var s = ""
        while i < chars.count {
            if chars[i] == "`" {
                if i + 1 < chars.count, chars[i + 1] == "`" { s.append("`"); i += 2; continue }
                i += 1
                return s
            }
            s.append(chars[i]); i += 1
        }
        throw error("unterminated `identifier`", at: start)
    }

    /// A string in single or double quotes: JSON's backslash escapes, or the quote doubled.
    private func quoted(_ i: inout Int, quote: Character) throws(PeerSyncError) -> String {
        let start = i
        i += 1
        var s = ""
        while i < chars.count {
            let c = chars[i]
            if c == quote {
                if i + 1 < chars.count, chars[i + 1] == quote { s.append(quote); i += 2; continue }
                i += 1
                return s
            }
            if c == "\\" {
                guard i + 1 < chars.count else { break }
                let e = chars[i + 1]
                i += 2
                switch e {
                case "n": s.append("\n")
                case "t": s.append("\t")
                case "r": s.append("\r")
                case "b": s.append("\u{08}")
                case "f": s.append("\u{0C}")
                case "u":
                    guard let scalar = try unicodeEscape(&i) else { throw error("invalid \\u escape", at: i - 2) }
                    s.unicodeScalars.append(scalar)
                default: s.append(e)
                }
                continue
            }
            s.append(c); i += 1
        }
        throw error("unterminated string", at: start)
    }

    private func hex4(_ i: inout Int) -> UInt32? {
        guard i + 4 <= chars.count, let v = UInt32(String(chars[i..<i + 4]), radix: 16) else { return nil }
        i += 4
        return v
    }

    /// After `\u`: four hex digits, or a surrogate pair as two escapes.
    private func unicodeEscape(_ i: inout Int) throws(PeerSyncError) -> Unicode.Scalar? {
        guard let high = hex4(&i) else { return nil }
        if (0xD800...0xDBFF).contains(high) {
            guard i + 2 <= chars.count, chars[i] == "\\", chars[i + 1] == "u" else { return nil }
            i += 2
            guard let low = hex4(&i), (0xDC00...0xDFFF).contains(low) else { return nil }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        }
        return Unicode.Scalar(high)
    }

    private func number(_ i: inout Int) throws(PeerSyncError) -> JSONValue {
        let start = i
        var text = ""
        var isDouble = false
        func digits() { while i < chars.count, chars[i].isASCII, chars[i].isNumber { text.append(chars[i]); i += 1 } }
        digits()
        if i < chars.count, chars[i] == "." { isDouble = true; text.append("."); i += 1; digits() }
        if i < chars.count, chars[i] == "e" || chars[i] == "E" {
            isDouble = true
            text.append("e"); i += 1
            if i < chars.count, chars[i] == "+" || chars[i] == "-" { text.append(chars[i]); i += 1 }
            let before = text.count
            digits()
            if text.count == before { throw error("invalid number", at: start) }
        }
        if i < chars.count, chars[i] == "_" || chars[i].isLetter { throw error("invalid number", at: start) }
        if !isDouble, let v = Int64(text) { return .int(v) }
        guard let d = Double(text), d.isFinite else { throw error("invalid number", at: start) }
        return .double(d)
    }
}

/// Parses the SQL++ subset into a ``QueryPlan`` (pure). See the package README for the
/// grammar; errors are `.invalidQuery` with a ``QuerySyntaxError`` detail.
struct SQLParser {
    private let tokens: [SQLToken]
    private let chars: [Character]
    private var position = 0
    /// The data source's alias, or its collection name: a path starting with it is qualified.
    private var sourceNames: Set<String> = []
    private var plan = QueryPlan()

    static func parse(_ text: String) throws(PeerSyncError) -> QueryPlan {
        let lexer = SQLLexer(text)
        var parser = SQLParser(tokens: try lexer.tokens(), chars: lexer.chars)
        return try parser.parseQuery()
    }

    private init(tokens: [SQLToken], chars: [Character]) {
        self.tokens = tokens
        self.chars = chars
    }

    static func syntaxError(_ message: String, at offset: Int, in chars: [Character]) -> PeerSyncError {
        var line = 1, column = 1
        for c in chars.prefix(offset) {
            if c == "\n" { line += 1; column = 1 } else { column += 1 }
        }
        return PeerSyncError(.invalidQuery, "\(message) at line \(line), column \(column)",
                             context: ["offset": String(offset)],
                             detail: QuerySyntaxError(offset: offset, line: line, column: column))
    }

    // MARK: Tokens

    private var current: SQLToken { tokens[position] }

    private func error(_ message: String, at token: SQLToken? = nil) -> PeerSyncError {
        let token = token ?? current
        return SQLParser.syntaxError("\(message), found \(SQLParser.describe(token))", at: token.offset, in: chars)
    }

    private static func describe(_ token: SQLToken) -> String {
        switch token.kind {
        case .identifier(let s): return "'\(s)'"
        case .quotedIdentifier(let s): return "`\(s)`"
        case .string(let s): return "string \"\(s)\""
        case .number(let v): return "number \(v.canonicalString)"
        case .parameter(let s): return "parameter $\(s)"
        case .symbol(let s): return "'\(s)'"
        case .end: return "end of query"
        }
    }

    private func isKeyword(_ k: String, _ offset: Int = 0) -> Bool {
        guard position + offset < tokens.count, case .identifier(let s) = tokens[position + offset].kind else { return false }
        return s.uppercased() == k
    }

    private mutating func acceptKeyword(_ k: String) -> Bool {
        if isKeyword(k) { position += 1; return true }
        return false
    }

    private mutating func expectKeyword(_ k: String) throws(PeerSyncError) {
        guard acceptKeyword(k) else { throw error("expected \(k)") }
    }

    private func isSymbol(_ s: String) -> Bool {
        if case .symbol(let x) = current.kind { return x == s }
        return false
    }

    private mutating func acceptSymbol(_ s: String) -> Bool {
        if isSymbol(s) { position += 1; return true }
        return false
    }

    private mutating func expectSymbol(_ s: String) throws(PeerSyncError) {
        guard acceptSymbol(s) else { throw error("expected '\(s)'") }
    }

    /// An identifier (bare and not a reserved keyword, or in backticks).
    private mutating func identifier(_ what: String) throws(PeerSyncError) -> String {
        switch current.kind {
        case .quotedIdentifier(let s):
            position += 1
            return s
        case .identifier(let s) where !SQLLexer.keywords.contains(s.uppercased()):
            position += 1
            return s
        default:
            throw error("expected \(what)")
        }
    }

    private var atIdentifier: Bool {
        switch current.kind {
        case .quotedIdentifier: return true
        case .identifier(let s): return !SQLLexer.keywords.contains(s.uppercased())
        default: return false
        }
    }

    // MARK: Query

    private mutating func parseQuery() throws(PeerSyncError) -> QueryPlan {
        try expectKeyword("SELECT")
        if acceptKeyword("DISTINCT") { plan.distinct = true } else { _ = acceptKeyword("ALL") }
        // The select list refers to the source, which comes later: find FROM first.
        let selectStart = position
        var depth = 0
        while true {
            if case .end = current.kind { throw error("expected FROM") }
            if isSymbol("(") || isSymbol("[") || isSymbol("{") { depth += 1 }
            if isSymbol(")") || isSymbol("]") || isSymbol("}") { depth -= 1 }
            if depth == 0, isKeyword("FROM") { break }
            position += 1
        }
        let fromPosition = position
        position += 1
        try parseSource()
        try parseJoins()
        let afterSource = position
        position = selectStart
        repeat {
            plan.columns.append(try parseSelectColumn())
        } while acceptSymbol(",")
        guard position == fromPosition else { throw error("expected ',' or FROM") }
        position = afterSource

        if acceptKeyword("WHERE") { plan.whereClause = try parseExpression() }
        if acceptKeyword("GROUP") {
            try expectKeyword("BY")
            repeat { plan.groupBy.append(try parseExpression()) } while acceptSymbol(",")
        }
        if acceptKeyword("HAVING") { plan.having = try parseExpression() }
        if acceptKeyword("ORDER") {
            try expectKeyword("BY")
            repeat {
                let e = try parseExpression()
                var descending = false
                if acceptKeyword("DESC") { descending = true } else { _ = acceptKeyword("ASC") }
                plan.orderBy.append(OrderKey(expression: e, descending: descending))
            } while acceptSymbol(",")
        }
        // LIMIT and OFFSET in either order.
        for _ in 0..<2 {
            if plan.limit == nil, acceptKeyword("LIMIT") { plan.limit = try parseExpression() }
            if plan.offset == nil, acceptKeyword("OFFSET") { plan.offset = try parseExpression() }
        }
        _ = acceptSymbol(";")
        guard case .end = current.kind else { throw error("expected end of query") }
        return plan
    }

    private mutating func parseSource() throws(PeerSyncError) {
        let (source, first) = try parseSourceName("a collection name after FROM")
        plan.source = source
        sourceNames = source.alias.map { [$0] } ?? [source.collection, first == "_" ? "_" : source.collection]
    }

    /// `JOIN …` clauses after the `FROM` source: `[INNER] JOIN`, `LEFT [OUTER] JOIN` with
    /// `ON condition`, `CROSS JOIN` without. Each source's alias (or collection name) qualifies
    /// paths from there on.
    private mutating func parseJoins() throws(PeerSyncError) {
        while true {
            let kind: JoinClause.Kind
            let keyword = current
            if acceptKeyword("JOIN") {
                kind = .inner
            } else if isKeyword("INNER") {
                position += 1
                try expectKeyword("JOIN")
                kind = .inner
            } else if isKeyword("LEFT") {
                position += 1
                _ = acceptKeyword("OUTER")
                try expectKeyword("JOIN")
                kind = .leftOuter
            } else if isKeyword("CROSS") {
                position += 1
                try expectKeyword("JOIN")
                kind = .cross
            } else {
                return
            }
            let (source, _) = try parseSourceName("a collection name after JOIN")
            let name = source.alias ?? source.collection
            if sourceNames.contains(name) {
                throw self.error("the data source name '\(name)' is used twice (give the join an alias with AS)", at: keyword)
            }
            sourceNames.insert(name)
            var on: ExpressionNode?
            if kind != .cross {
                try expectKeyword("ON")
                on = try parseExpression()
            }
            plan.joins.append(JoinClause(kind: kind, source: source, on: on))
        }
    }

    /// `name | scope.name [[AS] alias]`; returns the source and the first name as written.
    private mutating func parseSourceName(_ what: String) throws(PeerSyncError) -> (SourceName, String) {
        let first = try identifier(what)
        var scope: String?
        var name = first
        if acceptSymbol(".") {
            scope = first
            name = try identifier("a collection name")
        }
        if scope == nil, name == "_" { name = "_default" }
        if scope == "_default" { scope = nil }
        var alias: String?
        if acceptKeyword("AS") {
            alias = try identifier("an alias after AS")
        } else if atIdentifier {
            alias = try identifier("an alias")
        }
        return (SourceName(scope: scope, collection: name, alias: alias), first)
    }

    private mutating func parseSelectColumn() throws(PeerSyncError) -> SelectColumn {
        var expression: ExpressionNode
        if acceptSymbol("*") {
            expression = .all(alias: nil)
        } else {
            expression = try parseExpression()
        }
        var alias: String?
        if acceptKeyword("AS") {
            alias = try identifier("a column name after AS")
        } else if atIdentifier {
            alias = try identifier("a column name")
        }
        return SelectColumn(expression: expression, alias: alias)
    }

    // MARK: Expressions (lowest precedence first)

    mutating func parseExpression() throws(PeerSyncError) -> ExpressionNode { try parseOr() }

    private mutating func parseOr() throws(PeerSyncError) -> ExpressionNode {
        var left = try parseAnd()
        while acceptKeyword("OR") { left = .binary(.or, left, try parseAnd()) }
        return left
    }

    private mutating func parseAnd() throws(PeerSyncError) -> ExpressionNode {
        var left = try parseNot()
        while acceptKeyword("AND") { left = .binary(.and, left, try parseNot()) }
        return left
    }

    private mutating func parseNot() throws(PeerSyncError) -> ExpressionNode {
        if acceptKeyword("NOT") { return .not(try parseNot()) }
        return try parseComparison()
    }

    private mutating func parseComparison() throws(PeerSyncError) -> ExpressionNode {
        let left = try parseConcat()
        if case .symbol(let s) = current.kind {
            let op: BinaryOperator?
            switch s {
            case "=", "==": op = .equal
            case "!=", "<>": op = .notEqual
            case "<": op = .less
            case "<=": op = .lessOrEqual
            case ">": op = .greater
            case ">=": op = .greaterOrEqual
            default: op = nil
            }
            if let op {
                position += 1
                return .binary(op, left, try parseConcat())
            }
        }
        let negated = isKeyword("NOT") && (isKeyword("LIKE", 1) || isKeyword("IN", 1) || isKeyword("BETWEEN", 1))
        if negated { position += 1 }
        var result: ExpressionNode?
        if acceptKeyword("LIKE") {
            result = .binary(.like, left, try parseConcat())
        } else if acceptKeyword("IN") {
            result = .in(left, try parseInList())
        } else if acceptKeyword("BETWEEN") {
            let lower = try parseConcat()
            try expectKeyword("AND")
            result = .between(left, lower, try parseConcat())
        } else if acceptKeyword("IS") {
            let not = acceptKeyword("NOT")
            if acceptKeyword("NULL") { return .test(left, not ? .notNull : .null) }
            if acceptKeyword("MISSING") { return .test(left, not ? .notMissing : .missing) }
            if acceptKeyword("VALUED") { return .test(left, not ? .notValued : .valued) }
            return .binary(not ? .isNot : .is, left, try parseConcat())
        }
        if let result { return negated ? .not(result) : result }
        return left
    }

    /// `(a, b, …)` or `[a, b, …]`.
    private mutating func parseInList() throws(PeerSyncError) -> [ExpressionNode] {
        let close: String
        if acceptSymbol("(") { close = ")" } else if acceptSymbol("[") { close = "]" } else {
            throw error("expected '(' or '[' after IN")
        }
        var items: [ExpressionNode] = []
        if !acceptSymbol(close) {
            repeat { items.append(try parseExpression()) } while acceptSymbol(",")
            try expectSymbol(close)
        }
        return items
    }

    private mutating func parseConcat() throws(PeerSyncError) -> ExpressionNode {
        var left = try parseAdditive()
        while acceptSymbol("||") { left = .binary(.concat, left, try parseAdditive()) }
        return left
    }

    private mutating func parseAdditive() throws(PeerSyncError) -> ExpressionNode {
        var left = try parseMultiplicative()
        while true {
            if acceptSymbol("+") { left = .binary(.add, left, try parseMultiplicative()) }
            else if acceptSymbol("-") { left = .binary(.subtract, left, try parseMultiplicative()) }
            else { return left }
        }
    }

    private mutating func parseMultiplicative() throws(PeerSyncError) -> ExpressionNode {
        var left = try parseUnary()
        while true {
            if acceptSymbol("*") { left = .binary(.multiply, left, try parseUnary()) }
            else if acceptSymbol("/") { left = .binary(.divide, left, try parseUnary()) }
            else if acceptSymbol("%") { left = .binary(.modulo, left, try parseUnary()) }
            else { return left }
        }
    }

    private mutating func parseUnary() throws(PeerSyncError) -> ExpressionNode {
        if acceptSymbol("-") {
            // `-5` is a negative literal; `-(5)` and `-x` negate.
            if case .number(let v) = current.kind {
                position += 1
                switch v {
                case .int(let i): return .literal(.int(-i))
                case .double(let d): return .literal(.double(-d))
                default: break
                }
            }
            return .negate(try parseUnary())
        }
        if acceptSymbol("+") { return try parseUnary() }
        return try parsePrimary()
    }

    private mutating func parsePrimary() throws(PeerSyncError) -> ExpressionNode {
        let token = current
        switch token.kind {
        case .number(let v):
            position += 1
            return .literal(v)
        case .string(let s):
            position += 1
            return .literal(.string(s))
        case .parameter(let name):
            position += 1
            return .parameter(name)
        case .symbol("("):
            position += 1
            let e = try parseExpression()
            try expectSymbol(")")
            return e
        case .symbol("["):
            position += 1
            var items: [ExpressionNode] = []
            if !acceptSymbol("]") {
                repeat { items.append(try parseExpression()) } while acceptSymbol(",")
                try expectSymbol("]")
            }
            return .makeArray(items)
        case .symbol("{"):
            position += 1
            var object: [String: JSONValue] = [:]
            if !acceptSymbol("}") {
                repeat {
                    let keyToken = current
                    guard case .string(let key) = current.kind else { throw error("expected a string key") }
                    position += 1
                    try expectSymbol(":")
                    guard case .literal(let v?) = try parseExpression() else {
                        throw error("object literals may hold only literal values", at: keyToken)
                    }
                    object[key] = v
                } while acceptSymbol(",")
                try expectSymbol("}")
            }
            return .literal(.object(object))
        case .identifier(let word):
            switch word.uppercased() {
            case "TRUE": position += 1; return .literal(.bool(true))
            case "FALSE": position += 1; return .literal(.bool(false))
            case "NULL": position += 1; return .literal(.null)
            case "MISSING": position += 1; return .literal(nil)
            default: break
            }
            if case .symbol("(") = tokens[position + 1].kind {
                return try parseCall(word, token)
            }
            return try parsePath()
        case .quotedIdentifier:
            return try parsePath()
        default:
            throw error("expected an expression")
        }
    }

    private mutating func parseCall(_ name: String, _ token: SQLToken) throws(PeerSyncError) -> ExpressionNode {
        position += 2  // name and '('
        let upper = name.uppercased()
        if upper == "META" {
            var alias: String?
            if !acceptSymbol(")") {
                alias = try identifier("a data source alias")
                try expectSymbol(")")
            }
            try expectSymbol(".")
            let keyToken = current
            let key = try identifier("a metadata name")
            let meta: MetaKey
            switch key.lowercased() {
            case "id": meta = .id
            case "sequence": meta = .sequence
            case "revisionid": meta = .revisionID
            case "deleted": meta = .deleted
            case "expiration": meta = .expiration
            default: throw error("unknown metadata '\(key)' (id, sequence, revisionID, deleted, expiration)", at: keyToken)
            }
            return .meta(meta, alias: alias)
        }
        if let aggregate = Aggregate(rawValue: upper) {
            let arg: ExpressionNode
            if aggregate == .count, acceptSymbol("*") {
                arg = .all(alias: nil)
            } else {
                arg = try parseExpression()
            }
            try expectSymbol(")")
            return .aggregate(aggregate, arg)
        }
        let function: ScalarFunction
        switch upper {
        case "CONTAINS": function = .arrayContains  // not SQL++; ARRAY_CONTAINS is
        default:
            guard let f = ScalarFunction(rawValue: upper) else {
                throw SQLParser.syntaxError("unknown function \(name)()", at: token.offset, in: chars)
            }
            function = f
        }
        var args: [ExpressionNode] = []
        if !acceptSymbol(")") {
            repeat { args.append(try parseExpression()) } while acceptSymbol(",")
            try expectSymbol(")")
        }
        guard function.arity.contains(args.count) else {
            throw SQLParser.syntaxError("\(function.rawValue)() takes \(function.arity.lowerBound)\(function.arity.count > 1 ? "–\(function.arity.upperBound)" : "") argument(s), not \(args.count)",
                                        at: token.offset, in: chars)
        }
        return .function(function, args)
    }

    /// `name(.name | [index])*`, `alias.name…`, `alias.*` is not an expression.
    private mutating func parsePath() throws(PeerSyncError) -> ExpressionNode {
        let first = try identifier("a property name")
        var alias: String?
        var path: [PathComponent] = []
        if sourceNames.contains(first), isSymbol(".") {
            alias = first
        } else {
            path.append(.key(first))
        }
        while true {
            if acceptSymbol(".") {
                if path.isEmpty, acceptSymbol("*") { return .all(alias: alias) }
                path.append(.key(try identifier("a property name after '.'")))
            } else if acceptSymbol("[") {
                var sign: Int64 = 1
                if acceptSymbol("-") { sign = -1 }
                guard case .number(.int(let i)) = current.kind else { throw error("expected an array index") }
                position += 1
                try expectSymbol("]")
                path.append(.index(Int(sign * i)))
            } else {
                break
            }
        }
        if path.isEmpty { throw error("expected a property after '\(first).'") }
        return .property(path, alias: alias)
    }
}
