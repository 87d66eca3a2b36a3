// A second process for PeerSyncLMDBTests' multi-process cases, and a benchmark driver.
//
//   PeerSyncLMDBTestHelper grow <dir> <count> <bodyBytes>   write `count` records in one transaction
//   PeerSyncLMDBTestHelper hold <dir> <milliseconds>         hold a write transaction open
//   PeerSyncLMDBTestHelper increment <dir> <times>           `times` read-modify-write transactions
//   PeerSyncLMDBTestHelper check <dir>                       open, read everything, check integrity
//   PeerSyncLMDBTestHelper bench [count] [bodyBytes] [dir]   PeerSync vs raw mdb_put/mdb_get/scan
//
// Prints one result line on standard output; errors go to standard error with exit code 1.

import Foundation
import PeerSyncCore
import PeerSyncLMDB
import PeerSyncLMDBBaseline
import PeerSyncStorage

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("PeerSyncLMDBTestHelper: \(message)\n".utf8))
    exit(1)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func number(_ args: [String], _ index: Int, default value: Int? = nil) -> Int {
    if index < args.count, let n = Int(args[index]) { return n }
    if let value { return value }
    fail("argument \(index) must be a number")
}

func counterValue(_ record: Record?) -> Int {
    guard let record else { return 0 }
    return Int(String(decoding: record.body, as: UTF8.self)) ?? 0
}

func run(_ args: [String]) throws {
    guard args.count >= 2 else { fail("usage: grow|hold|increment|bench ...") }
    let backend = LMDBStorageBackend()
    switch args[1] {
    case "grow":
        guard args.count >= 5 else { fail("usage: grow <dir> <count> <bodyBytes>") }
        let storage = try backend.open(directory: args[2], options: StorageOptions(initialSize: 1 << 20))
        let count = number(args, 3), size = number(args, 4)
        let body = [UInt8](repeating: 0x42, count: size)
        let last = try storage.write { w in
            for i in 0..<count { try w.put(Record(key: "child-\(i)", body: body), in: "child") }
            return try w.lastSequence(in: "child")
        }
        try storage.close()
        say("\(last)")
    case "hold":
        guard args.count >= 4 else { fail("usage: hold <dir> <milliseconds>") }
        let storage = try backend.open(directory: args[2], options: StorageOptions())
        let ms = number(args, 3)
        try storage.write { w in
            try w.put(Record(key: "holder", body: Array("held".utf8)), in: "child")
            say("locked")
            usleep(UInt32(ms) * 1000)
        }
        try storage.close()
        say("released")
    case "increment":
        guard args.count >= 4 else { fail("usage: increment <dir> <times>") }
        let storage = try backend.open(directory: args[2], options: StorageOptions(busyTimeout: .seconds(60)))
        for _ in 0..<number(args, 3) {
            try storage.write { w in
                let value = counterValue(try w.get("counter", in: "shared"))
                try w.put(Record(key: "counter", body: Array(String(value + 1).utf8)), in: "shared")
            }
        }
        try storage.close()
        say("done")
    case "check":
        // Exit 0 if the store opens and reads; exit 1 (via `fail`) on a typed error.
        guard args.count >= 3 else { fail("usage: check <dir>") }
        var options = StorageOptions()
        options.create = false
        let storage = try backend.open(directory: args[2], options: options)
        var records = 0
        try storage.read { r in
            for keyspace in try r.keyspaces() {
                try r.enumerate(in: keyspace) { _ in records += 1; return true }
                try r.enumerate(in: keyspace, since: 0) { _ in records += 1; return true }
            }
        }
        try storage.close()
        let problems = try backend.checkIntegrity(directory: args[2])
        say("\(records) records, \(problems.count) problems")
    case "bench":
        try bench(count: number(args, 2, default: 100_000), bodyBytes: number(args, 3, default: 1000),
                  directory: args.count > 4 ? args[4] : nil)
    default:
        fail("unknown command \(args[1])")
    }
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
}

func bench(count: Int, bodyBytes: Int, directory: String?) throws {
    let root = directory ?? (NSTemporaryDirectory() + "peersync-lmdb-bench-\(getpid())")
    defer { if directory == nil { try? FileManager.default.removeItem(atPath: root) } }
    var generator = SystemRandomNumberGenerator()
    let records = (0..<count).map { i in
        Record(key: "doc-\(String(format: "%08d", i))-\(UInt32.random(in: 0...UInt32.max, using: &generator))",
               body: (0..<bodyBytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }.shuffled()
    let lookups = records.map(\.key).shuffled()
    let clock = ContinuousClock()
    func rate(_ n: Int, _ d: Duration) -> String { String(format: "%10.0f/s", Double(n) / max(seconds(d), 1e-9)) }
    let mapSize = max(1 << 30, count * (bodyBytes + 200) * 3)

    // PeerSync on LMDB (default 64 MiB initial map: includes map growth) and with a presized map.
    for (label, initial) in [("lmdb (growing map)", 0), ("lmdb (presized map)", mapSize)] {
        let dir = root + "/store-\(initial)"
        let storage = try LMDBStorageBackend().open(directory: dir,
                                                    options: StorageOptions(durable: false, initialSize: initial))
        let insert = try clock.measure {
            try storage.write { w in for r in records { try w.put(r, in: "bench") } }
        }
        var found = 0
        let get = try clock.measure {
            try storage.read { r in for k in lookups where try r.get(k, in: "bench") != nil { found += 1 } }
        }
        var scanned = 0
        let scan = try clock.measure {
            try storage.read { r in try r.enumerate(in: "bench") { _ in scanned += 1; return true } }
        }
        try storage.close()
        guard found == count, scanned == count else { fail("\(label): found \(found), scanned \(scanned) of \(count)") }
        say("\(label.padding(toLength: 22, withPad: " ", startingAt: 0)) insert \(rate(count, insert))  get \(rate(count, get))  scan \(rate(count, scan))")
    }

    let raw = try LMDBRawBaseline(directory: root + "/raw", mapSize: mapSize, durable: false)
    let insert = try clock.measure { try raw.insert(records) }
    var found = 0
    let get = try clock.measure { found = try raw.get(lookups) }
    var scanned = 0
    let scan = try clock.measure { scanned = try raw.scan().count }
    raw.close()
    guard found == count, scanned == count else { fail("raw: found \(found), scanned \(scanned) of \(count)") }
    say("\("raw mdb_put/get/cursor".padding(toLength: 22, withPad: " ", startingAt: 0)) insert \(rate(count, insert))  get \(rate(count, get))  scan \(rate(count, scan))")
}

do {
    try run(CommandLine.arguments)
} catch {
    fail("\(error)")
}
