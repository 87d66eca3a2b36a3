import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncWebSocketReplication
import PeerSyncReplicator
import PeerSyncTransport
import Synchronization

/// `peersync --db DIR [--backend B] sync URL [--push|--pull] [--continuous] [--user U --password P]
///  [--identity LABEL --keystore DIR] [--pinned-cert FILE | --self-signed-only | --ca FILE]
///  [--conflict default|local|remote|merge] [--doc-ids a,b] [--reset]
///  [--max-attempts N] [--max-attempt-wait S]`
///
/// Replicates the default collection with the listener at URL (`ws[s]://host:port/db`).
/// One-shot: exit 0 only when the replication completed; otherwise exit 1 with one line
/// (e.g. `HTTP 401: authentication required`). Continuous: runs until SIGINT/SIGTERM (exit 0)
/// or a permanent error (exit 1).
///
/// Retries follow Couchbase Lite (see the Replicator README): a transient failure (refused,
/// reset, timeout, 5xx) is retried after 1 s, 2 s, 4 s … capped by `--max-attempt-wait S`
/// (seconds, decimals allowed; default 300), at most `--max-attempts N` attempts in a row
/// (default 10 one-shot, unlimited continuous; 1 = no retry), the count starting again after a
/// connection that got going. Each failed attempt is one line on stderr:
/// `peersync: attempt N failed: MESSAGE (ADDRESS); retrying in W s`; the last one of a run that
/// gives up, `peersync: attempt N failed: MESSAGE (ADDRESS); giving up after N attempts`,
/// replaces the final error line. Invalid values of the two options are usage errors (exit 2).
///
/// Progress goes to stderr when it is a terminal (one redrawn line, ``ProgressLine``: changes
/// done of the changes known, rate), then `replication complete (N changes)`; with
/// `--verbose`, activity changes are printed as lines on stderr instead. On stdout: one line per resolved conflict as it happens (`conflict on ID resolved (RESOLVER): kept|merged …`) and, on
/// success, one summary line `sync complete: pushed P, pulled Q revisions, N conflicts resolved`
/// (see ``SyncReport``). A failed run prints nothing on stdout but conflict lines.
///
/// Hidden option for `peersync bench sync` (not in the usage text): `--stats-json` prints,
/// after a replication that completed, exactly one JSON line on stdout:
/// `{"bytes_received":…,"bytes_sent":…,"changes":…,"messages_received":…,"messages_sent":…,"peak_rss_kb":…,"pulled":…,"pushed":…,"replication_s":…}`
/// (`pushed`/`pulled`: revisions moved without error, as in the summary line).
/// `replication_s` runs from `Replicator.start` to the stopped state (database open and
/// process start-up excluded). The byte counts are what this process's connection(s) sent
/// and received at the WebSocket level: message payloads plus WebSocket frame headers
/// (computed for one frame per message, client frames masked); TLS record and TCP/IP
/// overhead are not included. `peak_rss_kb` is this process's `VmHWM` (0 where unknown).
/// It is the last line, after the summary line.
enum SyncCommand {

    static func run(_ args: [String]) async throws -> Int32 {
        let options: ReplicationCLIOptions
        let url: String
        let maxAttempts: Int?
        let maxAttemptWait: Duration?
        do {
            options = try ReplicationCLIOptions(args, valueOptions: ["db", "backend", "user", "password", "identity", "keystore",
                                                                     "pinned-cert", "ca", "conflict", "doc-ids",
                                                                     "max-attempts", "max-attempt-wait"],
                                                flagOptions: ["push", "pull", "continuous", "self-signed-only", "reset", "verbose", "stats-json"])
            guard options.positionals.first == "sync", options.positionals.count == 2 else {
                throw ReplicationCLIUsageError("sync takes exactly one URL")
            }
            url = options.positionals[1]
            guard options.value("db") != nil else { throw ReplicationCLIUsageError("--db DIR is required") }
            guard !(options.flag("push") && options.flag("pull")) else {
                throw ReplicationCLIUsageError("--push and --pull exclude each other (give neither for both)")
            }
            guard (options.value("user") == nil) == (options.value("password") == nil) else {
                throw ReplicationCLIUsageError("--user and --password go together")
            }
            let trustOptions = [options.value("pinned-cert") != nil, options.flag("self-signed-only"), options.value("ca") != nil]
            guard trustOptions.filter({ $0 }).count <= 1 else {
                throw ReplicationCLIUsageError("use at most one of --pinned-cert, --self-signed-only, --ca")
            }
            guard options.value("user") == nil || options.value("identity") == nil else {
                throw ReplicationCLIUsageError("use either --user/--password or --identity")
            }
            if let c = options.value("conflict"), !["default", "local", "remote", "merge"].contains(c) {
                throw ReplicationCLIUsageError("--conflict is one of default, local, remote, merge")
            }
            maxAttempts = try parseMaxAttempts(options.value("max-attempts"))
            maxAttemptWait = try parseMaxAttemptWait(options.value("max-attempt-wait"))
        } catch let error as ReplicationCLIUsageError {
            return PeerSyncCLI.reportUsageError(error.message, args: args)
        }

        do {
            let endpoint = try Endpoint(url: url)
            let db = try await ReplicationCLI.openDatabase(options.value("db") ?? "", backend: options.value("backend"))
            var config = ReplicatorConfiguration(target: endpoint)
            var collectionConfig = CollectionConfiguration()
            let resolverName = options.value("conflict") ?? "default"
            let report = SyncReport(resolverName: resolverName)
            let resolver: any ConflictResolver
            switch resolverName {
            case "local": resolver = ConflictResolvers.localWins
            case "remote": resolver = ConflictResolvers.remoteWins
            case "merge":
                // Union of the top-level properties; on a clash the value of the revision with
                // the higher ID wins, so both peers compute the same merge.
                resolver = ConflictResolvers.merge { local, remote in
                    var localHigher = false
                    if let l = local.revisionID.flatMap({ try? RevisionID($0) }),
                       let r = remote.revisionID.flatMap({ try? RevisionID($0) }) {
                        localHigher = l > r
                    }
                    let (low, high) = localHigher ? (remote, local) : (local, remote)
                    return low.properties.merging(high.properties) { _, winner in winner }
                }
            default: resolver = ConflictResolvers.default
            }
            collectionConfig.conflictResolver = ReportingConflictResolver(base: resolver, report: report)
            if let ids = options.value("doc-ids") {
                collectionConfig.documentIDs = ids.split(separator: ",").map { String($0) }.filter { !$0.isEmpty }
            }
            config.addCollection(try db.defaultCollection(), config: collectionConfig)
            config.replicatorType = options.flag("push") ? .push : options.flag("pull") ? .pull : .pushAndPull
            config.continuous = options.flag("continuous")
            if let maxAttempts { config.maxAttempts = maxAttempts }
            if let maxAttemptWait { config.maxAttemptWaitTime = maxAttemptWait }
            if let user = options.value("user"), let password = options.value("password") {
                config.authenticator = BasicAuthenticator(username: user, password: password)
            }
            if let label = options.value("identity") {
                let store = options.value("keystore").map { TLSKeyStore(directory: $0) } ?? .default
                guard let identity = try store.identity(withLabel: label) else {
                    throw PeerSyncError(.notFound, "no identity '\(label)' in \(store.directory)")
                }
                config.authenticator = ClientCertificateAuthenticator(identity: identity)
            }
            var connector = WebSocketReplicatorConnector()
            if let file = options.value("pinned-cert") {
                config.pinnedServerCertificate = try readCertificates(file).first
            } else if options.flag("self-signed-only") {
                config.acceptOnlySelfSignedServerCertificate = true
            } else if let file = options.value("ca") {
                connector.trustedRootCertificates = try readCertificates(file)
            }
            let counters = WireCounters()
            let base = connector.connector
            let replicator = try Replicator(config: config, connector: { cfg in
                MessageConnectionTap(try await base(cfg), onSend: { counters.didSend($0.byteCount) },
                                     onReceive: { counters.didReceive($0.byteCount) })
            })
            let clock = ContinuousClock()
            let started = clock.now
            let code = await replicate(replicator, continuous: config.continuous, reset: options.flag("reset"),
                                       verbose: options.flag("verbose"), report: report)
            if code == 0, options.flag("stats-json") {
                let elapsed = clock.now - started
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                let stats: JSONValue = [
                    "replication_s": .double((seconds * 1e6).rounded() / 1e6),
                    "bytes_sent": .int(Int64(counters.bytesSent)), "bytes_received": .int(Int64(counters.bytesReceived)),
                    "messages_sent": .int(Int64(counters.messagesSent)), "messages_received": .int(Int64(counters.messagesReceived)),
                    "changes": .int(Int64(replicator.status.progress.completed)),
                    "pushed": .int(Int64(report.counts.pushed)), "pulled": .int(Int64(report.counts.pulled)),
                    "peak_rss_kb": .int(Int64(peakResidentKB(pid: nil) ?? 0)),
                ]
                ReplicationCLI.emit(stats.canonicalString)
            }
            try await db.close()
            return code
        } catch let error as PeerSyncError {
            ReplicationCLI.fail(error.message)
            return 1
        }
    }

    /// `--max-attempts N`: a positive integer (nil when absent).
    static func parseMaxAttempts(_ text: String?) throws(ReplicationCLIUsageError) -> Int? {
        guard let text else { return nil }
        guard let n = Int(text), n >= 1 else {
            throw ReplicationCLIUsageError("--max-attempts needs a positive integer (1 = no retry), got '\(text)'")
        }
        return n
    }

    /// `--max-attempt-wait S`: positive seconds, decimals allowed, at most a year (nil when absent).
    static func parseMaxAttemptWait(_ text: String?) throws(ReplicationCLIUsageError) -> Duration? {
        guard let text else { return nil }
        guard let seconds = Double(text), seconds.isFinite, seconds > 0, seconds <= 365 * 86400 else {
            throw ReplicationCLIUsageError("--max-attempt-wait needs a positive number of seconds (e.g. 0.5 or 60), got '\(text)'")
        }
        return .milliseconds((seconds * 1000).rounded(.up))
    }

    /// A wait in seconds for the attempt lines: `4`, `0.2`, `1.5`.
    static func formatSeconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        if ms % 1000 == 0 { return "\(ms / 1000)" }
        var text = String(format: "%.3f", Double(ms) / 1000)
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }

    /// The stderr line of a failed attempt (see the type's documentation): the error and the
    /// address it concerns (the socket's, else the URL's host and port).
    static func attemptLine(_ retry: ReplicatorRetry, error: PeerSyncError?, target: Endpoint) -> String {
        let address = error?.context["address"] ?? target.authority
        let what = "attempt \(retry.failedAttempt) failed: \(error?.message ?? "unknown error") (\(address))"
        if let wait = retry.nextAttemptIn { return "\(what); retrying in \(formatSeconds(wait)) s" }
        return "\(what); giving up after \(retry.failedAttempt) attempt\(retry.failedAttempt == 1 ? "" : "s")"
    }

    static func readCertificates(_ file: String) throws -> [Certificate] {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw PeerSyncError(.notFound, "cannot read certificate file \(file)")
        }
        let bytes = [UInt8](data)
        if let text = String(bytes: bytes, encoding: .utf8), text.contains("-----BEGIN") {
            let certs = try Certificate.certificates(fromPEM: text)
            guard !certs.isEmpty else { throw PeerSyncError(.invalidCertificate, "no certificate in \(file)") }
            return certs
        }
        return [try Certificate(derBytes: bytes)]
    }

    private static func replicate(_ replicator: Replicator, continuous: Bool, reset: Bool, verbose: Bool,
                                  report: SyncReport) async -> Int32 {
        let progress = ProgressLine("sync", unit: "changes", enabled: ProgressLine.isEnabled && !verbose)
        replicator.addDocumentReplicationListener { report.record($0) }
        let target = replicator.config.target
        replicator.addChangeListener { change in
            let s = change.status
            report.recordStatus(s.activity)
            if let retry = s.retry {
                // One line per failed attempt, on a line of its own (below the progress line).
                printError("peersync: " + attemptLine(retry, error: s.error, target: target))
            }
            if verbose {
                writeToStandardError("activity \(s.activity) \(s.progress.completed)/\(s.progress.total)\n")
            } else if s.activity != .stopped {
                progress.update(Int(s.progress.completed), of: Int(s.progress.total))
            }
        }
        replicator.start(reset: reset)
        if continuous {
            let signal = Task { await ReplicationCLI.waitForTerminationSignal() }
            let stopped = Task {
                await replicator.waitUntilStopped()
                signal.cancel()
            }
            _ = await signal.value
            replicator.stop()
            await replicator.waitUntilStopped()
            stopped.cancel()
        } else {
            await replicator.waitUntilStopped()
        }
        await report.waitForStoppedEvent()
        let p = replicator.status.progress
        progress.finish(Int(p.completed), of: Int(p.total))
        if let error = replicator.status.error {
            // A run that gave up after transient failures already printed its last attempt line.
            if replicator.status.retry == nil { ReplicationCLI.fail(error.message) }
            return 1
        }
        if progress.isShown || verbose {
            FileHandle.standardError.write(Data("replication complete (\(p.completed) changes)\n".utf8))
        }
        ReplicationCLI.emit(report.summary)
        return 0
    }
}

/// Bytes and messages through the replicator's connections (for `sync --stats-json`).
final class WireCounters: Sendable {
    private let sent = Atomic<Int>(0), received = Atomic<Int>(0)
    private let sentCount = Atomic<Int>(0), receivedCount = Atomic<Int>(0)

    var bytesSent: Int { sent.load(ordering: .relaxed) }
    var bytesReceived: Int { received.load(ordering: .relaxed) }
    var messagesSent: Int { sentCount.load(ordering: .relaxed) }
    var messagesReceived: Int { receivedCount.load(ordering: .relaxed) }

    /// WebSocket bytes of one message of `payload` bytes sent in one frame: 2 header bytes,
    /// 2 or 8 for extended lengths, 4 for the mask (client to server only).
    static func frameBytes(_ payload: Int, masked: Bool) -> Int {
        payload + 2 + (payload > 65535 ? 8 : payload > 125 ? 2 : 0) + (masked ? 4 : 0)
    }

    func didSend(_ payload: Int) {
        sent.add(Self.frameBytes(payload, masked: true), ordering: .relaxed)
        sentCount.add(1, ordering: .relaxed)
    }

    func didReceive(_ payload: Int) {
        received.add(Self.frameBytes(payload, masked: false), ordering: .relaxed)
        receivedCount.add(1, ordering: .relaxed)
    }
}

/// The peak resident set size (`VmHWM` of `/proc/<pid>/status`) in KiB of process `pid`
/// (nil: this process); nil where /proc is unavailable.
func peakResidentKB(pid: Int32?) -> Int? {
    let path = "/proc/\(pid.map(String.init) ?? "self")/status"
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.dropFirst("VmHWM:".count).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
    }
    return nil
}
