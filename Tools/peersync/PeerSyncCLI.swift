import Foundation
import PeerSync

/// `peersync`: every PeerSync capability from the shell. Help: ``CommandHelp`` (`--help`,
/// `help COMMAND`, `COMMAND --help`). Exit codes (also in `--help`): 0 success, 1 error (one
/// line on stderr), 2 usage error (the message, then the command's usage), 128+N for
/// `bench sync` ended by signal N.
@main
struct PeerSyncCLI {

    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        let code: Int32
        do {
            code = try await run(args)
        } catch let error as ReplicationCLIUsageError {
            code = reportUsageError(error.message, args: args)
        } catch let error as UsageError {
            code = reportUsageError(error.message, args: args)
        } catch let error as PeerSyncError {
            let prefix = error.code == .invalidJSON ? "invalid JSON: " : ""
            printError("peersync: \(prefix)\(error.message)\(contextSuffix(error))")
            code = 1
        } catch {
            printError("peersync: \(error)")
            code = 1
        }
        exit(code)
    }

    static func run(_ args: [String]) async throws -> Int32 {
        if args.isEmpty || args == ["--help"] || args == ["-h"] || args == ["help"] {
            // One write: `peersync --help | grep -q …` must not see SIGPIPE from a second
            // buffer-sized write after grep exited (the text is longer than stdout's 4 KiB buffer).
            emitLine(CommandHelp.fullText)
            return args.isEmpty ? 2 : 0
        }
        if args[0] == "help" {
            // `help --help` is the help of `help`.
            let words = args.dropFirst().filter { $0 != "--help" }
            let topic = words.isEmpty ? ["help"] : Array(words)
            guard let text = CommandHelp.usage(for: topic, withExitStatus: true) else {
                throw UsageError("no command '\(topic.joined(separator: " "))'")
            }
            emitLine(text)
            return 0
        }
        if CommandHelp.asksForHelp(args) {
            let topic = CommandHelp.topic(of: args)
            emitLine(CommandHelp.usage(for: topic, withExitStatus: true) ?? CommandHelp.fullText)
            return 0
        }
        switch args[0] {
        case "bench":
            return try await BenchCommand.run(Array(args.dropFirst()))
        case "identity":
            return IdentityCommand.run(Array(args.dropFirst()))
        default:
            switch commandName(in: args) {
            case "serve": return try await ServeCommand.run(args)
            case "sync": return try await SyncCommand.run(args)
            case "mesh": return try await MeshCommand.run(args)
            case "query", "index": return try await QueryCommands.run(args)
            default: return try await DatabaseCommands.run(args)
            }
        }
    }

    /// Prints a usage error — `peersync: MESSAGE`, then the usage of the command `args` name
    /// (or where to find it) — and returns exit status 2.
    static func reportUsageError(_ message: String, args: [String]) -> Int32 {
        printError("peersync: \(message)")
        printError(usageHint(for: args))
        return 2
    }

    /// The usage of the command `args` name, or where to find every command's.
    static func usageHint(for args: [String]) -> String {
        CommandHelp.usage(for: CommandHelp.topic(of: args)) ?? "run 'peersync --help' for usage"
    }

    /// The first word after the global options (`--db`, `--backend`, `--collection` and their values).
    static func commandName(in args: [String]) -> String? {
        var i = 0
        while i < args.count {
            if ["--db", "--backend", "--collection"].contains(args[i]) { i += 2; continue }
            return args[i]
        }
        return nil
    }

    static func contextSuffix(_ error: PeerSyncError) -> String {
        let keys = ["docID", "path", "collection", "line", "offset"]
        let parts = keys.compactMap { key in error.context[key].map { "\(key) \($0)" } }
        return parts.isEmpty ? "" : " (" + parts.joined(separator: ", ") + ")"
    }
}

/// Writes `text` and a newline to standard error, on a line of its own: a progress line on
/// screen is ended first (see ``ProgressLine``).
func printError(_ text: String) {
    ProgressLine.endOpenLine()
    writeToStandardError(text + "\n")
}

/// Writes a line to standard output immediately (unbuffered), for output another process is
/// waiting to read (`watch`, `serve`).
func emitLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
