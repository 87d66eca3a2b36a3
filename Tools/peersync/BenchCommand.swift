import PeerSyncCore
import Foundation
import PeerSync
@_spi(Replication) import PeerSyncDatabase
#if SQLite
import PeerSyncSQLiteBaseline
#endif
#if LMDB
import PeerSyncLMDBBaseline
#endif

/// `peersync bench storage|...`: benchmark programs that print our figures beside a baseline
/// measured in the same run. Never used as timed assertions in tests.
enum BenchCommand {
    /// The benchmarks (each has a ``CommandHelp`` entry).
    static let subjects = ["storage", "transport", "sync", "mesh", "query"]

    static func run(_ args: [String]) async throws -> Int32 {
        guard let what = args.first else { throw UsageError("bench needs a subject: storage, transport, sync, mesh or query") }
        switch what {
        case "storage":
            return try await StorageBenchmark.run(Array(args.dropFirst()))
        case "transport":
            return try await runTransport(Array(args.dropFirst()))
        case "sync":
            return try await SyncBenchmark.run(Array(args.dropFirst()))
        case "mesh":
            return try await MeshBenchmark.run(Array(args.dropFirst()))
        case "query":
            return try await QueryBenchmark.run(Array(args.dropFirst()))
        default:
            throw UsageError("unknown benchmark '\(what)' (available: storage, transport, sync, mesh, query)")
        }
    }

    /// `peersync bench transport [--json] [--transports loopback,ws,wss,ble] [--sizes 1024,65536]
    /// [--total-mb 100] [--repeat 3] [--idle 1000]`
    static func runTransport(_ args: [String]) async throws -> Int32 {
        let parsed = try Arguments(args, valueOptions: ["transports", "sizes", "total-mb", "repeat", "idle"],
                                   flagOptions: ["json"])
        try parsed.expectPositionals(0)
        var options = TransportBenchmark.Options()
        options.json = parsed.flag("json")
        if let list = parsed.value("transports") {
            let names = list.split(separator: ",").map(String.init)
            let available = TransportBenchmark.availableTransports
            guard !names.isEmpty, names.allSatisfy({ available.contains($0) }) else {
                throw UsageError("--transports takes a list of \(available.joined(separator: ", "))")
            }
            options.transports = names
        }
        if let list = parsed.value("sizes") {
            let sizes = list.split(separator: ",").compactMap { Int($0) }
            guard !sizes.isEmpty, sizes.allSatisfy({ $0 > 0 }) else { throw UsageError("--sizes takes positive byte counts") }
            options.sizes = sizes
        }
        if let mb = try parsed.int("total-mb") {
            guard mb > 0 else { throw UsageError("--total-mb must be at least 1") }
            options.totalBytes = mb << 20
        }
        if let n = try parsed.int("repeat") {
            guard n > 0 else { throw UsageError("--repeat must be at least 1") }
            options.repeatCount = n
        }
        if let n = try parsed.int("idle") {
            guard n > 0 else { throw UsageError("--idle must be at least 1") }
            options.idleConnections = n
        }
        #if DEBUG
        printError("peersync bench: note: this is a debug build; build with -c release for meaningful figures")
        #endif
        try await TransportBenchmark.run(options)
        return 0
    }
}

/// One measured figure: our rate beside the raw C library's rate for the same work.
struct BenchResult {
    var benchmark: String
    var backend: String
    var docs: Int
    var ours: Double       // docs per second
    var baseline: Double   // docs per second

    var slowdown: Double { ours > 0 ? baseline / ours : .infinity }

    var json: String {
        let object: JSONValue = [
            "benchmark": .string(benchmark), "backend": .string(backend), "docs": .int(Int64(docs)),
            "docs_per_s": .double(ours.rounded()), "baseline_docs_per_s": .double(baseline.rounded()),
            "slowdown": .double((slowdown * 100).rounded() / 100),
        ]
        return object.canonicalString
    }
}

func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
    let fill = String(repeating: " ", count: max(0, width - text.count))
    return right ? fill + text + " " : text + fill + " "
}

func measure(_ body: () async throws -> Void) async rethrows -> Double {
    let clock = ContinuousClock()
    let elapsed = try await clock.measure { try await body() }
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// `peersync bench storage [--docs N] [--backend sqlite|lmdb|all] [--saves N] [--reads N]
/// [--write-docs N] [--rounds N] [--json]`
enum StorageBenchmark {
    static func run(_ args: [String]) async throws -> Int32 {
        let parsed = try Arguments(args, valueOptions: ["docs", "backend", "saves", "reads", "write-docs", "rounds"],
                                   flagOptions: ["json"])
        try parsed.expectPositionals(0)
        let docs = try parsed.int("docs") ?? 100_000
        let saves = try parsed.int("saves") ?? 2_000
        let reads = try parsed.int("reads") ?? 20_000
        let scaling = ReaderScaling.Options(writeDocs: try parsed.int("write-docs") ?? 20_000,
                                            rounds: try parsed.int("rounds") ?? 3)
        guard docs > 0 else { throw UsageError("--docs must be at least 1") }
        guard scaling.writeDocs > 0, scaling.rounds > 0 else { throw UsageError("--write-docs and --rounds must be at least 1") }
        let json = parsed.flag("json")
        let requested = parsed.value("backend") ?? "all"
        var backends = StorageBackends.all.filter { $0.name != "memory" }
        if requested != "all" {
            guard let b = StorageBackends.named(requested), b.name != "memory" else {
                throw UsageError("unknown backend '\(requested)'")
            }
            backends = [b]
        }
        #if DEBUG
        printError("peersync bench: note: this is a debug build; build with -c release for meaningful figures")
        #endif

        let workload = Workload(count: docs)
        if !json {
            print("storage benchmark: \(docs) documents of ~\(workload.averageBodySize) bytes, \(saves) durable saves, \(reads) random reads")
            print(pad("benchmark", 14) + pad("backend", 8) + pad("ours docs/s", 14, right: true)
                  + pad("raw docs/s", 14, right: true) + pad("slowdown", 10, right: true))
        }
        var scalings: [ReaderScaling] = []
        let progress = ProgressLine("bench storage", unit: "backends")
        progress.update(0, of: backends.count)
        for backend in backends {
            let (results, scaling) = try await benchmark(backend: backend, workload: workload, saves: saves, reads: reads,
                                                         scaling: scaling)
            scalings.append(scaling)
            if scalings.count == backends.count {
                progress.finish(scalings.count, of: backends.count)
            } else {
                ProgressLine.clearOpenLine()
            }
            for r in results {
                if json {
                    print(r.json)
                } else {
                    print(pad(r.benchmark, 14) + pad(r.backend, 8) + pad(String(Int(r.ours.rounded())), 14, right: true)
                          + pad(String(Int(r.baseline.rounded())), 14, right: true)
                          + pad(String(format: "%.2fx", r.slowdown), 10, right: true))
                }
            }
            progress.update(scalings.count, of: backends.count)
        }
        if !json {
            print("8 concurrent readers during a bulk write of \(scaling.writeDocs) documents "
                  + "(reads/s, median [min–max] of \(scaling.rounds) rounds, 1 and 8 readers in turns):")
        }
        for s in scalings { print(json ? s.json : s.line) }
        return 0
    }

    /// The documents: deterministic ~1 KB JSON objects.
    struct Workload {
        let ids: [String]
        let bodies: [[String: JSONValue]]
        let canonical: [[UInt8]]

        init(count: Int) {
            var ids: [String] = [], bodies: [[String: JSONValue]] = [], canonical: [[UInt8]] = []
            ids.reserveCapacity(count); bodies.reserveCapacity(count); canonical.reserveCapacity(count)
            for i in 0..<count {
                let (id, body) = Self.document(i)
                ids.append(id)
                bodies.append(body)
                canonical.append(JSONValue.object(body).canonicalData)
            }
            self.ids = ids
            self.bodies = bodies
            self.canonical = canonical
        }

        /// Document number `i` of every workload: its ID and ~1 KB body (deterministic, so
        /// benchmarks can generate any range of it without holding all of it in memory).
        static func document(_ i: Int) -> (id: String, body: [String: JSONValue]) {
            let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
            let id = String(format: "doc-%08d", i)
            var text = ""
            var k = UInt(i)
            while text.utf8.count < 760 { text += words[Int(k % UInt(words.count))] + " "; k = k &* 31 &+ 7 }
            let body: [String: JSONValue] = [
                "index": .int(Int64(i)), "name": .string("Document number \(i)"),
                "tags": .array([.string(words[i % 10]), .string(words[(i / 10) % 10])]),
                "price": .double(Double(i % 1000) / 10 + 0.25), "active": .bool(i % 3 != 0),
                "address": ["street": .string("\(i % 977) Main Street"), "city": .string("Springfield"), "zip": .string(String(10000 + i % 89999))],
                "text": .string(text),
            ]
            return (id, body)
        }

        var averageBodySize: Int { canonical.isEmpty ? 0 : canonical.prefix(1000).reduce(0) { $0 + $1.count } / min(1000, canonical.count) }
    }

    static func benchmark(backend: any StorageBackend, workload: Workload, saves: Int, reads: Int,
                          scaling: ReaderScaling.Options) async throws -> ([BenchResult], ReaderScaling) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-bench-\(getpid())-\(backend.name)").path
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let n = workload.ids.count
        var results: [BenchResult] = []
        let raw = try RawStore(backend: backend.name, directory: root + "/raw")
        defer { raw.close() }

        // 1. Bulk insert in one batch.
        let db = try await Database(path: root + "/ours", config: DatabaseConfiguration(directory: root, backend: backend))
        let collection = try db.defaultCollection()
        let bodies = workload.bodies, ids = workload.ids
        let oursBulk = try await measure {
            _ = try await db.inBatch { txn in
                for i in 0..<n {
                    var doc = MutableDocument(id: ids[i], data: bodies[i])
                    try txn.save(document: &doc, in: collection)
                }
            }
        }
        let rawBulk = try await measure { try raw.insert(workload.ids, workload.canonical) }
        results.append(BenchResult(benchmark: "bulk_insert", backend: backend.name, docs: n,
                                   ours: Double(n) / oursBulk, baseline: Double(n) / rawBulk))

        // 2. Single-document durable saves, one transaction each.
        let saveCount = min(saves, n)
        let oursSaves = try await measure {
            for i in 0..<saveCount {
                var doc = MutableDocument(id: "save-" + ids[i], data: bodies[i])
                try await collection.save(document: &doc)
            }
        }
        let rawSaves = try await measure {
            for i in 0..<saveCount { try raw.insert(["save-" + ids[i]], [workload.canonical[i]]) }
        }
        results.append(BenchResult(benchmark: "durable_save", backend: backend.name, docs: saveCount,
                                   ours: Double(saveCount) / oursSaves, baseline: Double(saveCount) / rawSaves))

        // 3. Random reads by ID (same keys for both).
        var generator = SeededGenerator(seed: 42)
        let keys = (0..<reads).map { _ in ids[Int(generator.next() % UInt64(n))] }
        var found = 0
        let oursReads = try await measure {
            for key in keys where try await collection.document(id: key) != nil { found += 1 }
        }
        guard found == keys.count else { throw PeerSyncError(.internalError, "bench: \(keys.count - found) reads missed") }
        let rawReads = try await measure {
            let rawFound = try raw.get(keys)
            guard rawFound == keys.count else { throw PeerSyncError(.internalError, "bench: raw reads missed") }
        }
        results.append(BenchResult(benchmark: "random_read", backend: backend.name, docs: reads,
                                   ours: Double(reads) / oursReads, baseline: Double(reads) / rawReads))

        // 4. Full enumeration of every document.
        var enumerated = 0
        let oursScan = try await measure { enumerated = try await collection.allDocuments().count }
        var rawCount = 0
        let rawScan = try await measure { rawCount = try raw.scan() }
        results.append(BenchResult(benchmark: "enumerate", backend: backend.name, docs: enumerated,
                                   ours: Double(enumerated) / oursScan, baseline: Double(rawCount) / rawScan))

        // 5. Changes since sequence 0 (what replication reads); the raw baseline is a full scan.
        var changeCount = 0
        let oursChanges = try await measure { changeCount = try await collection.changes(since: 0).count }
        let rawChanges = try await measure { rawCount = try raw.scan() }
        results.append(BenchResult(benchmark: "changes_since", backend: backend.name, docs: changeCount,
                                   ours: Double(changeCount) / oursChanges, baseline: Double(rawCount) / rawChanges))

        // 6. Random reads by 1 and by 8 concurrent readers while a bulk write runs.
        let readerScaling = try await ReaderScaling.measure(collection, backend: backend.name, keys: keys,
                                                            bodies: workload.bodies, options: scaling)
        try await db.close()
        return (results, readerScaling)
    }
}

/// `bench storage` row 6: random reads (``Collection/document(id:)``, as row 3) by 1 reader
/// task and by 8 concurrent reader tasks, each for exactly as long as one `inBatch` writing
/// `writeDocs` new documents takes. The two are measured in turns, `rounds` times, so a busy
/// machine skews both alike; medians are compared. Also reports how long single reads took
/// during the writes (median, 99th percentile, longest) beside the shortest write: a read
/// that waited for the writer would take about as long as the write. (On a machine whose CPUs
/// are oversubscribed the longest read also counts the time its threads waited for a CPU.)
struct ReaderScaling {
    struct Options {
        var writeDocs: Int
        var rounds: Int
    }

    let backend: String
    let options: Options
    /// Reads per second of each round.
    var oneReader: [Double] = []
    var eightReaders: [Double] = []
    /// How long each read took, every round.
    var readLatencies: [Double] = []
    var shortestWriteSeconds = Double.infinity

    var ratio: Double { median(oneReader) > 0 ? median(eightReaders) / median(oneReader) : 0 }

    static func measure(_ collection: Collection, backend: String, keys: [String], bodies: [[String: JSONValue]],
                        options: Options) async throws -> ReaderScaling {
        var result = ReaderScaling(backend: backend, options: options)
        for round in 0..<options.rounds {
            for readers in [1, 8] {
                let prefix = "scaling-\(round)-\(readers)-"
                let (latencies, readSeconds) = try await readWhileWriting(collection, readers: readers, keys: keys) {
                    _ = try await collection.database.inBatch { txn in
                        for i in 0..<options.writeDocs {
                            var doc = MutableDocument(id: prefix + String(i), data: bodies[i % bodies.count])
                            try txn.save(document: &doc, in: collection)
                        }
                    }
                }
                let rate = Double(latencies.count) / readSeconds
                if readers == 1 { result.oneReader.append(rate) } else { result.eightReaders.append(rate) }
                result.readLatencies += latencies
                result.shortestWriteSeconds = min(result.shortestWriteSeconds, readSeconds)
            }
        }
        return result
    }

    /// Runs `write` and, until it returns, `readers` tasks reading random `keys` one at a
    /// time. Returns how long each read took and how long the write took.
    private static func readWhileWriting(_ collection: Collection, readers: Int, keys: [String],
                                         _ write: @escaping @Sendable () async throws -> Void) async throws
        -> (readLatencies: [Double], seconds: Double) {
        let writing = LockedValue(true)
        let clock = ContinuousClock()
        let start = clock.now
        return try await withThrowingTaskGroup(of: [Double].self) { group in
            group.addTask {
                defer { writing.withLock { $0 = false } }
                try await write()
                return []
            }
            for reader in 0..<readers {
                group.addTask {
                    var generator = SeededGenerator(seed: UInt64(reader + 1))
                    var latencies: [Double] = []
                    while writing.withLock({ $0 }) {
                        let key = keys[Int(generator.next() % UInt64(keys.count))]
                        let began = clock.now
                        guard try await collection.document(id: key) != nil else {
                            throw PeerSyncError(.internalError, "bench: a read missed \(key)")
                        }
                        latencies.append((clock.now - began).seconds)
                    }
                    return latencies
                }
            }
            var latencies: [Double] = []
            for try await readerLatencies in group { latencies += readerLatencies }
            return (latencies, (clock.now - start).seconds)
        }
    }

    private func median(_ values: [Double]) -> Double { TransportBenchmark.median(values) }
    private func latency(_ percentile: Double) -> Double { TransportBenchmark.percentile(readLatencies, percentile) }

    private func summary(_ values: [Double]) -> String {
        "\(Int(median(values).rounded())) [\(Int((values.min() ?? 0).rounded()))–\(Int((values.max() ?? 0).rounded()))]"
    }

    var line: String {
        pad(backend, 8) + "1 reader " + summary(oneReader) + ", 8 readers " + summary(eightReaders)
            + String(format: ": %.2fx; reads took %.0f µs median, %.1f ms p99, %.1f ms at most; shortest write %.0f ms",
                     ratio, latency(0.5) * 1e6, latency(0.99) * 1000, latency(1) * 1000, shortestWriteSeconds * 1000)
    }

    var json: String {
        let object: JSONValue = [
            "benchmark": "readers_during_bulk_write", "backend": .string(backend),
            "write_docs": .int(Int64(options.writeDocs)), "rounds": .int(Int64(options.rounds)),
            "one_reader_reads_per_s": .array(oneReader.map { .double($0.rounded()) }),
            "eight_readers_reads_per_s": .array(eightReaders.map { .double($0.rounded()) }),
            "ratio": .double((ratio * 100).rounded() / 100),
            "read_median_us": .double((latency(0.5) * 1e6).rounded()),
            "read_p99_ms": .double((latency(0.99) * 10_000).rounded() / 10),
            "read_max_ms": .double((latency(1) * 10_000).rounded() / 10),
            "shortest_write_ms": .double((shortestWriteSeconds * 1000).rounded()),
        ]
        return object.canonicalString
    }
}

/// The raw C-library baseline of a backend, through the backend module's own baseline type.
struct RawStore {
    private let insertBody: ([String], [[UInt8]]) throws -> Void
    private let getBody: ([String]) throws -> Int
    private let scanBody: () throws -> Int
    private let closeBody: () -> Void

    init(backend: String, directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        switch backend {
        #if SQLite
        case "sqlite":
            let raw = try SQLiteRawBaseline(path: directory + "/raw.sqlite3")
            insertBody = { keys, bodies in try raw.insert(count: keys.count) { (keys[$0], bodies[$0]) } }
            getBody = { try raw.pointReads($0) }
            scanBody = { try raw.scan().records }
            closeBody = { try? raw.close() }
        #endif
        #if LMDB
        case "lmdb":
            let raw = try LMDBRawBaseline(directory: directory, mapSize: 4 << 30)
            insertBody = { keys, bodies in
                try raw.insert(zip(keys, bodies).map { Record(key: $0.0, body: $0.1) })
            }
            getBody = { try raw.get($0) }
            scanBody = { try raw.scan().count }
            closeBody = { raw.close() }
        #endif
        default:
            throw PeerSyncError(.invalidArgument, "no raw baseline for backend \(backend)")
        }
    }

    func insert(_ keys: [String], _ bodies: [[UInt8]]) throws { try insertBody(keys, bodies) }
    func get(_ keys: [String]) throws -> Int { try getBody(keys) }
    func scan() throws -> Int { try scanBody() }
    func close() { closeBody() }
}

typealias SeededGenerator = SplitMix64
