import PeerSyncCore
import Testing
@testable import PeerSyncQuery

/// The pure parts: collation, MISSING/NULL rules, LIKE, functions.
@Suite struct EvaluatorTests {
    let evaluator = Evaluator(parameters: ["n": 3])
    let document = QueryDocument(id: "d1", sequence: 7, revisionID: "2-ab", isDeleted: false, expiration: nil,
                                 properties: ["a": 1, "s": "Hello", "z": nil, "t": ["x", 2, true],
                                              "o": ["b": ["c": 2.5]]])

    func eval(_ e: Expression) throws -> JSONValue? { try evaluator.evaluate(e.node, document) }

    @Test func collationOrdersTypesAsCouchbaseLite() {
        let ordered: [JSONValue?] = [nil, .null, false, true, -1, 0.5, 1, 2, "", "B", "a", "é", [], [1], [1, 2], [2], [:], ["a": 1]]
        for (i, a) in ordered.enumerated() {
            for (j, b) in ordered.enumerated() {
                #expect(Collation.compare(a, b) == (i < j ? -1 : i == j ? 0 : 1), "\(String(describing: a)) vs \(String(describing: b))")
            }
        }
        #expect(Collation.compare(.int(1), .double(1)) == 0)
        #expect(Collation.compare(.int(Int64.max), .double(9.3e18)) == -1)
        #expect(Collation.compare(.double(2.5), .int(2)) == 1)
    }

    @Test func missingAndNullPropagate() throws {
        let missing = Expression.property("nope"), null = Expression.property("z")
        #expect(try eval(missing) == nil)
        #expect(try eval(null) == .null)
        #expect(try eval(missing.equalTo(.int(1))) == nil)
        #expect(try eval(null.equalTo(.int(1))) == .null)
        #expect(try eval(missing.add(null)) == nil)
        #expect(try eval(null.add(.int(1))) == .null)
        #expect(try eval(Expression.property("s").add(.int(1))) == .null)
        #expect(try eval(missing.and(.boolean(false))) == .bool(false))
        #expect(try eval(missing.and(.boolean(true))) == nil)
        #expect(try eval(null.or(.boolean(true))) == .bool(true))
        #expect(try eval(null.or(.boolean(false))) == .null)
        #expect(try eval(.not(missing)) == nil)
        #expect(try eval(missing.isValued()) == .bool(false))
        #expect(try eval(null.isNotValued()) == .bool(true))
        #expect(try eval(Expression.property("a").isValued()) == .bool(true))
        #expect(try eval(missing.is(.missing)) == .bool(true))
        #expect(try eval(null.is(.null)) == .bool(true))
        #expect(try eval(null.isNot(.missing)) == .bool(true))
        #expect(try eval(missing.in([.int(1)])) == nil)
        #expect(try eval(Function.upper(missing)) == nil)
        #expect(try eval(Function.upper(null)) == .null)
    }

    @Test func comparisonsAcrossTypesFollowTheCollation() throws {
        #expect(try eval(Expression.property("a").equalTo(.string("1"))) == .bool(false))
        #expect(try eval(Expression.property("a").lessThan(.string("1"))) == .bool(true))
        #expect(try eval(Expression.boolean(true).lessThan(.int(0))) == .bool(true))
        #expect(try eval(Expression.property("a").equalTo(.double(1))) == .bool(true))
        #expect(try eval(Expression.property("a").between(.int(0), and: .int(1))) == .bool(true))
        #expect(try eval(Expression.property("s").in([.string("x"), .string("Hello")])) == .bool(true))
    }

    @Test func pathsMetaParametersAndFunctions() throws {
        #expect(try eval(.property("o.b.c")) == .double(2.5))
        #expect(try eval(.property("t[1]")) == .int(2))
        #expect(try eval(.property("t[-1]")) == .bool(true))
        #expect(try eval(.property("t[3]")) == nil)
        #expect(try eval(.property("s.x")) == nil)
        #expect(try eval(Meta.id) == "d1")
        #expect(try eval(Meta.sequence) == 7)
        #expect(try eval(Meta.revisionID) == "2-ab")
        #expect(try eval(Meta.isDeleted) == false)
        #expect(try eval(Meta.expiration) == nil)
        #expect(try eval(.parameter("n")) == 3)
        #expect(try eval(.parameter("unset")) == nil)
        #expect(try eval(Function.lower(.property("s"))) == "hello")
        #expect(try eval(Function.upper(.string("straße"))) == "STRASSE")
        #expect(try eval(Function.length(.string("日本🙂"))) == 3)
        #expect(try eval(Function.trim(.string("  a b \t"))) == "a b")
        #expect(try eval(Function.abs(.int(-4))) == 4)
        #expect(try eval(Function.round(.double(2.5))) == 3)
        #expect(try eval(Function.round(.double(-2.5))) == -3)
        #expect(try eval(Function.round(.double(1.2345), digits: .int(2))) == .double(1.23))
        #expect(try eval(ArrayFunction.contains(.property("t"), value: .int(2))) == true)
        #expect(try eval(ArrayFunction.contains(.property("s"), value: .int(2))) == .null)
        #expect(try eval(ArrayFunction.length(.property("t"))) == 3)
        #expect(try eval(Expression.int(7).divide(.int(2))) == .double(3.5))
        #expect(try eval(Expression.int(6).divide(.int(3))) == .int(2))
        #expect(try eval(Expression.int(6).divide(.int(0))) == .null)
        #expect(try eval(Expression.int64(.max).add(.int(1))) == .double(9.223372036854775808e18))
        #expect(try eval(Expression.property("s").regex(.string("^H.l+o$"))) == true)
        #expect(try eval(Expression.property("s").regex(.string("ell"))) == true)
        #expect(throws: PeerSyncError.self) { try eval(Expression.property("s").regex(.string("("))) }
    }

    @Test func likeIsCaseSensitiveWithWildcardsAndEscapes() {
        #expect(Like.matches("Hello", pattern: "H%o"))
        #expect(Like.matches("Hello", pattern: "H_llo"))
        #expect(!Like.matches("Hello", pattern: "h%"))
        #expect(Like.matches("日本🙂", pattern: "日_🙂"))
        #expect(Like.matches("100%", pattern: "100\\%"))
        #expect(!Like.matches("1000", pattern: "100\\%"))
        #expect(Like.matches("a_b", pattern: "a\\_b"))
        #expect(!Like.matches("axb", pattern: "a\\_b"))
        #expect(Like.matches("", pattern: "%"))
        #expect(Like.matches("abcabc", pattern: "%b%c"))
        #expect(!Like.matches("abcab", pattern: "%b%c"))
    }

    @Test func propertyPathsParse() {
        #expect(PropertyPath.parse("a.b[0]") == [.key("a"), .key("b"), .index(0)])
        #expect(PropertyPath.parse("a\\.b") == [.key("a.b")])
        #expect(PropertyPath.parse("t[-1]") == [.key("t"), .index(-1)])
    }
}
