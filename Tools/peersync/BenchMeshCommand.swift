// `peersync bench mesh [--peers 16,64] [--docs-per-peer N] [--json] [--repeat R] [--timeout S]`
//
// In one process, N mesh peers (memory databases, real certificates from one CA, the
// in-process discovery and links of PeerSyncMesh) form a mesh; then each writes its documents
// at once and the run measures:
// - form_s: from the first start to every peer seeing one connected mesh of everyone;
// - converge_s: from the first write to every database holding all N × docs documents (the
//   databases are then checked identical, revision for revision);
// - links and diameter: the mesh as peer 0 sees it;
// - hop_s: the median time of a document written at a peer to reach one of its direct
//   neighbours (5 samples), and single_doc_s: the time of one document written at peer 0 to
//   reach all others, against the bound hop_s × diameter + 1 s;
// - peak_rss_mb: this process's VmHWM so far (the peak of the whole run up to this line);
// - stored_per_needed: revisions stored by pulls during the convergence per revision a peer
//   needed (1.00: every document crossed each link it needed once; more: duplicates).
// With --json also: converge_cpu_s (the process's CPU seconds during the convergence), work
// (the replication protocol's counters over all links during the convergence:
// `ReplicationCounters` — entries offered by `changes`/`proposeChanges`, entries asked for,
// claim waits, `rev`s sent and received and bytes), rss_after_close_mb (VmRSS 2 s after the
// run's peers are stopped and their databases deleted) and stores_left (in-memory stores of the
// run still registered: must be 0).
// `--json` prints one object per run, then one summary per peer count (median, min, max).
// Each run must finish within --timeout seconds (default 300) or the benchmark fails (exit 1).

import Foundation
import PeerSync
import PeerSyncAuth
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncMesh
@_spi(Replication) import PeerSyncReplicator

enum MeshBenchmark {
    struct Options {
        var peerCounts = [16, 64]
        var docsPerPeer = 100
        var json = false
        var repeatCount = 3
        var timeout: Duration = .seconds(300)
    }

    struct RunResult {
        var peers: Int
        var docs: Int
        var formSeconds: Double
        var convergeSeconds: Double
        var links: Int
        var diameter: Int
        var hopSeconds: Double
        var singleDocumentSeconds: Double
        var peakRSSMB: Double
        /// Revisions stored by pulls during the convergence, per revision some peer needed
        /// (1.0: each crossed once; a document offered by two neighbours at once may cross twice).
        var storedPerNeeded: Double
        /// The replication protocol's work during the convergence, over all links.
        var counters = ReplicationCounters.Snapshot()
        /// CPU seconds (user + system) of the whole process during the convergence.
        var convergeCPUSeconds: Double = 0
        /// This process's resident memory once the run's peers are stopped and closed.
        var residentAfterCloseMB: Double = 0
        /// In-memory stores of the run's databases still registered after it (0: all deleted).
        var storesLeft = 0

        var boundSeconds: Double { hopSeconds * Double(diameter) + 1 }
    }

    static func run(_ args: [String]) async throws -> Int32 {
        let parsed = try Arguments(args, valueOptions: ["peers", "docs-per-peer", "repeat", "timeout"], flagOptions: ["json"])
        try parsed.expectPositionals(0)
        var options = Options()
        options.json = parsed.flag("json")
        if let list = parsed.value("peers") {
            let counts = list.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
            guard !counts.isEmpty, counts.allSatisfy({ ($0 ?? 0) >= 2 }) else {
                throw UsageError("--peers takes a list of peer counts of at least 2, e.g. 16,64")
            }
            options.peerCounts = counts.compactMap { $0 }
        }
        if let n = try parsed.int("docs-per-peer") {
            guard n >= 1 else { throw UsageError("--docs-per-peer must be at least 1") }
            options.docsPerPeer = n
        }
        if let n = try parsed.int("repeat") {
            guard n >= 1 else { throw UsageError("--repeat must be at least 1") }
            options.repeatCount = n
        }
        if let n = try parsed.int("timeout") {
            guard n >= 1 else { throw UsageError("--timeout must be at least 1") }
            options.timeout = .seconds(n)
        }
        #if DEBUG
        printError("peersync bench: note: this is a debug build; build with -c release for meaningful figures")
        #endif
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "bench mesh CA"])
        if !options.json {
            print("mesh benchmark: in-process peers, \(options.docsPerPeer) documents each, \(options.repeatCount) runs")
            print(pad("peers", 6, right: true) + pad("docs", 7, right: true) + pad("form s", 8, right: true)
                  + pad("converge s", 11, right: true) + pad("links", 6, right: true) + pad("diam", 5, right: true)
                  + pad("hop s", 7, right: true) + pad("1 doc s", 8, right: true) + pad("bound s", 8, right: true)
                  + pad("RSS MB", 7, right: true) + pad("stored×", 8, right: true))
        }
        let docsPerPeer = options.docsPerPeer
        let progress = ProgressLine("bench mesh", unit: "runs")
        let totalRuns = options.peerCounts.count * options.repeatCount
        var runsDone = 0
        progress.update(0, of: totalRuns)
        for count in options.peerCounts {
            var results: [RunResult] = []
            for _ in 0..<options.repeatCount {
                let result = try await withDeadline(options.timeout, "\(count) peers") {
                    try await runOnce(peers: count, docsPerPeer: docsPerPeer, ca: ca)
                }
                results.append(result)
                runsDone += 1
                ProgressLine.clearOpenLine()
                print(options.json ? json(result) : row(result))
                progress.update(runsDone, of: totalRuns)
            }
            ProgressLine.clearOpenLine()
            print(options.json ? summaryJSON(results) : summaryRow(results))
        }
        progress.finish(runsDone, of: totalRuns)
        return 0
    }

    /// One mesh of `peers` peers from start to convergence, then closed.
    static func runOnce(peers count: Int, docsPerPeer: Int, ca: TLSIdentity) async throws -> RunResult {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-benchmesh-\(getpid())-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let network = try InProcessMeshNetwork()
        var peers: [(database: Database, replicator: MultipeerReplicator)] = []
        let authenticator = MultipeerCertificateAuthenticator(rootCerts: [ca.certificate])
        for i in 0..<count {
            let database = try await Database(name: "peer\(i)", config: DatabaseConfiguration(
                directory: directory, backend: MemoryStorageBackend(), durable: false, changePollInterval: .milliseconds(200)))
            let identity = try TLSIdentity.createIdentity(for: [.clientAuth, .serverAuth], attributes: [certAttrCommonName: "peer\(i)"],
                                                          issuer: ca)
            let config = try MultipeerReplicatorConfiguration(peerGroupID: "bench", identity: identity, authenticator: authenticator,
                                                              collections: [MultipeerCollectionConfiguration(collection: database.defaultCollection())])
            peers.append((database, try MultipeerReplicator(config: config, networks: [network.network(host: "peer\(i)")])))
        }
        // Stopped, then deleted (not only closed): the in-memory backend keeps a closed
        // database's data for the process's lifetime until it is deleted, so closing alone
        // kept every run's 64 databases (~300 MB at 64 × 100) and a second run in the same
        // process peaked that much higher.
        func closeAll() async {
            await withTaskGroup(of: Void.self) { group in
                for peer in peers {
                    group.addTask {
                        await peer.replicator.stop()
                        try? await peer.database.delete()
                    }
                }
            }
        }
        do {
            var result = try await measureRun(peers, docsPerPeer: docsPerPeer)
            await closeAll()
            let left = peers.filter { MemoryStorageBackend().hasStore(in: $0.database.path) }.count
            peers = []
            // A stopped mesh hands freed memory back to the system a second later (MeshRun.stop).
            try? await Task.sleep(for: .seconds(2))
            result.residentAfterCloseMB = TransportBenchmark.residentMB()
            result.storesLeft = left
            return result
        } catch {
            await closeAll()
            throw error
        }
    }

    static func measureRun(_ peers: [(database: Database, replicator: MultipeerReplicator)], docsPerPeer: Int) async throws -> RunResult {
        let count = peers.count
        let everyone = Set(peers.map(\.replicator.peerID))
        let formSeconds = try await measure {
            for peer in peers { try await peer.replicator.start() }
            try await waitUntil {
                peers.allSatisfy { peer in
                    let graph = peer.replicator.graph
                    return graph.peers == everyone && graph.isConnected
                }
            }
        }
        let total = count * docsPerPeer
        let stored = LockedValue(0)
        let tokens = peers.map { peer in
            peer.replicator.addPeerDocumentReplicationListener { event in
                guard !event.isPush else { return }
                let count = event.documents.count { $0.error == nil }
                stored.withLock { $0 += count }
            }
        }
        let countersBefore = ReplicationCounters.snapshot()
        let cpuBefore = processCPUSeconds()
        let convergeSeconds = try await measure {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, peer) in peers.enumerated() {
                    group.addTask {
                        let collection = try peer.database.defaultCollection()
                        for i in 0..<docsPerPeer {
                            var document = MutableDocument(id: "p\(index)-\(i)")
                            document.setData(["peer": .int(Int64(index)), "i": .int(Int64(i)), "text": .string(String(repeating: "m", count: 100))])
                            try await collection.save(document: &document)
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await waitUntil {
                for peer in peers {
                    if try await peer.database.defaultCollection().count != total { return false }
                }
                return true
            }
        }
        let counters = ReplicationCounters.snapshot().since(countersBefore)
        let convergeCPUSeconds = processCPUSeconds() - cpuBefore
        for token in tokens { token.remove() }
        let storedPerNeeded = Double(stored.withLock { $0 }) / Double(max(1, count * (count - 1) * docsPerPeer))
        // Identical, revision for revision.
        let reference = try await revisions(peers[0].database)
        for peer in peers.dropFirst() {
            if try await revisions(peer.database) != reference {
                throw PeerSyncError(.internalError, "bench mesh: the databases hold the same number of documents but differ")
            }
        }
        let graph = peers[0].replicator.graph
        // Per hop: a document from peer 0 to one of its direct neighbours.
        var hops: [Double] = []
        let ownLinks = peers[0].replicator.peerInfo(for: peers[0].replicator.peerID)?.neighborPeers ?? []
        for sample in 0..<5 {
            guard let neighborID = ownLinks.first,
                  let neighbor = peers.first(where: { $0.replicator.peerID == neighborID }) else { break }
            hops.append(try await propagation(of: "hop-\(sample)", from: peers[0].database, to: [neighbor.database]))
        }
        let single = try await propagation(of: "single", from: peers[0].database, to: peers.dropFirst().map(\.database))
        return RunResult(peers: count, docs: total, formSeconds: formSeconds, convergeSeconds: convergeSeconds,
                         links: graph.linkCount, diameter: graph.diameter ?? -1, hopSeconds: TransportBenchmark.median(hops),
                         singleDocumentSeconds: single, peakRSSMB: Double(peakResidentKB(pid: nil) ?? 0) / 1024,
                         storedPerNeeded: storedPerNeeded, counters: counters, convergeCPUSeconds: convergeCPUSeconds)
    }

    /// User + system CPU seconds of this process so far.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        func s(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return s(usage.ru_utime) + s(usage.ru_stime)
    }

    /// Seconds from saving document `id` at `source` until every database of `targets` has it
    /// (each notices through its own change listener).
    static func propagation(of id: String, from source: Database, to targets: [Database]) async throws -> Double {
        let clock = ContinuousClock()
        let remaining = LockedValue(targets.count)
        let arrived = LockedValue<ContinuousClock.Instant?>(nil)
        var tokens: [ListenerToken] = []
        for target in targets {
            tokens.append(try target.defaultCollection().addDocumentChangeListener(id: id) { _ in
                let now = clock.now
                remaining.withLock { left in
                    left -= 1
                    if left == 0 { arrived.withLock { $0 = now } }
                }
            })
        }
        defer { for token in tokens { token.remove() } }
        let start = clock.now
        var document = MutableDocument(id: id)
        document.setData(["at": .string(id)])
        try await source.defaultCollection().save(document: &document)
        try await waitUntil(every: .milliseconds(2)) { arrived.withLock { $0 } != nil }
        let end = arrived.withLock { $0 } ?? clock.now
        return seconds(end - start)
    }

    static func revisions(_ database: Database) async throws -> [String: String] {
        let collection = try database.defaultCollection()
        var out: [String: String] = [:]
        var since: UInt64 = 0
        while true {
            let batch = try await collection.changes(since: since, limit: 1000)
            guard let last = batch.last else { break }
            for entry in batch { out[entry.docID] = entry.revID.description }
            since = last.sequence
        }
        return out
    }

    static func waitUntil(every interval: Duration = .milliseconds(50), _ condition: () async throws -> Bool) async throws {
        while try await !condition() {
            try await Task.sleep(for: interval)
        }
    }

    /// Runs `body`, failing with a clear error if it takes longer than `timeout`.
    static func withDeadline<T: Sendable>(_ timeout: Duration, _ what: String,
                                          _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            guard let first = try await group.next(), let value = first else {
                group.cancelAll()
                throw PeerSyncError(.timeout, "bench mesh: \(what) did not converge within \(timeout)")
            }
            group.cancelAll()
            return value
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func rounded(_ value: Double, _ places: Double = 1000) -> Double { (value * places).rounded() / places }

    static func json(_ r: RunResult) -> String {
        let object: JSONValue = [
            "benchmark": "mesh", "peers": .int(Int64(r.peers)), "docs": .int(Int64(r.docs)),
            "form_s": .double(rounded(r.formSeconds)), "converge_s": .double(rounded(r.convergeSeconds)),
            "links": .int(Int64(r.links)), "diameter": .int(Int64(r.diameter)),
            "hop_s": .double(rounded(r.hopSeconds)), "single_doc_s": .double(rounded(r.singleDocumentSeconds)),
            "single_doc_bound_s": .double(rounded(r.boundSeconds)),
            "single_doc_within_bound": .bool(r.singleDocumentSeconds <= r.boundSeconds),
            "peak_rss_mb": .double(rounded(r.peakRSSMB, 10)),
            "stored_per_needed": .double(rounded(r.storedPerNeeded, 100)),
            "converge_cpu_s": .double(rounded(r.convergeCPUSeconds, 10)),
            "rss_after_close_mb": .double(rounded(r.residentAfterCloseMB, 10)),
            "stores_left": .int(Int64(r.storesLeft)),
            "work": .object(Dictionary(uniqueKeysWithValues: r.counters.fields.map { ($0.0, JSONValue.int(Int64($0.1))) })),
        ]
        return object.canonicalString
    }

    static func row(_ r: RunResult) -> String {
        func f(_ value: Double) -> String { String(format: "%.3f", value) }
        return pad("\(r.peers)", 6, right: true) + pad("\(r.docs)", 7, right: true) + pad(f(r.formSeconds), 8, right: true)
            + pad(f(r.convergeSeconds), 11, right: true) + pad("\(r.links)", 6, right: true) + pad("\(r.diameter)", 5, right: true)
            + pad(f(r.hopSeconds), 7, right: true) + pad(f(r.singleDocumentSeconds), 8, right: true)
            + pad(f(r.boundSeconds), 8, right: true) + pad(String(format: "%.1f", r.peakRSSMB), 7, right: true)
            + pad(String(format: "%.2f", r.storedPerNeeded), 8, right: true)
    }

    static func stats(_ values: [Double]) -> (median: Double, min: Double, max: Double) {
        (TransportBenchmark.median(values), values.min() ?? 0, values.max() ?? 0)
    }

    static func summaryJSON(_ results: [RunResult]) -> String {
        var object: [String: JSONValue] = ["benchmark": "mesh-summary", "peers": .int(Int64(results[0].peers)),
                                           "docs": .int(Int64(results[0].docs)), "runs": .int(Int64(results.count))]
        let figures: [(String, (RunResult) -> Double)] = [
            ("converge_s", { $0.convergeSeconds }), ("form_s", { $0.formSeconds }), ("single_doc_s", { $0.singleDocumentSeconds }),
            ("hop_s", { $0.hopSeconds }), ("diameter", { Double($0.diameter) }), ("links", { Double($0.links) }),
            ("peak_rss_mb", { $0.peakRSSMB }),
        ]
        for (name, figure) in figures {
            let s = stats(results.map(figure))
            object[name] = ["median": .double(rounded(s.median)), "min": .double(rounded(s.min)), "max": .double(rounded(s.max))]
        }
        object["single_doc_within_bound"] = .bool(results.allSatisfy { $0.singleDocumentSeconds <= $0.boundSeconds })
        return JSONValue.object(object).canonicalString
    }

    static func summaryRow(_ results: [RunResult]) -> String {
        let converge = stats(results.map(\.convergeSeconds))
        let single = stats(results.map(\.singleDocumentSeconds))
        let within = results.filter { $0.singleDocumentSeconds <= $0.boundSeconds }.count
        return "  \(results[0].peers) peers: converge median \(String(format: "%.3f", converge.median)) s "
            + "(min \(String(format: "%.3f", converge.min)), max \(String(format: "%.3f", converge.max))); "
            + "one document median \(String(format: "%.3f", single.median)) s, within the bound in \(within) of \(results.count) runs"
    }
}
