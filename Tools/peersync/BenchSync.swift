// `peersync bench sync [--docs N] [--repeat R] [--json] [--transports wss,ws]
//                      [--directions push,pull,push-and-pull] [--backend sqlite|lmdb] [--timeout S]`
// `peersync bench sync --against URL [--docs N] [--repeat R] [--json] [--directions push,pull]
//                      [--user U --password P] [--self-signed-only | --pinned-cert FILE | --ca FILE]`
//
// Replication throughput between two processes. Each run is one of:
//
// - `push`: the documents start in the replicator's database, the listener's is empty;
// - `pull`: the documents start in the listener's database, the replicator's is empty;
// - `push-and-pull`: half of the documents (N/2, disjoint IDs) start on each side and one
//   push-and-pull replicator moves both halves, the two directions overlapping; every
//   database ends with all N.
//
// Locally (no `--against`):
// - the listener is a child `peersync --db L serve --port 0 --interface 127.0.0.1 [--no-tls]`
//   (its "listening on" line gives the port);
// - the replicator is a child `peersync --db R sync URL [--push|--pull] [--self-signed-only]
//   --stats-json`; the time is from its spawn to its exit 0 (`docs_per_s`), its own
//   replication time comes from its `--stats-json` line (`replication_docs_per_s`), and so
//   do the bytes on the wire (WebSocket level, both directions, see `SyncCommand`);
// - peak RSS of each child is its `VmHWM` (/proc/<pid>/status): the listener's read by the
//   bench just before it stops it, the replicator's reported by itself in its statistics
//   line just before it exits (`ru_maxrss` from `wait4` is no use here: a child made by
//   `posix_spawn` inherits the bench's own high-water mark across the exec);
// - after each run the receiving database (both, for push-and-pull) must hold exactly N
//   documents, else the benchmark fails (exit 1).
//
// `--against URL` times the same documents against any replication endpoint (another
// PeerSync listener, a Couchbase Lite listener, Sync Gateway): no listener is started; a push
// sends N new documents (IDs unique to this run, `bench-<pid>-<r>-<i>`) and must report N
// revisions pushed; a pull pulls whatever the endpoint holds into an empty database and counts
// what arrived (at least one document, else an error). Credentials and trust options are
// passed to the `sync` child as given. No listener RSS is known then.
//
// The baseline, measured in the same run, is the raw C library bulk insert of the same
// canonical document bytes into the same backend (`SQLiteRawBaseline` / `LMDBRawBaseline`,
// as in `bench storage`), in transactions of up to 50,000 documents.
// `slowdown` = our time / baseline time.
//
// Noise: the machine is shared, so every figure is measured `--repeat` times (default 3),
// interleaved (repetition r runs the baseline, then every transport × direction once); the
// table prints each run, then the median with min and max per benchmark. `--json` prints one
// JSON object per run (with `"repeat": r`) and then one per benchmark with
// `"statistic": "median"` and the min/max of `docs_per_s`.
//
// Robustness: each run (listener + replicator) must finish within `--timeout` seconds
// (default: 600, or 10 ms per document if more); otherwise both children are killed by PID
// (SIGKILL) and the benchmark fails with a clear error (exit 1). The temporary directory
// (`$TMPDIR/peersync-benchsync-<pid>`) is removed on every exit path: success, error, and
// SIGINT/SIGTERM (the children are killed by PID and reaped first; exit 130 / 143).

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import PeerSync
import PeerSyncCore
import PeerSyncTransport
import Synchronization

enum SyncBenchmark {
    static let allDirections = ["push", "pull", "push-and-pull"]

    struct Options {
        var docs = 100_000
        var repeats = 3
        var json = false
        var transports = ["wss", "ws"]
        var directions = allDirections
        var backend = ReplicationCLI.defaultBackendName
        /// Seconds one run may take; nil: ``defaultTimeout(docs:)``.
        var timeout: Double?
        /// `--against URL`: an external endpoint instead of a local listener child.
        var against: String?
        /// Options passed through to the `sync` child with `--against` (credentials, trust).
        var syncOptions: [String] = []
    }

    /// 600 s, or 10 ms per document if more.
    static func defaultTimeout(docs: Int) -> Double { max(600, Double(docs) / 100) }

    /// One run's figures.
    struct Result {
        var benchmark: String
        var transport: String
        var repetition: Int
        var docs: Int
        var seconds: Double
        var replicationSeconds: Double
        var baselineSeconds: Double
        var bytesOnWire: Int
        /// nil with `--against` (not our process).
        var listenerRSSMB: Double?
        var replicatorRSSMB: Double

        var docsPerSecond: Double { Double(docs) / seconds }
        var replicationDocsPerSecond: Double { Double(docs) / replicationSeconds }
        var baselineDocsPerSecond: Double { Double(docs) / baselineSeconds }
    }

    static let chunk = 50_000

    static func run(_ args: [String]) async throws -> Int32 {
        let parsed = try Arguments(args, valueOptions: ["docs", "repeat", "transports", "directions", "backend", "timeout",
                                                        "against", "user", "password", "pinned-cert", "ca"],
                                   flagOptions: ["json", "self-signed-only"])
        try parsed.expectPositionals(0)
        var options = Options()
        options.docs = try parsed.int("docs") ?? options.docs
        guard options.docs > 0 else { throw UsageError("--docs must be at least 1") }
        options.repeats = try parsed.int("repeat") ?? options.repeats
        guard options.repeats > 0 else { throw UsageError("--repeat must be at least 1") }
        options.json = parsed.flag("json")
        if let text = parsed.value("timeout") {
            guard let t = Double(text), t > 0, t.isFinite else { throw UsageError("--timeout needs a positive number of seconds, got '\(text)'") }
            options.timeout = t
        }
        if let list = parsed.value("transports") {
            let names = list.split(separator: ",").map(String.init)
            guard !names.isEmpty, names.allSatisfy({ ["ws", "wss"].contains($0) }) else {
                throw UsageError("--transports takes a list of wss, ws")
            }
            options.transports = names
        }
        if let list = parsed.value("directions") {
            let names = list.split(separator: ",").map(String.init)
            guard !names.isEmpty, names.allSatisfy({ allDirections.contains($0) }) else {
                throw UsageError("--directions takes a list of push, pull, push-and-pull")
            }
            options.directions = names
        }
        if let name = parsed.value("backend") {
            guard let b = StorageBackends.named(name), b.name != "memory" else { throw UsageError("unknown backend '\(name)'") }
            options.backend = b.name
        }
        let passThrough = ["user", "password", "pinned-cert", "ca"].filter { parsed.value($0) != nil }
            + (parsed.flag("self-signed-only") ? ["self-signed-only"] : [])
        if let url = parsed.value("against") {
            guard let endpoint = try? Endpoint(url: url), ["ws", "wss"].contains(endpoint.scheme) else {
                throw UsageError("--against needs a ws:// or wss:// replication URL, got '\(url)'")
            }
            guard parsed.value("transports") == nil else {
                throw UsageError("--transports does not apply with --against (the URL's scheme chooses)")
            }
            if parsed.value("directions") == nil { options.directions = ["push", "pull"] }
            guard !options.directions.contains("push-and-pull") else {
                throw UsageError("--against runs push and pull only")
            }
            guard (parsed.value("user") == nil) == (parsed.value("password") == nil) else {
                throw UsageError("--user and --password go together")
            }
            options.against = url
            options.transports = [endpoint.scheme]
            for name in passThrough {
                options.syncOptions.append("--\(name)")
                if let value = parsed.value(name) { options.syncOptions.append(value) }
            }
        } else if let first = passThrough.first {
            throw UsageError("--\(first) applies only with --against")
        }
        #if DEBUG
        printError("peersync bench: note: this is a debug build; build with -c release for meaningful figures")
        #endif
        try await run(options)
        return 0
    }

    static func run(_ options: Options) async throws {
        guard let backend = StorageBackends.named(options.backend) else {
            throw PeerSyncError(.invalidArgument, "backend \(options.backend) is not available")
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-benchsync-\(getpid())").path
        try? FileManager.default.removeItem(atPath: root)
        let cleanup = BenchCleanup(root: root)
        do {
            try await runAll(options, backend: backend, root: root)
        } catch {
            // Interrupted: the runs failed because the signal handler killed the children; it
            // removes the directory and exits with the signal's code. Wait for that.
            if cleanup.interrupted { await BenchCleanup.suspendUntilExit() }
            cleanup.finish()
            throw error
        }
        cleanup.finish()
    }

    static func runAll(_ options: Options, backend: any StorageBackend, root: String) async throws {
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let n = options.docs
        let timeout = options.timeout ?? defaultTimeout(docs: n)

        // The seeded databases, made once and copied for every local run.
        var templates = Templates(root: root)
        if options.against == nil {
            if options.directions.contains(where: { $0 != "push-and-pull" }) {
                templates.all = root + "/template-all"
                try await seed(templates.all!, backend: backend, range: 0..<n)
            }
            if options.directions.contains("push-and-pull") {
                templates.firstHalf = root + "/template-first"
                templates.secondHalf = root + "/template-second"
                try await seed(templates.firstHalf!, backend: backend, range: 0..<(n / 2))
                try await seed(templates.secondHalf!, backend: backend, range: (n / 2)..<n)
            }
        }

        if !options.json {
            let target = options.against.map { "against \($0)" } ?? "two processes on 127.0.0.1"
            print("sync benchmark: \(n) documents of ~\(StorageBenchmark.Workload(count: min(n, 1000)).averageBodySize) bytes, backend \(options.backend), \(target), \(options.repeats) repetition\(options.repeats == 1 ? "" : "s")")
            print(pad("benchmark", 14) + pad("transport", 10) + pad("run", 4) + pad("docs", 8, right: true) + pad("docs/s", 10, right: true)
                  + pad("repl docs/s", 12, right: true) + pad("raw docs/s", 11, right: true) + pad("slowdown", 9, right: true)
                  + pad("wire MB", 9, right: true) + pad("RSS listener", 13, right: true) + pad("RSS replicator", 15, right: true))
        }
        var results: [Result] = []
        let progress = ProgressLine("bench sync", unit: "runs")
        let totalRuns = options.repeats * options.transports.count * options.directions.count
        progress.update(0, of: totalRuns)
        for repetition in 1...options.repeats {
            // The baseline is measured in every repetition, between our runs.
            let baseline = try rawBaseline(root + "/raw", backend: options.backend, count: n)
            for transport in options.transports {
                for direction in options.directions {
                    var result = try await runOnce(direction: direction, transport: transport, options: options,
                                                   templates: templates, root: root, repetition: repetition,
                                                   timeout: timeout)
                    // The baseline inserts N documents; a pull against an endpoint may move another count.
                    result.baselineSeconds = baseline * Double(result.docs) / Double(n)
                    ProgressLine.clearOpenLine()
                    emit(result, backend: options.backend, json: options.json)
                    results.append(result)
                    progress.update(results.count, of: totalRuns)
                }
            }
        }
        progress.finish(results.count, of: totalRuns)
        summarize(results, options: options)
    }

    /// Where the seeded databases are.
    struct Templates {
        let root: String
        var all: String?
        var firstHalf: String?
        var secondHalf: String?
    }

    static func emit(_ r: Result, backend: String, json: Bool) {
        let slowdown = r.seconds / r.baselineSeconds
        if json {
            var rss: [String: JSONValue] = ["replicator": .double((r.replicatorRSSMB * 10).rounded() / 10)]
            rss["listener"] = r.listenerRSSMB.map { .double(($0 * 10).rounded() / 10) } ?? .null
            let object: JSONValue = [
                "benchmark": .string(r.benchmark), "transport": .string(r.transport), "backend": .string(backend),
                "repeat": .int(Int64(r.repetition)), "docs": .int(Int64(r.docs)),
                "docs_per_s": .double(r.docsPerSecond.rounded()),
                "replication_docs_per_s": .double(r.replicationDocsPerSecond.rounded()),
                "baseline_docs_per_s": .double(r.baselineDocsPerSecond.rounded()),
                "slowdown": .double((slowdown * 100).rounded() / 100),
                "seconds": .double((r.seconds * 1000).rounded() / 1000),
                "bytes_on_wire": .int(Int64(r.bytesOnWire)),
                "peak_rss_mb": .object(rss),
            ]
            print(object.canonicalString)
        } else {
            print(pad(r.benchmark, 14) + pad(r.transport, 10) + pad(String(r.repetition), 4) + pad(String(r.docs), 8, right: true)
                  + pad(String(Int(r.docsPerSecond.rounded())), 10, right: true)
                  + pad(String(Int(r.replicationDocsPerSecond.rounded())), 12, right: true)
                  + pad(String(Int(r.baselineDocsPerSecond.rounded())), 11, right: true)
                  + pad(String(format: "%.2fx", slowdown), 9, right: true)
                  + pad(String(format: "%.1f", Double(r.bytesOnWire) / 1e6), 9, right: true)
                  + pad(r.listenerRSSMB.map { String(format: "%.1f MB", $0) } ?? "-", 13, right: true)
                  + pad(String(format: "%.1f MB", r.replicatorRSSMB), 15, right: true))
        }
        fflush(nil)
    }

    /// The median with min and max of each benchmark × transport over the repetitions.
    static func summarize(_ results: [Result], options: Options) {
        func spread(_ values: [Double]) -> (median: Double, min: Double, max: Double) {
            let sorted = values.sorted()
            let mid = sorted.count / 2
            let median = sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
            return (median, sorted.first ?? 0, sorted.last ?? 0)
        }
        if !options.json {
            print("")
            print("median (min–max) of \(options.repeats) run\(options.repeats == 1 ? "" : "s"), docs/s:")
            print(pad("benchmark", 14) + pad("transport", 10) + pad("ours", 26, right: true) + pad("raw baseline", 26, right: true)
                  + pad("slowdown", 9, right: true))
        }
        for transport in options.transports {
            for direction in options.directions {
                let runs = results.filter { $0.transport == transport && $0.benchmark == direction }
                guard !runs.isEmpty else { continue }
                let ours = spread(runs.map(\.docsPerSecond))
                let raw = spread(runs.map(\.baselineDocsPerSecond))
                let slowdown = spread(runs.map { $0.seconds / $0.baselineSeconds })
                if options.json {
                    let object: JSONValue = [
                        "benchmark": .string(direction), "transport": .string(transport), "backend": .string(options.backend),
                        "statistic": "median", "runs": .int(Int64(runs.count)),
                        "docs_per_s": .double(ours.median.rounded()),
                        "docs_per_s_min": .double(ours.min.rounded()), "docs_per_s_max": .double(ours.max.rounded()),
                        "baseline_docs_per_s": .double(raw.median.rounded()),
                        "slowdown": .double((slowdown.median * 100).rounded() / 100),
                    ]
                    print(object.canonicalString)
                } else {
                    func text(_ s: (median: Double, min: Double, max: Double)) -> String {
                        "\(Int(s.median.rounded())) (\(Int(s.min.rounded()))–\(Int(s.max.rounded())))"
                    }
                    print(pad(direction, 14) + pad(transport, 10) + pad(text(ours), 26, right: true)
                          + pad(text(raw), 26, right: true) + pad(String(format: "%.2fx", slowdown.median), 9, right: true))
                }
            }
        }
        fflush(nil)
    }

    // MARK: Data

    /// Creates a database in `dir` holding documents `range` of the storage workload (with
    /// `idPrefix` instead of the workload's IDs when given), saved in batches (the generator
    /// runs chunk by chunk, so memory stays bounded).
    static func seed(_ dir: String, backend: any StorageBackend, range: Range<Int>, idPrefix: String? = nil) async throws {
        let db = try await DatabaseOpening.open(dir, backend: backend.name).0
        let collection = try db.defaultCollection()
        var start = range.lowerBound
        while start < range.upperBound {
            let end = min(range.upperBound, start + chunk)
            let docs = (start..<end).map { i in
                let (id, body) = StorageBenchmark.Workload.document(i)
                return (idPrefix.map { "\($0)\(i)" } ?? id, body)
            }
            _ = try await db.inBatch { txn in
                for (id, body) in docs {
                    var doc = MutableDocument(id: id, data: body)
                    try txn.save(document: &doc, in: collection)
                }
            }
            start = end
        }
        try await db.close()
    }

    /// Seconds the raw library takes to insert the same canonical bodies (generation excluded).
    static func rawBaseline(_ dir: String, backend: String, count: Int) throws -> Double {
        try? FileManager.default.removeItem(atPath: dir)
        let raw = try RawStore(backend: backend, directory: dir)
        defer { raw.close() }
        var seconds = 0.0
        var start = 0
        let clock = ContinuousClock()
        while start < count {
            let end = min(count, start + chunk)
            var ids: [String] = [], bodies: [[UInt8]] = []
            for i in start..<end {
                let (id, body) = StorageBenchmark.Workload.document(i)
                ids.append(id)
                bodies.append(JSONValue.object(body).canonicalData)
            }
            let t0 = clock.now
            try raw.insert(ids, bodies)
            seconds += (clock.now - t0).seconds
            start = end
        }
        try? FileManager.default.removeItem(atPath: dir)
        return seconds
    }

    static func documentCount(_ dir: String, backend: String) async throws -> Int {
        let db = try await ReplicationCLI.openDatabase(dir, backend: backend)
        let count = try await db.defaultCollection().count
        try await db.close()
        return count
    }

    // MARK: One run

    static func runOnce(direction: String, transport: String, options: Options, templates: Templates, root: String,
                        repetition: Int, timeout: Double) async throws -> Result {
        let backend = options.backend
        let count = options.docs
        let run = root + "/\(direction)-\(transport)-\(repetition)"
        let listenerDB = run + "/listener", replicatorDB = run + "/replicator"
        try FileManager.default.createDirectory(atPath: run, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: run) }

        // The databases before the run.
        if options.against != nil {
            if direction == "push" {
                guard let backendValue = StorageBackends.named(backend) else {
                    throw PeerSyncError(.invalidArgument, "backend \(backend) is not available")
                }
                try await seed(replicatorDB, backend: backendValue, range: 0..<count,
                               idPrefix: "bench-\(getpid())-\(repetition)-")
            } else {
                try await seedEmpty(replicatorDB, backend: backend)
            }
        } else {
            switch direction {
            case "push":
                try FileManager.default.copyItem(atPath: templates.all!, toPath: replicatorDB)
                try await seedEmpty(listenerDB, backend: backend)
            case "pull":
                try FileManager.default.copyItem(atPath: templates.all!, toPath: listenerDB)
                try await seedEmpty(replicatorDB, backend: backend)
            default:
                try FileManager.default.copyItem(atPath: templates.firstHalf!, toPath: replicatorDB)
                try FileManager.default.copyItem(atPath: templates.secondHalf!, toPath: listenerDB)
            }
        }

        let exe = try executablePath()
        let watchdog = Watchdog(seconds: timeout)
        defer { watchdog.cancel() }
        let measured: Measured
        if let url = options.against {
            measured = try await replicate(url: url, listener: nil, exe: exe, transport: transport, direction: direction,
                                           replicatorDB: replicatorDB, backend: backend, extraOptions: options.syncOptions,
                                           run: run, watchdog: watchdog, timeout: timeout)
        } else {
            var serveArgs = ["--db", listenerDB, "--backend", backend, "serve", "--port", "0", "--interface", "127.0.0.1",
                             "--name", "bench"]
            if transport == "ws" { serveArgs.append("--no-tls") }
            let listener = try BenchChildProcess(exe, serveArgs, stderrPath: run + "/listener.err")
            watchdog.watch(listener)
            measured = try await replicate(url: nil, listener: listener, exe: exe, transport: transport, direction: direction,
                                           replicatorDB: replicatorDB, backend: backend,
                                           extraOptions: transport == "wss" ? ["--self-signed-only"] : [],
                                           run: run, watchdog: watchdog, timeout: timeout)
        }
        watchdog.cancel()
        guard let replicationSeconds = measured.stats["replication_s"]?.doubleValue,
              let sent = measured.stats["bytes_sent"]?.intValue, let received = measured.stats["bytes_received"]?.intValue,
              let pushed = measured.stats["pushed"]?.intValue, let pulled = measured.stats["pulled"]?.intValue else {
            throw PeerSyncError(.internalError, "bench: the replicator's statistics line lacks fields")
        }
        // What moved, checked against the databases where we own them.
        var moved = count
        if options.against != nil {
            if direction == "push" {
                guard pushed == count else {
                    throw PeerSyncError(.replicationFailed, "bench: the push to \(options.against!) moved \(pushed) revisions, expected \(count)")
                }
            } else {
                let got = try await documentCount(replicatorDB, backend: backend)
                guard got > 0, Int64(got) == pulled else {
                    throw PeerSyncError(.replicationFailed, got == 0
                        ? "bench: nothing to pull from \(options.against!) (the endpoint holds no documents)"
                        : "bench: the pull from \(options.against!) reported \(pulled) revisions, the database holds \(got)")
                }
                moved = got
            }
        } else {
            let receivers = direction == "push" ? [listenerDB] : direction == "pull" ? [replicatorDB] : [replicatorDB, listenerDB]
            for db in receivers {
                let got = try await documentCount(db, backend: backend)
                guard got == count else {
                    throw PeerSyncError(.replicationFailed, "bench: after the \(direction) over \(transport) the \(db == listenerDB ? "listener's" : "replicator's") database holds \(got) documents, expected \(count)")
                }
            }
            let expected = direction == "push" ? (count, 0) : direction == "pull" ? (0, count) : (count / 2, count - count / 2)
            guard (Int(pushed), Int(pulled)) == expected else {
                throw PeerSyncError(.replicationFailed, "bench: the \(direction) over \(transport) pushed \(pushed) and pulled \(pulled) revisions, expected \(expected.0) and \(expected.1)")
            }
        }
        return Result(benchmark: direction, transport: transport, repetition: repetition, docs: moved,
                      seconds: measured.seconds, replicationSeconds: replicationSeconds, baselineSeconds: 0,
                      bytesOnWire: Int(sent) + Int(received),
                      listenerRSSMB: measured.listenerRSSMB, replicatorRSSMB: measured.replicatorRSSMB)
    }

    struct Measured {
        var seconds: Double
        var stats: [String: JSONValue]
        var listenerRSSMB: Double?
        var replicatorRSSMB: Double
    }

    /// Runs the replicator child to its exit against `url`, or against the `listener` child
    /// (reading its URL first; then stops it with SIGTERM and reaps it).
    static func replicate(url: String?, listener: BenchChildProcess?, exe: String, transport: String, direction: String,
                          replicatorDB: String, backend: String, extraOptions: [String], run: String,
                          watchdog: Watchdog, timeout: Double) async throws -> Measured {
        do {
            return try await replicateOrThrow(url: url, listener: listener, exe: exe, transport: transport,
                                              direction: direction, replicatorDB: replicatorDB, backend: backend,
                                              extraOptions: extraOptions, run: run, watchdog: watchdog)
        } catch {
            if let listener {
                listener.kill(SIGKILL)
                _ = await listener.wait()
            }
            if let killed = watchdog.firedKilling {
                throw PeerSyncError(.timeout, "bench: the \(direction) over \(transport) did not finish within \(timeout) s (--timeout); killed \(killed)")
            }
            throw error
        }
    }

    private static func replicateOrThrow(url: String?, listener: BenchChildProcess?, exe: String, transport: String,
                                         direction: String, replicatorDB: String, backend: String,
                                         extraOptions: [String], run: String, watchdog: Watchdog) async throws -> Measured {
        var target: String
        if let url {
            target = url
        } else if let listener {
            guard let line = await listener.readLine(), line.hasPrefix("listening on ") else {
                throw PeerSyncError(.internalError, "bench: the listener did not start: \(listener.stderrText())")
            }
            guard let url = URL(string: String(line.dropFirst("listening on ".count))), let port = url.port else {
                throw PeerSyncError(.internalError, "bench: cannot read the listener's URL from '\(line)'")
            }
            target = "\(transport)://127.0.0.1:\(port)/bench"
        } else {
            throw PeerSyncError(.internalError, "bench: neither a URL nor a listener")
        }
        var syncArgs = ["--db", replicatorDB, "--backend", backend, "sync", target, "--stats-json"] + extraOptions
        if direction != "push-and-pull" { syncArgs.append("--\(direction)") }

        let clock = ContinuousClock()
        let t0 = clock.now
        let replicator = try BenchChildProcess(exe, syncArgs, stderrPath: run + "/replicator.err")
        watchdog.watch(replicator)
        // stdout: the summary line, then the `--stats-json` line (the last JSON object).
        var statsLine: String?
        while let line = await replicator.readLine() {
            if line.hasPrefix("{") { statsLine = line }
        }
        let replicatorExit = await replicator.wait()
        let seconds = (clock.now - t0).seconds
        guard replicatorExit.status == 0 else {
            throw PeerSyncError(.replicationFailed, "bench: \(direction) over \(transport) failed (exit \(replicatorExit.status)): \(replicator.stderrText())")
        }
        guard let statsLine, let stats = try? JSONValue(parsing: statsLine).objectValue else {
            throw PeerSyncError(.internalError, "bench: the replicator printed no statistics line")
        }
        guard let replicatorKB = stats["peak_rss_kb"]?.intValue, replicatorKB > 0 else {
            throw PeerSyncError(.internalError, "bench: the replicator reported no peak RSS")
        }
        var listenerRSSMB: Double?
        if let listener {
            guard let listenerKB = peakResidentKB(pid: listener.pid) else {
                throw PeerSyncError(.internalError, "bench: cannot read the listener's peak RSS (VmHWM)")
            }
            listener.kill(SIGTERM)
            let listenerExit = await listener.wait()
            guard listenerExit.status == 0 else {
                throw PeerSyncError(.internalError, "bench: the listener exited with \(listenerExit.status): \(listener.stderrText())")
            }
            listenerRSSMB = Double(listenerKB) / 1024
        }
        return Measured(seconds: seconds, stats: stats, listenerRSSMB: listenerRSSMB,
                        replicatorRSSMB: Double(replicatorKB) / 1024)
    }

    /// Creates an empty database (so both children open an existing one alike).
    static func seedEmpty(_ dir: String, backend: String) async throws {
        let db = try await ReplicationCLI.openDatabase(dir, backend: backend)
        try await db.close()
    }

    static func executablePath() throws -> String {
        let path = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw PeerSyncError(.notFound, "bench: cannot find the peersync executable")
        }
        return path
    }
}

/// A child process started with `posix_spawn`, stdout on a pipe, stderr to a file, reaped
/// with `wait4` so its peak RSS is known. Blocking calls (`read`, `wait4`) run on a
/// dedicated dispatch queue, never on the cooperative pool.
final class BenchChildProcess: @unchecked Sendable {  // `pid`/fds are set once in init; reads happen on `queue` only
    let pid: pid_t
    private let stdoutFD: Int32
    private let stderrPath: String
    private let queue = DispatchQueue(label: "peersync.bench.child")
    private var buffer: [UInt8] = []
    private let reaped = Atomic<Bool>(false)

    struct Exit {
        var status: Int32
        /// `ru_maxrss`: includes the spawning process's own high-water mark (see above).
        var maxRSSMB: Double
    }

    /// What the child is, for messages: "listener" or "replicator" (from its command).
    var role: String { stderrPath.hasSuffix("listener.err") ? "listener" : "replicator" }

    init(_ executable: String, _ arguments: [String], stderrPath: String) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw PeerSyncError(.internalError, "bench: pipe failed (errno \(errno))") }
        let errFD = open(stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard errFD >= 0 else {
            close(fds[0]); close(fds[1])
            throw PeerSyncError(.internalError, "bench: cannot create \(stderrPath) (errno \(errno))")
        }
        defer { close(errFD); close(fds[1]) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errFD, 2)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, executable, &actions, nil, argv, environ)
        guard rc == 0 else {
            close(fds[0])
            throw PeerSyncError(.internalError, "bench: cannot start \(executable) (error \(rc))")
        }
        pid = child
        stdoutFD = fds[0]
        self.stderrPath = stderrPath
        BenchCleanup.register(self)
    }

    deinit { close(stdoutFD) }

    /// The next line of the child's stdout, nil at end of file.
    func readLine() async -> String? {
        await withCheckedContinuation { continuation in
            queue.async {
                while true {
                    if let nl = self.buffer.firstIndex(of: 0x0A) {
                        let line = String(decoding: self.buffer[..<nl], as: UTF8.self)
                        self.buffer.removeSubrange(...nl)
                        continuation.resume(returning: line)
                        return
                    }
                    var chunk = [UInt8](repeating: 0, count: 4096)
                    let n = read(self.stdoutFD, &chunk, chunk.count)
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 {
                        continuation.resume(returning: self.buffer.isEmpty ? nil : String(decoding: self.buffer, as: UTF8.self))
                        self.buffer = []
                        return
                    }
                    self.buffer.append(contentsOf: chunk[..<n])
                }
            }
        }
    }

    /// Sends `signal` unless the child was already reaped (its PID may be reused then).
    func kill(_ signal: Int32) {
        if !reaped.load(ordering: .acquiring) { _ = Glibc.kill(pid, signal) }
    }

    /// Waits for the child to exit: its exit status (128 + signal if killed) and peak RSS.
    func wait() async -> Exit {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: self.waitBlocking()) }
        }
    }

    func waitBlocking() -> Exit {
        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        reaped.store(true, ordering: .releasing)
        BenchCleanup.unregister(self)
        let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return Exit(status: code, maxRSSMB: Double(usage.ru_maxrss) / 1024)  // ru_maxrss is in KiB on Linux
    }

    func stderrText() -> String {
        let text = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(3).joined(separator: " | ")
    }
}

/// Kills the children of one run (SIGKILL, by PID) if it is not over after `seconds`.
final class Watchdog: Sendable {
    private let state = LockedValue<(children: [BenchChildProcess], fired: Bool, cancelled: Bool)>(([], false, false))

    init(seconds: Double) {
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [weak self] in
            guard let self else { return }
            let children = self.state.withLock { s -> [BenchChildProcess] in
                guard !s.cancelled else { return [] }
                s.fired = true
                return s.children
            }
            for child in children { child.kill(SIGKILL) }
        }
    }

    /// Kills `child` too when the time is up (at once if it already is).
    func watch(_ child: BenchChildProcess) {
        let fired = state.withLock { s in
            s.children.append(child)
            return s.fired
        }
        if fired { child.kill(SIGKILL) }
    }

    /// The run is over: nothing is killed any more.
    func cancel() {
        state.withLock { $0.cancelled = true }
    }

    /// nil unless the time ran out; then what was killed (`"listener (pid 12), replicator (pid 13)"`).
    var firedKilling: String? {
        state.withLock { s in
            guard s.fired else { return nil }
            return s.children.map { "\($0.role) (pid \($0.pid))" }.joined(separator: ", ")
        }
    }
}

/// Removes the benchmark's temporary directory on every exit path. While installed, SIGINT
/// and SIGTERM are handled on a dispatch queue: every live child is killed by PID (SIGKILL)
/// and reaped, the directory removed, and the process exits with 128 + the signal.
final class BenchCleanup {  // used by `run` only; the signal handlers capture just the path
    /// Live children (registered by ``BenchChildProcess``), by PID; `closed` once they were killed
    /// (a child started after that — the run had not noticed yet — is killed as it registers).
    private static let children = LockedValue<(live: [pid_t: BenchChildProcess], closed: Bool)>(([:], false))
    private static let signalled = Atomic<Bool>(false)
    private let root: String
    private let sources: [any DispatchSourceSignal]

    init(root: String) {
        self.root = root
        let queue = DispatchQueue(label: "peersync.bench.signals")
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler {
                BenchCleanup.signalled.store(true, ordering: .sequentiallyConsistent)
                BenchCleanup.killChildren()
                // The benchmark's own clean-up may be removing files at the same time (its
                // runs fail as the children die), which can make one removal give up.
                for _ in 0..<100 where FileManager.default.fileExists(atPath: root) {
                    try? FileManager.default.removeItem(atPath: root)
                    usleep(10_000)
                }
                printError("peersync bench: interrupted (signal \(sig)); children killed, \(root) removed")
                exit(128 + sig)
            }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    /// Whether SIGINT/SIGTERM arrived (the handler then ends the process).
    var interrupted: Bool { BenchCleanup.signalled.load(ordering: .sequentiallyConsistent) }

    /// Never returns: the signal handler exits the process.
    static func suspendUntilExit() async {
        await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
    }

    /// Normal exit (success or error): kills any child left, removes the directory, restores
    /// the default signal actions.
    func finish() {
        for source in sources { source.cancel() }
        BenchCleanup.killChildren()
        try? FileManager.default.removeItem(atPath: root)
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }

    static func register(_ child: BenchChildProcess) {
        let tooLate = children.withLock { state in
            if !state.closed { state.live[child.pid] = child }
            return state.closed
        }
        if tooLate { child.kill(SIGKILL) }
    }

    static func unregister(_ child: BenchChildProcess) { _ = children.withLock { $0.live.removeValue(forKey: child.pid) } }

    /// SIGKILLs every live child by PID — and every child that registers later — then waits
    /// (blocking, on the calling dispatch thread) until each is gone or reaped elsewhere.
    private static func killChildren() {
        let live = children.withLock { state in
            state.closed = true
            return Array(state.live.values)
        }
        for child in live { child.kill(SIGKILL) }
        for child in live {
            var status: Int32 = 0
            // ECHILD: reaped meanwhile by the benchmark's own wait.
            while waitpid(child.pid, &status, 0) < 0 && errno == EINTR {}
        }
    }
}
