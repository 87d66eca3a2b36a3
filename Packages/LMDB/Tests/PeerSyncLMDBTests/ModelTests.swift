import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncLMDB

typealias SeededGenerator = SplitMix64

/// The storage contract as plain Swift collections.
struct Model {
    struct Keyspace {
        var records: [String: Record] = [:]
        var last: UInt64 = 0
    }
    var keyspaces: [String: Keyspace] = [:]

    static func less(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }

    mutating func put(_ record: Record, _ ks: String) -> UInt64 {
        var space = keyspaces[ks] ?? Keyspace()
        space.last += 1
        var stored = record
        stored.sequence = space.last
        space.records[record.key] = stored
        keyspaces[ks] = space
        return space.last
    }

    mutating func delete(_ key: String, _ ks: String) -> UInt64? {
        guard var record = keyspaces[ks]?.records[key] else { return nil }
        record.flags.insert(.deleted)
        record.body = []
        return put(record, ks)
    }

    mutating func purge(_ key: String, _ ks: String) -> Bool {
        keyspaces[ks]?.records.removeValue(forKey: key) != nil
    }

    mutating func drop(_ ks: String) { keyspaces[ks] = nil }

    func inKeyOrder(_ ks: String, _ range: KeyRange = .all, descending: Bool = false) -> [Record] {
        let sorted = (keyspaces[ks]?.records.values.filter { range.contains($0.key) } ?? [])
            .sorted { Self.less($0.key, $1.key) }
        return descending ? sorted.reversed() : sorted
    }

    func inSequenceOrder(_ ks: String, since: UInt64) -> [Record] {
        (keyspaces[ks]?.records.values.filter { $0.sequence > since } ?? []).sorted { $0.sequence < $1.sequence }
    }
}

@Suite struct ModelTests {
    struct Rollback: Error {}

    static let alphabet: [Character] = ["a", "b", "é", "0"]

    func randomKey(_ rng: inout SeededGenerator) -> String {
        String((0..<Int.random(in: 0...3, using: &rng)).map { _ in Self.alphabet.randomElement(using: &rng)! })
    }

    func randomRange(_ rng: inout SeededGenerator) -> KeyRange {
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: return .all
        case 1: return .prefix(randomKey(&rng))
        default:
            return KeyRange(from: Bool.random(using: &rng) ? randomKey(&rng) : nil,
                            to: Bool.random(using: &rng) ? randomKey(&rng) : nil,
                            includesUpperBound: Bool.random(using: &rng))
        }
    }

    func randomRecord(_ rng: inout SeededGenerator) -> Record {
        let bodySize = Int.random(in: 0..<100, using: &rng) == 0 ? 150_000 : Int.random(in: 0..<40, using: &rng)
        return Record(key: randomKey(&rng), flags: Bool.random(using: &rng) ? [] : .conflicted,
                      version: (0..<Int.random(in: 0..<5, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) },
                      body: [UInt8](repeating: UInt8.random(in: 0...255, using: &rng), count: bodySize),
                      extra: (0..<Int.random(in: 0..<5, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
    }

    /// One random write on both sides; returns a description of any disagreement.
    func randomWrite(_ w: any StorageWriter, _ model: inout Model, _ rng: inout SeededGenerator) throws -> String? {
        let ks = ["x", "y", "z"].randomElement(using: &rng)!
        switch Int.random(in: 0..<20, using: &rng) {
        case 0..<10:
            let record = randomRecord(&rng)
            let got = try w.put(record, in: ks)
            let want = model.put(record, ks)
            return got == want ? nil : "put \(record.key) in \(ks): \(got) != \(want)"
        case 10..<14:
            let key = randomKey(&rng)
            let got = try w.delete(key, in: ks)
            let want = model.delete(key, ks)
            return got == want ? nil : "delete \(key) in \(ks): \(String(describing: got)) != \(String(describing: want))"
        case 14..<18:
            let key = randomKey(&rng)
            let got = try w.purge(key, in: ks)
            let want = model.purge(key, ks)
            return got == want ? nil : "purge \(key) in \(ks): \(got) != \(want)"
        default:
            try w.dropKeyspace(ks)
            model.drop(ks)
            return nil
        }
    }

    @Test(arguments: [1, 2, 3])
    func randomTransactionsMatchTheModel(seed: UInt64) throws {
        try withTemporaryDirectory { dir in
            var rng = SeededGenerator(state: seed)
            let storage = try openStore(dir, initialSize: 1 << 20, durable: false)
            defer { try? storage.close() }
            var model = Model()
            var mismatches: [String] = []
            for round in 0..<60 {
                var working = model
                let rollback = Int.random(in: 0..<5, using: &rng) == 0
                do {
                    try storage.write { w throws in
                        for _ in 0..<Int.random(in: 1...30, using: &rng) {
                            if Int.random(in: 0..<8, using: &rng) == 0 {
                                // A walk that writes as it goes must see the state it started from.
                                let ks = ["x", "y", "z"].randomElement(using: &rng)!
                                if Bool.random(using: &rng) {
                                    let range = randomRange(&rng)
                                    let descending = Bool.random(using: &rng)
                                    let expected = working.inKeyOrder(ks, range, descending: descending)
                                    var seen: [Record] = []
                                    try w.enumerate(in: ks, range: range, descending: descending) { record in
                                        seen.append(record)
                                        if let problem = try randomWrite(w, &working, &rng) { mismatches.append(problem) }
                                        return true
                                    }
                                    if seen != expected { mismatches.append("round \(round): walk of \(ks) \(range) desc=\(descending)") }
                                } else {
                                    let since = UInt64.random(in: 0...(working.keyspaces[ks]?.last ?? 0), using: &rng)
                                    let expected = working.inSequenceOrder(ks, since: since)
                                    var seen: [Record] = []
                                    try w.enumerate(in: ks, since: since) { record in
                                        seen.append(record)
                                        if let problem = try randomWrite(w, &working, &rng) { mismatches.append(problem) }
                                        return true
                                    }
                                    if seen != expected { mismatches.append("round \(round): walk of \(ks) since \(since)") }
                                }
                            } else if let problem = try randomWrite(w, &working, &rng) {
                                mismatches.append("round \(round): \(problem)")
                            }
                        }
                        if rollback { throw Rollback() }
                    }
                    model = working
                } catch is Rollback {
                    // The model keeps its state from before the transaction.
                }
                try storage.read { r throws in
                    let names = model.keyspaces.keys.sorted { Model.less($0, $1) }
                    if try r.keyspaces() != names { mismatches.append("round \(round): keyspaces") }
                    for ks in names {
                        if try allRecords(r, ks) != model.inKeyOrder(ks) { mismatches.append("round \(round): records of \(ks)") }
                        var bySequence: [Record] = []
                        try r.enumerate(in: ks, since: 0) { bySequence.append($0); return true }
                        if bySequence != model.inSequenceOrder(ks, since: 0) { mismatches.append("round \(round): sequence order of \(ks)") }
                        let records = model.keyspaces[ks]?.records.values.map { $0 } ?? []
                        if try r.count(in: ks, includeDeleted: true) != records.count
                            || r.count(in: ks, includeDeleted: false) != records.filter({ !$0.flags.contains(.deleted) }).count {
                            mismatches.append("round \(round): counts of \(ks)")
                        }
                        if try r.lastSequence(in: ks) != model.keyspaces[ks]?.last { mismatches.append("round \(round): last sequence of \(ks)") }
                        let range = randomRange(&rng)
                        let descending = Bool.random(using: &rng)
                        var ranged: [Record] = []
                        try r.enumerate(in: ks, range: range, descending: descending) { ranged.append($0); return true }
                        if ranged != model.inKeyOrder(ks, range, descending: descending) {
                            mismatches.append("round \(round): range \(range) desc=\(descending) of \(ks)")
                        }
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
            #expect(try LMDBStorageBackend().checkIntegrity(directory: dir) == [])
        }
    }
}
