import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncDatabase

/// The document API a Couchbase Lite port reaches for: saving a document passed by value
/// (top-level code cannot pass `&doc` to an async call), and documents from and to Foundation
/// values and Codable types.
@Suite struct PortingTests {
    @Test(arguments: Backend.available)
    func saveByValueReturnsTheSavedDocument(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let tasks = try db.defaultCollection()
            let first = try await tasks.save(document: MutableDocument(id: "t1", data: ["title": "one"]))
            #expect(first.revisionID?.hasPrefix("1-") == true)
            #expect(first.sequence > 0)
            var edited = first
            edited.setString("two", forKey: "title")
            let second = try await tasks.save(document: edited)
            #expect(second.revisionID?.hasPrefix("2-") == true)
            #expect(try await tasks.document(id: "t1")?.revisionID == second.revisionID)
            #expect(try await tasks.document(id: "t1")?.string(forKey: "title") == "two")

            // `.failOnConflict` refuses a save based on a stale revision: nil, nothing changed.
            var stale = first
            stale.setString("stale", forKey: "title")
            #expect(try await tasks.save(document: stale, concurrencyControl: .failOnConflict) == nil)
            #expect(try await tasks.document(id: "t1")?.string(forKey: "title") == "two")
            let third = try #require(try await tasks.save(document: second, concurrencyControl: .failOnConflict))
            #expect(third.revisionID?.hasPrefix("3-") == true)

            // Errors are those of the inout form.
            let reserved = MutableDocument(id: "bad", data: ["_id": "x"])
            let error = await #expect(throws: PeerSyncError.self) { try await tasks.save(document: reserved) }
            #expect(error?.code == .invalidArgument)
        }
    }

    @Test func foundationValuesBridgeBothWays() throws {
        let born = Date(timeIntervalSince1970: 1_700_000_000.25)
        let optionalNone: Int? = nil
        let dictionary: [String: Any] = [
            "name": "Ada", "age": 36, "ratio": 0.5, "admin": true, "none": NSNull(), "missing": optionalNone as Any,
            "optional": Optional("here") as Any, "big": UInt64.max, "born": born,
            "tags": ["a", 1, false] as [Any], "address": ["city": "London", "zip": Int16(7)] as [String: Any],
            "nan": Double.nan, "number": NSNumber(value: 7), "fraction": NSNumber(value: 2.5),
        ]
        let doc = try MutableDocument(id: "ada", dictionary: dictionary)
        #expect(doc["name"] == "Ada")
        #expect(doc["age"] == .int(36))
        #expect(doc["ratio"] == .double(0.5))
        #expect(doc["admin"] == .bool(true))
        #expect(doc["none"] == .null)
        #expect(doc["missing"] == .null)
        #expect(doc["optional"] == "here")
        #expect(doc["big"] == .double(Double(UInt64.max)))
        #expect(doc.date(forKey: "born") == born)
        #expect(doc["tags"] == ["a", 1, false])
        #expect(doc["address"] == ["city": "London", "zip": 7])
        #expect(doc["nan"] == .null)
        #expect(doc["number"] == .int(7))
        #expect(doc["fraction"] == .double(2.5))

        // Back to Foundation, and round trip.
        let back = doc.toDictionary()
        #expect(back["name"] as? String == "Ada")
        #expect(back["age"] as? Int == 36)
        #expect(back["admin"] as? Bool == true)
        #expect(back["none"] is NSNull)
        #expect((back["tags"] as? [Any])?.count == 3)
        #expect((back["address"] as? [String: Any])?["city"] as? String == "London")
        #expect(try MutableDocument(id: "ada", dictionary: back).properties == doc.properties)

        // JSONSerialization's output bridges too (its booleans and numbers are NSNumbers).
        let parsed = try JSONSerialization.jsonObject(with: Data(#"{"b":true,"i":12,"d":1.5,"s":"x","a":[null]}"#.utf8))
        let fromJSON = try JSONValue(any: parsed)
        #expect(fromJSON == ["b": true, "i": 12, "d": 1.5, "s": "x", "a": [nil]])

        // What JSON cannot hold is refused, and a failed setData changes nothing.
        var target = doc
        let error = #expect(throws: PeerSyncError.self) { try target.setData(dictionary: ["data": Data([1, 2])]) }
        #expect(error?.code == .invalidArgument)
        #expect(error?.context["type"] == "Data")
        #expect(target.properties == doc.properties)
        try target.setData(dictionary: ["only": "this"])
        #expect(target.properties == ["only": "this"])
    }

    struct TaskItem: Codable, Equatable {
        var title: String
        var done: Bool
        var due: Date
    }

    /// A Codable value saved as a document and read back as the same value.
    @Test(arguments: Backend.available)
    func codableValuesSaveAndLoad(_ backend: Backend) async throws {
        try await withDatabase(backend) { db, _ in
            let tasks = try db.defaultCollection()
            let task = TaskItem(title: "water the plants", done: false, due: Date(timeIntervalSince1970: 1_800_000_000))
            try await tasks.save(document: try MutableDocument(id: "water", encoding: task))
            let stored = try #require(try await tasks.document(id: "water"))
            #expect(try stored.decode(as: TaskItem.self) == task)
            #expect(try stored.toMutable().decode(as: TaskItem.self) == task)
        }
    }
}

/// `JSONValue` as a property of a `Codable` model: free-form JSON inside a typed document.
@Suite struct JSONValueCodableTests {
    struct Note: Codable, Equatable {
        var title: String
        var extra: JSONValue
    }

    @Test func aModelWithFreeFormJSONRoundTripsThroughADocument() throws {
        let note = Note(title: "n", extra: ["tags": ["a", 1, 2.5, true, nil], "by": "pid \(7)", "nested": ["x": [:]]])
        let doc = try MutableDocument(id: "note", encoding: note)
        #expect(doc["extra"] == note.extra)
        #expect(try doc.decode(as: Note.self) == note)

        let value: JSONValue = ["big": .int(Int64.max), "neg": -3, "d": 0.1, "s": "é\"\\", "empty": []]
        let bytes = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: bytes) == value)
        #expect(try JSONValue(parsing: Array(bytes)) == value)
    }
}
