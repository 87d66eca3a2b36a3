import Foundation
import PeerSyncCore
import Testing
@testable import PeerSyncDatabase

@Suite struct DocumentTests {
    @Test func typedSettersAndGetters() throws {
        var doc = MutableDocument(id: "d")
        let date = Date(timeIntervalSince1970: 1_700_000_000.123)
        doc.setString("hello", forKey: "s")
        doc.setInt(42, forKey: "i")
        doc.setInt64(Int64.max, forKey: "big")
        doc.setDouble(2.5, forKey: "d")
        doc.setDouble(.nan, forKey: "nan")
        doc.setBool(true, forKey: "b")
        doc.setDate(date, forKey: "date")
        doc.setArray([1, "two", [3]], forKey: "a")
        doc.setDictionary(["x": 1, "nested": ["y": true]], forKey: "o")
        doc["sub"] = .string("script")
        doc.setValue(.null, forKey: "null")

        #expect(doc.string(forKey: "s") == "hello")
        #expect(doc.string(forKey: "i") == nil)
        #expect(doc.int(forKey: "i") == 42)
        #expect(doc.int64(forKey: "big") == Int64.max)
        #expect(doc.int(forKey: "d") == 2)
        #expect(doc.double(forKey: "d") == 2.5)
        #expect(doc.double(forKey: "i") == 42)
        #expect(doc.value(forKey: "nan") == .null)
        #expect(doc.bool(forKey: "b"))
        #expect(!doc.bool(forKey: "null") && !doc.bool(forKey: "missing"))
        #expect(doc.int(forKey: "b") == 1)
        #expect(doc.int(forKey: "missing") == 0 && doc.double(forKey: "s") == 0)
        let readDate = try #require(doc.date(forKey: "date"))
        #expect(abs(readDate.timeIntervalSince(date)) < 0.001)
        #expect(doc.string(forKey: "date") == "2023-11-14T22:13:20.123Z")
        #expect(doc.date(forKey: "s") == nil)
        #expect(doc.array(forKey: "a") == [1, "two", [3]])
        #expect(doc.dictionary(forKey: "o")?["nested"]?["y"] == true)
        #expect(doc["sub"] == "script")
        #expect(doc.contains(key: "null") && !doc.contains(key: "missing"))
        #expect(doc.count == 11)
        #expect(doc.keys == doc.keys.sorted())

        doc.removeValue(forKey: "s")
        doc.setString(nil, forKey: "sub")
        #expect(!doc.contains(key: "s") && !doc.contains(key: "sub"))
    }

    @Test func nestedPaths() {
        var doc = MutableDocument(id: "n")
        doc.setValue("Paris", at: ["address", "city"])
        doc.setValue(75, at: ["address", "zip"])
        doc.setValue(1, at: ["a", "b", "c"])
        #expect(doc.value(at: ["address", "city"]) == "Paris")
        #expect(doc.dictionary(forKey: "address") == ["city": "Paris", "zip": 75])
        #expect(doc.value(at: ["a", "b", "c"]) == 1)
        doc.setValue(nil, at: ["address", "zip"])
        #expect(doc.dictionary(forKey: "address") == ["city": "Paris"])
        #expect(doc.value(at: ["nope", "x"]) == nil)
    }

    @Test func jsonRoundTrip() throws {
        let doc = try MutableDocument(id: "j", json: #"{"b":[1,2.5,null],"a":"x"}"#)
        #expect(doc.toJSON() == #"{"a":"x","b":[1,2.5,null]}"#)
        #expect(doc.id == "j" && doc.revisionID == nil)
        #expect(MutableDocument().id != MutableDocument().id)
        #expect(MutableDocument().id.hasPrefix("-"))
    }

    @Test(arguments: ["[1,2]", "\"text\"", "42", "null"])
    func nonObjectJSONIsRejected(_ json: String) {
        #expect(throws: PeerSyncError.self) { try MutableDocument(id: "x", json: json) }
        do {
            _ = try MutableDocument(id: "x", json: json)
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test(arguments: ["{", "{\"a\":}", "", "{\"a\":1}x"])
    func malformedJSONIsRejected(_ json: String) {
        do {
            _ = try MutableDocument(id: "x", json: json)
            Issue.record("accepted malformed JSON \(json)")
        } catch {
            #expect(error.code == .invalidJSON)
        }
    }

    struct Person: Codable, Equatable {
        var name: String
        var age: Int
        var born: Date
        var tags: [String]
        var address: Address?
        struct Address: Codable, Equatable { var city: String }
    }

    @Test func codableRoundTrip() throws {
        let person = Person(name: "Ada", age: 36, born: Date(timeIntervalSince1970: -4_000_000_000), tags: ["math"],
                            address: .init(city: "London"))
        let doc = try MutableDocument(id: "ada", encoding: person)
        #expect(doc.string(forKey: "name") == "Ada")
        #expect(doc.date(forKey: "born") == person.born)
        #expect(doc.value(at: ["address", "city"]) == "London")
        let decoded = try doc.decode(as: Person.self)
        #expect(decoded == person)
        #expect(throws: (any Error).self) { try MutableDocument(id: "x", encoding: [1, 2, 3]) }
        #expect(throws: (any Error).self) { try doc.decode(as: [Int].self) }
    }

    @Test func blobReferenceInDocument() {
        var doc = MutableDocument(id: "b")
        let blob = Blob(contentType: "text/plain", data: Data("hello".utf8))
        doc.setBlob(blob, forKey: "file")
        #expect(doc.dictionary(forKey: "file")?["@type"] == "blob")
        #expect(doc.dictionary(forKey: "file")?["digest"] == .string(blob.digest))
        #expect(doc.dictionary(forKey: "file")?["length"] == 5)
        #expect(doc.dictionary(forKey: "file")?["content_type"] == "text/plain")
        #expect(doc.blob(forKey: "file") == blob)
        #expect(doc.blob(forKey: "missing") == nil)
        // SHA-1("hello") = aaf4c61d…, base64.
        #expect(blob.digest == "sha1-qvTGHdzF6KLavt4PO0gs2a6pQ00=")
    }
}
