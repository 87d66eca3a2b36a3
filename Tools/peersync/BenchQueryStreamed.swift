import Foundation
import PeerSync

/// `peersync bench query --streamed [--docs N] [--backend sqlite|lmdb] [--json]`: whether memory
/// stays flat in the collection's size when every row is read through `Query.resultStream()`,
/// against `execute()`, which holds every row. For N and 4N documents (the bodies of
/// `QueryBenchmark.body`), `SELECT meta().id, n, title FROM docs` is read both ways; the figure
/// is the growth of the process's anonymous resident memory (`RssAnon` in `/proc/self/status`:
/// heap, not the storage's file-backed pages) over its value before the read: for the stream the
/// largest value sampled every 1,000 rows, for `execute()` the value once it returned, its
/// `ResultSet` still alive. Linux only (`/proc`).
enum StreamedQueryBenchmark {
    /// A field of `/proc/self/status` in KiB (nil where there is none).
    static func status(_ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.dropFirst(field.count + 1).split(separator: " ").first ?? "")
        }
        return nil
    }

    static func run(docs: Int, backend: any StorageBackend, json: Bool) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-bench-streamed-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        if !json {
            print("streamed results: every row of SELECT meta().id, n, title FROM docs, \(backend.name) backend; "
                  + "growth of RssAnon over the read, KiB")
            print(pad("documents", 10, right: true) + pad("rows", 8, right: true) + pad("resultStream() KiB", 19, right: true)
                  + pad("ms", 8, right: true) + pad("execute() KiB", 14, right: true) + pad("ms", 8, right: true))
        }
        for n in [docs, docs * 4] {
            let db = try await Database(name: "streamed\(n)", config: DatabaseConfiguration(directory: scratch, backend: backend))
            let collection = try await db.createCollection(name: "docs")
            for start in stride(from: 0, to: n, by: 10_000) {
                try await db.inBatch { txn in
                    for i in start..<min(n, start + 10_000) {
                        var doc = MutableDocument(id: String(format: "doc%07d", i), data: QueryBenchmark.body(i, count: n))
                        try txn.save(document: &doc, in: collection)
                    }
                }
            }
            let query = try db.createQuery("SELECT meta().id, n, title FROM docs")

            let streamBase = status("RssAnon") ?? 0
            var streamPeak = streamBase
            var streamedRows = 0
            let streamSeconds = try await measure {
                for try await row in query.resultStream() {
                    streamedRows += 1
                    if row.count != 3 { throw PeerSyncError(.internalError, "a row without its three columns") }
                    if streamedRows % 1_000 == 0 { streamPeak = max(streamPeak, status("RssAnon") ?? 0) }
                }
            }
            streamPeak = max(streamPeak, status("RssAnon") ?? 0)

            let executeBase = status("RssAnon") ?? 0
            var executeGrowth = 0
            var executedRows = 0
            let executeSeconds = try await measure {
                let results = try await query.execute()
                executeGrowth = (status("RssAnon") ?? 0) - executeBase
                executedRows = results.count
            }
            if streamedRows != n || executedRows != n {
                printError("peersync bench: \(n) documents: \(streamedRows) rows streamed, \(executedRows) executed")
            }
            if json {
                let object: JSONValue = ["benchmark": "query", "case": "streamed", "backend": .string(backend.name),
                                         "docs": .int(Int64(n)), "rows": .int(Int64(streamedRows)),
                                         "stream_rss_anon_growth_kib": .int(Int64(streamPeak - streamBase)),
                                         "stream_ms": .double((streamSeconds * 1000).rounded()),
                                         "execute_rss_anon_growth_kib": .int(Int64(executeGrowth)),
                                         "execute_ms": .double((executeSeconds * 1000).rounded())]
                print(object.canonicalString)
            } else {
                print(pad("\(n)", 10, right: true) + pad("\(streamedRows)", 8, right: true)
                      + pad("\(streamPeak - streamBase)", 19, right: true) + pad(String(format: "%.0f", streamSeconds * 1000), 8, right: true)
                      + pad("\(executeGrowth)", 14, right: true) + pad(String(format: "%.0f", executeSeconds * 1000), 8, right: true))
            }
            try await db.close()
        }
    }
}
