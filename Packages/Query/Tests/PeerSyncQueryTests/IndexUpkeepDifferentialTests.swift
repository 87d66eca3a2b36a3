import Foundation
import PeerSyncCore
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncQuery

/// A save computes its index entries from the properties it holds, not by parsing the body it
/// just encoded (`PreparedDocumentIndexer.entryKeys(documentID:properties:)` and, for an
/// insert, `forEachEntryKey`). The stored body is the properties' canonical form, so the keys
/// must be those computed from the stored bytes: checked here, both ways, over the differential
/// test's seeded random documents (and the same documents with the numbers canonical JSON
/// changes: integral and non-finite doubles, -0.0, doubles beyond the `Int64` range), for plain
/// properties, nested paths, array elements, functions and arithmetic, alone and mixed in one
/// index.
@Suite struct IndexUpkeepDifferentialTests {
    static let definitions: [[String]] = [
        ["n"], ["x"], ["s"], ["k", "n"], ["a.b"], ["a.c", "s"], ["t"], ["t[0]"], ["t[-1]"], ["a"], ["o"], ["o.p"],
        ["o.q.r"], ["名"], ["nope"], ["lower(s)"], ["n + 1", "k"], ["k", "upper(s)", "n"], ["n * 2"], ["abs(n)"],
        ["length(s)"], ["x", "x = 2"],
    ]

    /// The generator's documents, then each again with its numbers replaced by doubles that
    /// canonical JSON writes differently (or not at all).
    static func documents() -> [(id: String, properties: [String: JSONValue])] {
        var generator = Generator(seed: DifferentialTests.seed)
        let generated = generator.documents(count: 300).map { ($0.id, $0.body) }
        let doubles: [Double] = [.nan, .infinity, -.infinity, -0.0, 2.0, -7.0, 1e15, 9.1e18, 1e19, 0.5, 1e-300]
        var rng = SplitMix64(seed: DifferentialTests.seed)
        func swapNumbers(_ value: JSONValue) -> JSONValue {
            switch value {
            case .int(let i): return Bool.random(using: &rng) ? .double(Double(i)) : .double(doubles.randomElement(using: &rng)!)
            case .double: return .double(doubles.randomElement(using: &rng)!)
            case .array(let items): return .array(items.map(swapNumbers))
            case .object(let members): return .object(members.mapValues(swapNumbers))
            default: return value
            }
        }
        let changed = generated.map { ("dbl-" + $0.0, $0.1.mapValues(swapNumbers)) }
        return generated + changed
    }

    @Test func keysFromPropertiesAreTheKeysFromTheStoredBody() throws {
        let indexer = QueryIndexer.installed
        // Each definition alone (plain paths take the lookup path, others the evaluator), and
        // all of them prepared together (one list mixing both).
        let lists = IndexUpkeepDifferentialTests.definitions.map { [$0] } + [IndexUpkeepDifferentialTests.definitions]
        var compared = 0
        for list in lists {
            let prepared = try indexer.prepare(list.enumerated().map { IndexDefinition(name: "i\($0.offset)", expressions: $0.element) })
            for (id, properties) in IndexUpkeepDifferentialTests.documents() {
                let body = JSONValue.object(properties).canonicalData
                let fromBody = try prepared.entryKeys(documentID: id, body: body)
                let fromProperties = try prepared.entryKeys(documentID: id, properties: properties)
                #expect(fromProperties == fromBody, "\(list) on \(String(decoding: body, as: UTF8.self))")
                // Key by key (an insert's upkeep): the same keys, each with its definition.
                var visited = Array(repeating: [String](), count: list.count)
                try prepared.forEachEntryKey(documentID: id, properties: properties) { visited[$0].append($1) }
                #expect(visited == fromBody, "forEachEntryKey: \(list) on \(String(decoding: body, as: UTF8.self))")
                compared += 1
            }
        }
        #expect(compared == lists.count * 600)
    }

    /// End to end: documents saved with such numbers hold the entries computed from what was
    /// stored (NaN is stored as null, 2.0 as 2, …), on every backend.
    @Test(arguments: Backend.available)
    func savedNumbersAreIndexedAsStored(_ backend: Backend) async throws {
        try await withDatabase(backend) { db in
            let c = try await db.createCollection(name: "docs")
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            try await c.createIndex(withName: "byNested", config: ValueIndexConfiguration(["o.v", "abs(n)"]))
            let numbers: [Double] = [.nan, .infinity, -.infinity, -0.0, 2.0, 2.5, 1e19]
            try await db.inBatch { txn in
                for (i, d) in numbers.enumerated() {
                    var doc = MutableDocument(id: "d\(i)", data: ["n": .double(d), "o": ["v": .array([.double(d)])]])
                    try txn.save(document: &doc, in: c)
                }
            }
            _ = try await c.save(document: MutableDocument(id: "one", data: ["n": .double(.nan)]))
            try await IndexTests.expectConsistent(c, "byN", ["n"])
            try await IndexTests.expectConsistent(c, "byNested", ["o.v", "abs(n)"])
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE n IS NULL ORDER BY meta().id") == ["d0", "d1", "d2", "one"])
            #expect(try await IndexTests.ids(db, "SELECT meta().id FROM docs WHERE n = 2") == ["d4"])
        }
    }
}
