import Foundation
import PeerSync

/// `peersync bench query --streamed [--docs N] [--backend sqlite|lmdb] [--json]`: whether memory
/// stays flat in the collection's size when every row is read through `Query.resultStream()`,
/// against `execute()`, which holds every row. For N and 4N documents (the bodies of
/// `QueryBenchmark.body`), `SELECT meta().id, n, title FROM docs` is read both ways, each in a
/// fresh child process (this executable again, `bench query --streamed-child DIR NAME MODE`), so
/// that nothing the load allocated hides what the read needs: the figures are the child's peak
/// resident set (`VmHWM`) and its largest anonymous resident memory (`RssAnon`, heap rather than
/// the storage's file-backed pages) sampled every 1,000 rows and at the end, in KiB. Linux only
/// (`/proc`).
enum StreamedQueryBenchmark {
    /// A field of `/proc/self/status` in KiB (nil where there is none).
    static func status(_ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.dropFirst(field.count + 1).split(whereSeparator: \.isWhitespace).first ?? "")
        }
        return nil
    }

    static let sql = "SELECT meta().id, n, title FROM docs"

    static func run(docs: Int, backend: any StorageBackend, json: Bool) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-bench-streamed-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        guard let executable = Bundle.main.executablePath else { throw PeerSyncError(.internalError, "no executable path") }
        if !json {
            print("streamed results: every row of \(sql), \(backend.name) backend, each read in a fresh process; "
                  + "peak RSS (VmHWM) / peak RssAnon, KiB")
            print(pad("documents", 10, right: true) + pad("rows", 8, right: true) + pad("resultStream() KiB", 20, right: true)
                  + pad("ms", 7, right: true) + pad("execute() KiB", 20, right: true) + pad("ms", 7, right: true))
        }
        for n in [docs, docs * 4] {
            let name = "streamed\(n)"
            let db = try await Database(name: name, config: DatabaseConfiguration(directory: scratch, backend: backend))
            let collection = try await db.createCollection(name: "docs")
            for start in stride(from: 0, to: n, by: 10_000) {
                try await db.inBatch { txn in
                    for i in start..<min(n, start + 10_000) {
                        var doc = MutableDocument(id: String(format: "doc%07d", i), data: QueryBenchmark.body(i, count: n))
                        try txn.save(document: &doc, in: collection)
                    }
                }
            }
            try await db.close()
            var figures: [String: [Int]] = [:]
            for mode in ["stream", "execute"] {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: executable)
                process.arguments = ["bench", "query", "--streamed-child", scratch, name, mode, "--backend", backend.name]
                let pipe = Pipe()
                process.standardOutput = pipe
                try process.run()
                let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                let numbers = output.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
                guard process.terminationStatus == 0, numbers.count == 4 else {
                    throw PeerSyncError(.internalError, "the \(mode) child failed: \(output)")
                }
                figures[mode] = numbers   // rows, VmHWM, RssAnon peak, ms
            }
            let s = figures["stream"] ?? [], e = figures["execute"] ?? []
            if s[0] != n || e[0] != n { printError("peersync bench: \(n) documents: \(s[0]) rows streamed, \(e[0]) executed") }
            if json {
                let object: JSONValue = ["benchmark": "query", "case": "streamed", "backend": .string(backend.name),
                                         "docs": .int(Int64(n)), "rows": .int(Int64(s[0])),
                                         "stream_peak_rss_kib": .int(Int64(s[1])), "stream_peak_rss_anon_kib": .int(Int64(s[2])),
                                         "stream_ms": .int(Int64(s[3])),
                                         "execute_peak_rss_kib": .int(Int64(e[1])), "execute_peak_rss_anon_kib": .int(Int64(e[2])),
                                         "execute_ms": .int(Int64(e[3]))]
                print(object.canonicalString)
            } else {
                print(pad("\(n)", 10, right: true) + pad("\(s[0])", 8, right: true) + pad("\(s[1]) / \(s[2])", 20, right: true)
                      + pad("\(s[3])", 7, right: true) + pad("\(e[1]) / \(e[2])", 20, right: true) + pad("\(e[3])", 7, right: true))
            }
        }
    }

    /// The child: reads every row of database `name` in `directory`, by `mode` ("stream" or
    /// "execute"), and prints "rows VmHWM RssAnon-peak ms".
    static func child(directory: String, name: String, mode: String, backend: any StorageBackend) async throws {
        let db = try await Database(name: name, config: DatabaseConfiguration(directory: directory, backend: backend))
        let query = try db.createQuery(sql)
        var rows = 0
        var anonPeak = status("RssAnon") ?? 0
        let seconds = try await measure {
            if mode == "stream" {
                for try await row in query.resultStream() {
                    rows += 1
                    if row.count != 3 { throw PeerSyncError(.internalError, "a row without its three columns") }
                    if rows % 1_000 == 0 { anonPeak = max(anonPeak, status("RssAnon") ?? 0) }
                }
            } else {
                let results = try await query.execute()
                rows = results.count
                anonPeak = max(anonPeak, status("RssAnon") ?? 0)
            }
        }
        anonPeak = max(anonPeak, status("RssAnon") ?? 0)
        print("\(rows) \(status("VmHWM") ?? 0) \(anonPeak) \(Int((seconds * 1000).rounded()))")
        try await db.close()
    }
}
