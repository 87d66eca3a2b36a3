import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
import PeerSyncSQLite
import PeerSyncSQLiteBaseline

/// Prints PeerSync's rates beside raw SQLite's for the same work. Not a timed assertion: it
/// only checks that both did the work. Off unless `PEERSYNC_SQLITE_BENCH` is set (N records,
/// default 100000); meaningful only in a release build:
///
///     PEERSYNC_SQLITE_BENCH=100000 swift test -c release -Xswiftc -enable-testing --filter benchmark
@Test(.enabled(if: ProcessInfo.processInfo.environment["PEERSYNC_SQLITE_BENCH"] != nil,
               "set PEERSYNC_SQLITE_BENCH=<records> to run"))
func benchmarkAgainstRawSQLite() throws {
    let count = Int(ProcessInfo.processInfo.environment["PEERSYNC_SQLITE_BENCH"] ?? "") ?? 100_000
    let bodyBytes = body(7, size: 1000)
    var generator = SystemRandomNumberGenerator()
    let keys = (0..<count).map { _ in "doc-\(UInt64.random(in: 0...UInt64.max, using: &generator))" }
    let sample = (0..<min(count, 20_000)).map { _ in keys[Int.random(in: 0..<count)] }
    let dir = try TempDirectory()

    /// CPU time of this thread (user + system), in seconds: far less disturbed than wall time
    /// by other processes competing for the cores.
    func threadCPUTime() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
    func measure(_ body: () throws -> Void) rethrows -> Double {
        let start = threadCPUTime()
        try body()
        return threadCPUTime() - start
    }
    func line(_ what: String, _ n: Int, ours: Double, raw: Double?) {
        var text = what.padding(toLength: 12, withPad: " ", startingAt: 0)
            + String(format: "%8d ops  peersync %9.0f/s", n, Double(n) / ours)
        if let raw { text += String(format: "  raw sqlite %9.0f/s  time ratio %.2fx", Double(n) / raw, ours / raw) }
        print(text)
    }
    /// The fastest of three runs (reads only: they can be repeated).
    func best(_ body: () throws -> Void) rethrows -> Double {
        var times: [Double] = []
        for _ in 0..<3 { times.append(try measure(body)) }
        return times.min() ?? 0
    }

    // Raw first and PeerSync second, each in its own file.
    let raw = try SQLiteRawBaseline(path: dir.file("raw.sqlite3"))
    let rawInsert = try measure { try raw.insert(count: count) { (keys[$0], bodyBytes) } }
    var rawFound = 0
    let rawReads = try best { rawFound = try raw.pointReads(sample) }
    var rawScanned = 0
    let rawScan = try best { rawScanned = try raw.scan().records }
    try raw.close()

    let storage = try SQLiteStorageBackend().open(directory: dir.file("store"), options: StorageOptions())
    defer { try? storage.close() }
    let insert = try measure {
        try storage.write { writer throws in
            for key in keys { try writer.put(Record(key: key, body: bodyBytes), in: "bench") }
        }
    }
    var found = 0
    let reads = try best {
        found = 0
        try storage.read { reader throws in
            for key in sample where try reader.get(key, in: "bench") != nil { found += 1 }
        }
    }
    var scanned = 0
    let scan = try best {
        scanned = 0
        try storage.read { reader throws in
            try reader.enumerate(in: "bench") { _ in scanned += 1; return true }
        }
    }
    var bySequence = 0
    let sequenceScan = try best {
        bySequence = 0
        try storage.read { reader throws in
            try reader.enumerate(in: "bench", since: 0) { _ in bySequence += 1; return true }
        }
    }

    print("SQLite storage benchmark, \(count) records of \(bodyBytes.count) bytes, durable commits (rates per CPU second)")
    line("bulk insert", count, ours: insert, raw: rawInsert)
    line("point read", sample.count, ours: reads, raw: rawReads)
    line("key scan", count, ours: scan, raw: rawScan)
    line("seq scan", count, ours: sequenceScan, raw: nil)

    let distinct = Set(keys).count
    #expect(found == sample.count && rawFound == sample.count)
    #expect(scanned == distinct && rawScanned == distinct && bySequence == distinct)
}
