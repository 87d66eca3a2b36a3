import Foundation
import PeerSync
#if SQLite
import PeerSyncSQLiteBaseline
#endif

/// `peersync bench query [--docs 100000] [--repeat 3] [--backend sqlite|lmdb] [--json] [--streamed]
/// [--upkeep-only plain|indexed|both] [--loop SECONDS]`: the
/// same documents in our database and in a plain SQLite table (`SQLiteJSONDocuments`, the JSON
/// as text) with expression indexes on `json_extract`; each query run in turns, ours then
/// SQLite's, `--repeat` times (a query under ~20 ms timed over a batch of runs, the same batch
/// for both); median (min–max) milliseconds per run and the ratio to SQLite.
/// Index upkeep: a bulk insert with the indexes against the same insert without them, ours
/// and SQLite's, `--repeat` rounds in turns, each into fresh stores; the ratio is per round.
/// `--streamed`: ``StreamedQueryBenchmark`` instead. `--upkeep-only`: only our bulk inserts
/// (without indexes, with them, or both), each round's seconds, no SQLite and no queries: a
/// short run to profile the index upkeep. `--loop SECONDS`: after the table, each of the three
/// indexed cases again, ours then SQLite's, each run in a loop for SECONDS, printed as
/// microseconds per run (a steadier figure for a case's fixed cost, and a loop to profile).
enum QueryBenchmark {
    struct Case {
        var name: String
        var ours: String
        var sqlite: String
    }

    static let cases = [
        Case(name: "indexed =", ours: "SELECT meta().id, n FROM docs WHERE type = 'type42'",
             sqlite: "SELECT id, json_extract(body, '$.n') FROM docs WHERE json_extract(body, '$.type') = 'type42'"),
        Case(name: "range+order+limit", ours: "SELECT meta().id, n FROM docs WHERE n >= 5000 ORDER BY n LIMIT 20",
             sqlite: "SELECT id, json_extract(body, '$.n') FROM docs WHERE json_extract(body, '$.n') >= 5000 ORDER BY json_extract(body, '$.n') LIMIT 20"),
        // Not a goal of its own: what one run costs before any row (the fixed part of the two above).
        Case(name: "indexed =, no row", ours: "SELECT meta().id, n FROM docs WHERE type = 'none'",
             sqlite: "SELECT id, json_extract(body, '$.n') FROM docs WHERE json_extract(body, '$.type') = 'none'"),
        Case(name: "scan predicate", ours: "SELECT meta().id, v FROM docs WHERE v < 10",
             sqlite: "SELECT id, json_extract(body, '$.v') FROM docs WHERE json_extract(body, '$.v') < 10"),
        Case(name: "group by count", ours: "SELECT k, COUNT(*) AS c FROM docs GROUP BY k",
             sqlite: "SELECT json_extract(body, '$.k'), COUNT(*) FROM docs GROUP BY json_extract(body, '$.k')"),
    ]

    /// Document `i`: ~100 documents per `type` value, `n` = i, `v` pseudo-random in 0..<1000,
    /// `k` one of 10 categories, and some text.
    static func body(_ i: Int, count: Int) -> [String: JSONValue] {
        var x = UInt64(i) &* 0x9E37_79B9_7F4A_7C15
        x ^= x >> 29
        return ["type": .string("type\(i % max(1, count / 100))"), "n": .int(Int64(i)), "v": .int(Int64(x % 1000)),
                "k": .string("k\(i % 10)"), "title": .string("Document number \(i) with a short title"),
                "done": .bool(i % 3 == 0)]
    }

    static func run(_ args: [String]) async throws -> Int32 {
        if args.first == "--streamed-child", args.count >= 4 {
            // A child of `--streamed` (StreamedQueryBenchmark): DIR NAME MODE [--backend B].
            let rest = try Arguments(Array(args.dropFirst(4)), valueOptions: ["backend"], flagOptions: [])
            guard let backend = StorageBackends.named(rest.value("backend") ?? "sqlite") else { throw UsageError("unknown backend") }
            try await StreamedQueryBenchmark.child(directory: args[1], name: args[2], mode: args[3], backend: backend)
            return 0
        }
        let parsed = try Arguments(args, valueOptions: ["docs", "repeat", "backend", "upkeep-only", "loop"],
                                   flagOptions: ["json", "streamed"])
        try parsed.expectPositionals(0)
        let docs = try parsed.int("docs") ?? 100_000
        let repeats = try parsed.int("repeat") ?? 3
        let loopSeconds = try parsed.int("loop") ?? 0
        guard docs >= 100, repeats >= 1 else { throw UsageError("--docs must be at least 100 and --repeat at least 1") }
        let backendName = parsed.value("backend") ?? "sqlite"
        guard let backend = StorageBackends.named(backendName), backend.name != "memory" else {
            throw UsageError("unknown backend '\(backendName)'")
        }
        if parsed.flag("streamed") {
            try await StreamedQueryBenchmark.run(docs: docs, backend: backend, json: parsed.flag("json"))
            return 0
        }
        #if SQLite
        #if DEBUG
        printError("peersync bench: note: this is a debug build; build with -c release for meaningful figures")
        #endif
        let json = parsed.flag("json")
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-bench-query-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let bodies = (0..<docs).map { body($0, count: docs) }
        let texts = bodies.map { JSONValue.object($0).canonicalString }
        // Made before any clock starts, for ours as for SQLite's rows (`String(format:)` is
        // several microseconds a call here: inside the timed insert it would pad both of our
        // inserts alike and flatter the upkeep ratio).
        let ids = (0..<docs).map { String(format: "doc%07d", $0) }
        let indexes: [(String, String)] = [("byType", "type"), ("byN", "n")]

        // Bulk inserts, `repeats` rounds in turns: ours without and with the indexes, SQLite's
        // without and with, each into a fresh store of the round's own folder; the last round's
        // indexed stores are kept for the queries.
        func loadOurs(_ folder: String, _ name: String, indexed: Bool) async throws -> (Database, Double) {
            let db = try await Database(name: name, config: DatabaseConfiguration(directory: folder, backend: backend))
            let collection = try await db.createCollection(name: "docs")
            if indexed {
                for (index, expression) in indexes {
                    try await collection.createIndex(withName: index, config: ValueIndexConfiguration([expression]))
                }
            }
            let seconds = try await measure {
                for start in stride(from: 0, to: docs, by: 10_000) {
                    let chunk = Array(start..<min(docs, start + 10_000))
                    try await db.inBatch { txn in
                        for i in chunk {
                            var doc = MutableDocument(id: ids[i], data: bodies[i])
                            try txn.save(document: &doc, in: collection)
                        }
                    }
                }
            }
            return (db, seconds)
        }
        func loadSQLite(_ folder: String, _ name: String, indexed: Bool) async throws -> (SQLiteJSONDocuments, Double) {
            let table = try SQLiteJSONDocuments(path: folder + "/" + name + ".sqlite")
            if indexed {
                for (index, expression) in indexes {
                    try table.execute("CREATE INDEX \(index) ON docs(json_extract(body, '$.\(expression)'))")
                }
            }
            let rows = (0..<docs).map { SQLiteJSONDocuments.Row(id: ids[$0], sequence: Int64($0 + 1), revisionID: "1-a", body: texts[$0]) }
            let seconds = try await measure { try table.insert(rows) }
            return (table, seconds)
        }
        var oursPlain: [Double] = [], oursIndexed: [Double] = [], sqlitePlain: [Double] = [], sqliteIndexed: [Double] = []
        var kept: (Database, SQLiteJSONDocuments)?
        if let only = parsed.value("upkeep-only") {
            // Only our bulk inserts, for profiling the upkeep: `plain`, `indexed` or `both`.
            guard ["plain", "indexed", "both"].contains(only) else {
                throw UsageError("--upkeep-only takes plain, indexed or both")
            }
            for round in 0..<repeats {
                let folder = scratch + "/round\(round)"
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
                var line = "round \(round):"
                for indexed in [false, true] where only == "both" || (only == "indexed") == indexed {
                    let (db, seconds) = try await loadOurs(folder, indexed ? "indexed" : "plain", indexed: indexed)
                    try await db.close()
                    line += String(format: " ours %@ %.3f s", indexed ? "with indexes" : "without", seconds)
                }
                print(line)
                try FileManager.default.removeItem(atPath: folder)
            }
            return 0
        }
        for round in 0..<repeats {
            let folder = scratch + "/round\(round)"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let (plain, oursPlainSeconds) = try await loadOurs(folder, "plain", indexed: false)
            try await plain.close()
            let (plainSQLite, sqlitePlainSeconds) = try await loadSQLite(folder, "plain", indexed: false)
            try plainSQLite.close()
            let (indexedDB, oursIndexedSeconds) = try await loadOurs(folder, "indexed", indexed: true)
            let (indexedSQLite, sqliteIndexedSeconds) = try await loadSQLite(folder, "indexed", indexed: true)
            oursPlain.append(oursPlainSeconds); sqlitePlain.append(sqlitePlainSeconds)
            oursIndexed.append(oursIndexedSeconds); sqliteIndexed.append(sqliteIndexedSeconds)
            if round == repeats - 1 {
                kept = (indexedDB, indexedSQLite)
            } else {
                try await indexedDB.close()
                try indexedSQLite.close()
                try FileManager.default.removeItem(atPath: folder)
            }
        }
        guard let (db, table) = kept else { throw UsageError("--repeat must be at least 1") }
        try table.execute("ANALYZE")

        var results: [(name: String, ours: [Double], sqlite: [Double], rows: Int, plan: String)] = []
        for c in cases {
            let query = try db.createQuery(c.ours)
            let plan = try await query.explain().split(separator: "\n").dropFirst().first.map(String.init) ?? ""
            var ours: [Double] = [], theirs: [Double] = []
            var rows = 0, sqliteRows = 0
            // A query faster than ~20 ms is timed over a batch of runs (the same number for
            // ours and SQLite's, from the slower of a second, warm run of each: the first
            // prepares statements and reads cold pages: a batch sized from it was too short),
            // so a figure of tens of microseconds is not one clock reading.
            for _ in 0..<2 {
                _ = try await measure { rows = try await query.execute().count }
                _ = try await measure { sqliteRows = try table.query(c.sqlite).count }
            }
            let warm = max(try await measure { rows = try await query.execute().count },
                           try await measure { sqliteRows = try table.query(c.sqlite).count })
            let batch = max(1, min(1_000, Int(0.02 / max(warm, 1e-6))))
            for _ in 0..<repeats {
                ours.append(try await measure { for _ in 0..<batch { rows = try await query.execute().count } } * 1000 / Double(batch))
                theirs.append(try await measure { for _ in 0..<batch { sqliteRows = try table.query(c.sqlite).count } } * 1000 / Double(batch))
            }
            if rows != sqliteRows { printError("peersync bench: \(c.name): \(rows) rows, SQLite \(sqliteRows)") }
            results.append((c.name, ours, theirs, rows, plan))
        }
        // `--loop`: the indexed cases again, each side run for `loopSeconds`.
        var loops: [(name: String, ours: Double, sqlite: Double)] = []
        for c in cases.prefix(3) where loopSeconds > 0 {
            let query = try db.createQuery(c.ours)
            func perRun(_ body: () async throws -> Void) async throws -> Double {
                var runs = 0
                let seconds = try await measure {
                    let end = ContinuousClock.now + .seconds(loopSeconds)
                    while ContinuousClock.now < end {
                        for _ in 0..<100 { try await body() }
                        runs += 100
                    }
                }
                return seconds * 1e6 / Double(runs)
            }
            let ours = try await perRun { _ = try await query.execute().count }
            let theirs = try await perRun { _ = try table.query(c.sqlite).count }
            loops.append((c.name, ours, theirs))
        }
        try await db.close()
        try table.close()

        func median(_ v: [Double]) -> Double { v.sorted()[v.count / 2] }
        func cell(_ v: [Double]) -> String {
            String(format: "%.2f (%.2f–%.2f)", median(v), v.min() ?? 0, v.max() ?? 0)
        }
        // Index upkeep: each round's insert with the indexes over its own insert without them.
        let oursRatios = zip(oursIndexed, oursPlain).map { $0 / $1 }
        let sqliteRatios = zip(sqliteIndexed, sqlitePlain).map { $0 / $1 }
        func rounded(_ x: Double) -> JSONValue { .double((x * 1000).rounded() / 1000) }
        if json {
            for r in results {
                let object: JSONValue = ["benchmark": "query", "case": .string(r.name), "backend": .string(backend.name),
                                         "docs": .int(Int64(docs)), "rows": .int(Int64(r.rows)),
                                         "ms": .double(median(r.ours)), "sqlite_ms": .double(median(r.sqlite)),
                                         "ratio": .double((median(r.ours) / max(1e-9, median(r.sqlite)) * 100).rounded() / 100)]
                print(object.canonicalString)
            }
            let upkeep: JSONValue = ["benchmark": "query", "case": "index upkeep", "backend": .string(backend.name),
                                     "docs": .int(Int64(docs)), "runs": .int(Int64(repeats)),
                                     "ours_plain_s": rounded(median(oursPlain)), "ours_indexed_s": rounded(median(oursIndexed)),
                                     "sqlite_plain_s": rounded(median(sqlitePlain)), "sqlite_indexed_s": rounded(median(sqliteIndexed)),
                                     "ratio": rounded(median(oursRatios)), "ratio_min": rounded(oursRatios.min() ?? 0),
                                     "ratio_max": rounded(oursRatios.max() ?? 0), "sqlite_ratio": rounded(median(sqliteRatios))]
            print(upkeep.canonicalString)
            for l in loops {
                let object: JSONValue = ["benchmark": "query", "case": .string(l.name + ", loop"), "backend": .string(backend.name),
                                         "docs": .int(Int64(docs)), "seconds": .int(Int64(loopSeconds)),
                                         "us_per_run": rounded(l.ours), "sqlite_us_per_run": rounded(l.sqlite),
                                         "ratio": rounded(l.ours / max(1e-9, l.sqlite))]
                print(object.canonicalString)
            }
        } else {
            print("query benchmark: \(docs) documents, \(backend.name) backend, SQLite \(SQLiteJSONDocuments.version), "
                  + "\(repeats) runs each, ms median (min–max)")
            print(pad("query", 19) + pad("rows", 6, right: true) + pad("ours ms", 24) + pad("SQLite ms", 24) + pad("ratio", 6, right: true))
            for r in results {
                print(pad(r.name, 19) + pad("\(r.rows)", 6, right: true) + pad(cell(r.ours), 24) + pad(cell(r.sqlite), 24)
                      + pad(String(format: "%.2f", median(r.ours) / max(1e-9, median(r.sqlite))), 6, right: true))
            }
            print("index upkeep (2 indexes), bulk insert, median (min–max) of \(repeats) rounds: ours \(cell(oursPlain)) s → "
                  + "\(cell(oursIndexed)) s with indexes (×\(cell(oursRatios))); SQLite \(cell(sqlitePlain)) s → "
                  + "\(cell(sqliteIndexed)) s (×\(cell(sqliteRatios)))")
            for r in results { print("plan of \(r.name): \(r.plan)") }
            for l in loops {
                print(pad(l.name, 19) + String(format: " loop of %ld s each: ours %.1f µs/run, SQLite %.1f µs/run, ratio %.2f",
                                                loopSeconds, l.ours, l.sqlite, l.ours / max(1e-9, l.sqlite)))
            }
        }
        return 0
        #else
        throw PeerSyncError(.invalidArgument, "bench query needs the SQLite trait (its baseline is SQLite)")
        #endif
    }
}
