import Testing
@testable import PeerSyncCore

@Suite struct JSONValueTests {
    @Test func parsesAndSerializesCanonically() throws {
        let value = try JSONValue(parsing: #" { "b" : [1, 2.5, true, null], "a" : "x\n\u00e9" } "#)
        #expect(value.canonicalString == #"{"a":"x\né","b":[1,2.5,true,null]}"#)
        #expect(value["b"]?.arrayValue?.count == 4)
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\\x\"", "tru", "{} x", "\"\u{01}\"", "\"\\ud800\""])
    func rejectsMalformedJSON(_ text: String) {
        #expect(throws: PeerSyncError.self) { try JSONValue(parsing: text) }
    }

    @Test func limitsNesting() {
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        #expect(throws: PeerSyncError.self) { try JSONValue(parsing: deep) }
    }

    @Test func integersAndDoublesCompare() throws {
        #expect(try JSONValue(parsing: "1") == JSONValue(parsing: "1.0"))
        #expect(JSONValue.double(3.0).canonicalString == "3")
        #expect(try JSONValue(parsing: "9223372036854775807") == .int(Int64.max))
    }

    /// Integers of up to 18 digits are summed directly, longer ones parsed from text: the
    /// same values either way, at the boundaries too.
    @Test func integersParseAtEveryLength() throws {
        var digits = ""
        for length in 1...19 {
            digits += String((length * 7) % 10 == 0 ? 1 : (length * 7) % 10)
            let value = try #require(Int64(digits))
            #expect(try JSONValue(parsing: digits) == .int(value), "\(digits)")
            #expect(try JSONValue(parsing: "-" + digits) == .int(-value), "-\(digits)")
            #expect(try JSONValue(parsing: "[\(digits),-\(digits)]") == .array([.int(value), .int(-value)]))
        }
        #expect(try JSONValue(parsing: "999999999999999999") == .int(999_999_999_999_999_999))
        #expect(try JSONValue(parsing: "-9223372036854775808") == .int(Int64.min))
        #expect(try JSONValue(parsing: "9223372036854775808") == .double(9_223_372_036_854_775_808))
        #expect(try JSONValue(parsing: "0") == .int(0))
        #expect(try JSONValue(parsing: "-0") == .int(0))
        #expect(try JSONValue(parsing: "12.5") == .double(12.5))
        #expect(try JSONValue(parsing: "12e2") == .double(1200))
        #expect(throws: PeerSyncError.self) { try JSONValue(parsing: "012") }
        #expect(throws: PeerSyncError.self) { try JSONValue(parsing: "-") }
    }

    /// Issue 9: user-facing entry points parse with `.strict`, which refuses duplicate keys
    /// (also when they differ only in Unicode normalisation, as they would overwrite each
    /// other); the default keeps "last one wins" for the replication path.
    @Test func strictParsingRefusesDuplicateKeys() throws {
        #expect(try JSONValue(parsing: #"{"a":1,"a":2}"#) == .object(["a": 2]))
        for text in [#"{"a":1,"a":2}"#, #"{"x":{"b":true,"b":true}}"#, #"[{"k":1,"j":2,"k":3}]"#, "{\"\u{e9}\":1,\"e\u{301}\":2}"] {
            let error = #expect(throws: PeerSyncError.self) { try JSONValue(parsing: text, options: .strict) }
            #expect(error?.code == .invalidJSON)
            #expect(error?.message.contains("duplicate key") == true)
        }
        let error = #expect(throws: PeerSyncError.self) { try JSONValue(parsing: Array(#"{"a":1, "a":2}"#.utf8), options: .strict) }
        #expect(error?.context["offset"] == "8")
        #expect(try JSONValue(parsing: #"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#, options: .strict)["b"]?.arrayValue?.count == 2)
    }

    /// Found while writing the json-delta fuzz target (seed
    /// Tools/fuzz/seeds/json-delta/regression-lossy-int-double-equality): `.int` vs `.double`
    /// compared through `Double(int)`, which rounds beyond 2^53, so 9007199254740993 equalled
    /// 9007199254740992.0 (which equals 9007199254740992) — `==` was not transitive.
    @Test func integerAndDoubleEqualityIsExact() throws {
        let big = try JSONValue(parsing: "9007199254740993")        // 2^53 + 1, an .int
        let rounded = try JSONValue(parsing: "9007199254740992.0")  // 2^53, a .double
        let exact = try JSONValue(parsing: "9007199254740992")      // 2^53, an .int
        #expect(big != rounded)
        #expect(rounded == exact)
        #expect(big != exact)
        #expect(JSONValue.int(.max) != .double(9_223_372_036_854_775_808.0))
        #expect(try JSONValue(parsing: #"{"n":9007199254740993}"#) != JSONValue(parsing: #"{"n":9007199254740992.0}"#))
        // Equal values still hash alike.
        #expect(rounded.hashValue == exact.hashValue)
        #expect(JSONValue.int(3) == .double(3.0) && JSONValue.int(3).hashValue == JSONValue.double(3.0).hashValue)
    }

    /// Found by the json-delta fuzz target: equal values must serialize to equal bytes (the
    /// revision digest hashes them), also for integral doubles of 1e15 and more.
    @Test func equalNumbersHaveOneCanonicalForm() throws {
        for (double, int) in [(1.0, Int64(1)), (1e15, 1_000_000_000_000_000), (-4e18, -4_000_000_000_000_000_000),
                              (9.007199254740992e15, 9_007_199_254_740_992)] {
            #expect(JSONValue.double(double) == .int(int))
            #expect(JSONValue.double(double).canonicalString == JSONValue.int(int).canonicalString, "\(double)")
        }
        #expect(JSONValue.double(1.5e15 + 0.5).canonicalString != "1500000000000000")
    }

    @Test func surrogatePairs() throws {
        #expect(try JSONValue(parsing: #""\ud83d\ude00""#) == .string("😀"))
    }
}

@Suite struct IdentifierTests {
    @Test func documentIDRules() throws {
        #expect(throws: PeerSyncError.self) { try DocumentID.validate("") }
        #expect(throws: PeerSyncError.self) { try DocumentID.validate(String(repeating: "a", count: 256)) }
        try DocumentID.validate(String(repeating: "a", count: 255))
        #expect(DocumentID.generate() != DocumentID.generate())
    }

    /// Issue 9: NUL separates BLIP properties, so an ID holding one can never be replicated;
    /// the other C0 controls and DEL are refused with it. Printable Unicode stays allowed.
    @Test func documentIDRefusesControlCharacters() throws {
        for id in ["a\u{0}b", "\u{0}", "a\u{1}", "tab\there", "line\nbreak", "\u{1F}x", "del\u{7F}"] {
            let error = #expect(throws: PeerSyncError.self) { try DocumentID.validate(id) }
            #expect(error?.code == .invalidDocumentID)
            #expect(error?.message.contains("control character") == true)
        }
        let nul = #expect(throws: PeerSyncError.self) { try DocumentID.validate("a\u{0}b") }
        #expect(nul?.message.contains("NUL at byte 1") == true)
        #expect(nul?.context["docID"] == "a\\u{0}b")
        #expect(throws: PeerSyncError.self) { _ = try DocumentID.validate(bytes: [0x61, 0x00, 0x62]) }
        for id in ["a b", "é", "日本", "😀", "-_.~!$&'()*+,;=:@", "\u{80}\u{9F}"] { try DocumentID.validate(id) }
    }

    @Test func sha1KnownAnswers() {
        #expect(SHA1.hash(Array("abc".utf8)).hexString == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(SHA1.hash([]).hexString == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        var h = SHA1()
        million.withUnsafeBytes { h.update(buffer: $0) }
        #expect(h.finalize().hexString == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test func revisionIDs() throws {
        let id = try RevisionID("3-abcdef")
        #expect(id.generation == 3 && id.digest == "abcdef")
        var text = "key\u{0}"
        id.append(to: &text)
        #expect(text == "key\u{0}3-abcdef")
        for bad in ["", "3", "-ab", "0-ab", "3-ABC", "3-abc", "x-ab", "3-"] {
            #expect(throws: PeerSyncError.self) { try RevisionID(bad) }
        }
        let first = RevisionID.next(parent: nil, deleted: false, canonicalBody: Array("{}".utf8))
        let again = RevisionID.next(parent: nil, deleted: false, canonicalBody: Array("{}".utf8))
        #expect(first == again && first.generation == 1 && first.digest.count == 40)
        let second = RevisionID.next(parent: first, deleted: true, canonicalBody: [])
        #expect(second.generation == 2 && second > first)
        // Text round trip (the parser reads in place; a substring's UTF-8 and a long
        // generation included), and the error cases' messages.
        for text in ["1-aa", "18446744073709551-\(String(repeating: "0f", count: 20))", "12-\(String(repeating: "e", count: 128))"] {
            #expect(try RevisionID(text).description == text)
            #expect(try RevisionID(String(("x" + text + "y").dropFirst().dropLast())).description == text)
        }
        for (bad, message) in [("1x-ab", "revision generation is not a number"), ("ab", "revision ID must be <generation>-<digest>")] {
            let error = #expect(throws: PeerSyncError.self) { try RevisionID(bad) }
            #expect(error?.code == .invalidRevisionID && error?.message == message && error?.context["revID"] == bad)
        }
        #expect(throws: PeerSyncError.self) { try RevisionID("1-\(String(repeating: "a", count: 130))") }
        // Hex of a collection (written in place) and of a plain sequence agree.
        let bytes: [UInt8] = [0x00, 0x0f, 0xa5, 0xff]
        #expect(bytes.hexString == "000fa5ff" && bytes[1...].hexString == "0fa5ff")
        #expect(AnySequence(bytes).hexString == "000fa5ff" && [UInt8]().hexString == "")
        let history = try RevisionHistory(parsing: "3-aa, 2-bb,1-cc")
        #expect(history.revisions.count == 3 && history.description == "3-aa,2-bb,1-cc")
        #expect(throws: PeerSyncError.self) { try RevisionHistory(parsing: "3-aa,1-cc") }
    }
}

@Suite struct LoggingTests {
    @Test func fileSinkRotates() throws {
        let dir = "/tmp/peersync-log-\(UInt64.random(in: 0...UInt64.max))"
        let sink = try FileLogSink(directory: dir, level: .info, maxSize: 1024, maxKeptFiles: 2)
        for i in 0..<200 { sink.write(level: .info, domain: .database, message: "line \(i) padding padding") }
        let files = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        #expect(files == ["peersync.1.log", "peersync.2.log", "peersync.log"])
        try FileManager.default.removeItem(atPath: dir)
    }

    @Test func customSinkFiltersByLevelAndDomain() {
        let received = Mutex<[String]>([])
        LogSinks.custom = CustomLogSink(level: .info, domains: .replicator) { level, domain, message in
            received.withLock { $0.append("\(level) \(domain) \(message)") }
        }
        defer { LogSinks.custom = nil }
        Logger(.replicator).info("kept")
        Logger(.replicator).debug("too verbose")
        Logger(.database).error("other domain")
        #expect(received.withLock { $0 } == ["INFO Replicator kept"])
    }
}

import Foundation
import Synchronization

@Suite struct JSONValueLiteralTests {
    /// `["title": "pid \(x)"]` is a JSON object literal: an interpolated string literal is a
    /// `.string` like a plain one, at any depth.
    @Test func interpolatedStringLiteralsAreStrings() {
        let pid = 42
        let value: JSONValue = ["title": "pid \(pid)", "tags": ["next \(pid + 1)", "plain"], "n": 1]
        #expect(value["title"] == .string("pid 42"))
        #expect(value["tags"] == .array([.string("next 43"), .string("plain")]))
        #expect(value["n"] == .int(1))
        let properties: [String: JSONValue] = ["greeting": "hello \("world")"]
        #expect(properties["greeting"] == .string("hello world"))
    }
}
