import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSync
import PeerSyncStorage

/// Option parsing and shared plumbing of `serve` and `sync` (kept apart from the other
/// commands' helpers so each command file stands alone).
struct ReplicationCLIOptions {
    private(set) var values: [String: String] = [:]
    /// Every value of each option, in order (an option given twice keeps the last in ``values``).
    private(set) var repeatedValues: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// Parses `--name value` for names in `valueOptions`, `--flag` for `flagOptions`; the
    /// rest are positionals. Unknown options and missing values are usage errors.
    init(_ args: [String], valueOptions: Set<String>, flagOptions: Set<String>) throws(ReplicationCLIUsageError) {
        var i = 0
        while i < args.count {
            let arg = args[i]
            if arg.hasPrefix("--") && arg.count > 2 {
                let name = String(arg.dropFirst(2))
                if valueOptions.contains(name) {
                    guard i + 1 < args.count else { throw ReplicationCLIUsageError("\(arg) needs a value") }
                    values[name] = args[i + 1]
                    repeatedValues[name, default: []].append(args[i + 1])
                    i += 2
                    continue
                }
                guard flagOptions.contains(name) else { throw ReplicationCLIUsageError("unknown option \(arg)") }
                flags.insert(name)
            } else {
                positionals.append(arg)
            }
            i += 1
        }
    }

    func value(_ name: String) -> String? { values[name] }
    /// Every value given for a repeatable option (`--trust-root A --trust-root B`).
    func values(_ name: String) -> [String] { repeatedValues[name] ?? [] }
    func flag(_ name: String) -> Bool { flags.contains(name) }
}

struct ReplicationCLIUsageError: Error, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}

enum ReplicationCLI {
    /// Opens the database in `dir` (see ``DatabaseOpening``: an existing database's backend,
    /// else `name`, else sqlite).
    static func openDatabase(_ dir: String, backend name: String?) async throws -> Database {
        try await DatabaseOpening.open(dir, backend: name).0
    }

    /// The backend of a new database: sqlite when compiled in.
    static var defaultBackendName: String { StorageBackends.default.name }

    /// Writes a line to stdout right away (another process may be waiting for it).
    static func emit(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Prints `peersync: MESSAGE` on a line of its own on stderr (see ``printError(_:)``).
    static func fail(_ line: String) {
        printError("peersync: " + line)
    }

    /// Whether standard error is a terminal (progress is shown only then).
    static var stderrIsTerminal: Bool { isatty(2) == 1 }

    /// Waits for SIGINT or SIGTERM (the default actions are disabled while waiting).
    static func waitForTerminationSignal() async {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        let queue = DispatchQueue(label: "peersync.signals")
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler { continuation.yield(sig) }
            source.resume()
            sources.append(source)
        }
        for await _ in stream { break }
        for source in sources { source.cancel() }
    }
}
