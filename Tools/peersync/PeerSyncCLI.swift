import Foundation
import PeerSync

/// `peersync`: every PeerSync capability from the shell. Exit codes: 0 success, 1 error (one
/// line on stderr), 2 usage error.
@main
struct PeerSyncCLI {
    static let usage = """
    usage:
      peersync --db DIR [--backend sqlite|lmdb] [--collection SCOPE.NAME] COMMAND
        put ID JSON          store a document (JSON "-" reads stdin)
        get ID [--meta]      print a document (--meta: with _id, _rev, _sequence, _deleted)
        rm ID                delete a document (leaves a tombstone that replicates)
        purge ID             remove a document and its history completely
        ls [--limit N]       list document IDs
        count                number of live documents
        import FILE|-        import JSON Lines ("_id" is the ID, generated when missing)
        export               print every document as JSON Lines with "_id"
        info [--json]        backend, collections, counts, last sequence
        check                integrity check (non-zero exit on any inconsistency)
        serve [--port P] [--no-tls] [--identity LABEL] [--keystore DIR] [--user U --password P]
              [--read-only] [--delta-sync] [--rest] [--name DBNAME] [--interface IF]
                             run a listener (passive peer) on /DBNAME/_blipsync; prints "listening on <url>"
                             --rest: also serve the REST API (GET/PUT/DELETE /DBNAME/ID) on the port
                             --name: default the folder's name, lower-cased, invalid characters as _;
                                     must match [a-z][a-z0-9_$()+-]*
        sync URL [--push|--pull] [--continuous] [--user U --password P]
             [--identity LABEL --keystore DIR] [--pinned-cert FILE | --self-signed-only | --ca FILE]
             [--conflict default|local|remote|merge] [--doc-ids a,b] [--reset]
             [--max-attempts N] [--max-attempt-wait S]
                             replicate with a listener (active peer)
                             retries transient failures after 1, 2, 4 … s (at most S, default 300),
                             at most N attempts in a row (default 10; unlimited with --continuous),
                             one stderr line per failed attempt
        mesh --group G --identity LABEL [--keystore DIR] [--trust-root FILE]... [--port P]
             [--interface IF] [--duration S] [--json]
                             join peer group G on the local network (DNS-SD via avahi-daemon, mutual
                             TLS): sync with every peer of the group, print events as lines, a summary
                             on SIGINT/SIGTERM or after S seconds; trusts peers chained to a --trust-root
                             (default: the root of the identity's own chain)
        watch [--count N] [--timeout S]
                             print changes live, also other processes' (until N distinct docs changed)
        Document IDs: non-empty UTF-8, at most 255 bytes, no control characters (U+0000-U+001F, U+007F).
        JSON (put, import): an object with the same key twice ({"a":1,"a":2}) is an error.
      peersync bench storage [--docs N] [--backend sqlite|lmdb|all] [--saves N] [--reads N]
                             [--write-docs N] [--rounds N] [--json]
      peersync bench transport [--json] [--transports loopback,ws,wss] [--sizes 1024,65536]
                               [--total-mb N] [--repeat N] [--idle N]
      peersync bench sync [--docs N] [--repeat R] [--json] [--transports wss,ws] [--backend sqlite|lmdb]
                          [--directions push,pull,push-and-pull] [--timeout S]
                             replication between two peersync processes, beside the raw bulk insert
      peersync bench sync --against URL [--docs N] [--repeat R] [--json] [--directions push,pull]
                          [--user U --password P] [--self-signed-only | --pinned-cert FILE | --ca FILE]
                             the same documents pushed to / pulled from any replication endpoint
      peersync bench mesh [--peers 16,64] [--docs-per-peer N] [--repeat R] [--json] [--timeout S]
                             in-process multipeer meshes: convergence time, links, diameter, RSS
      peersync identity create --label L [--keystore DIR] [--self-signed | --issuer LABEL | --ca]
                               [--usage server|client|both] [--cn NAME] [--days N] [--hostname NAME] [--ip ADDR]
                             --ca: a certificate authority, the only kind of identity --issuer accepts
      peersync identity list [--keystore DIR]
      peersync identity export --label L [--keystore DIR] (--pem | --p12 FILE --password P)
      peersync identity import FILE --label L [--keystore DIR] [--password P]
      peersync identity delete --label L [--keystore DIR]
    """

    static func main() async {
        let args = Array(CommandLine.arguments.dropFirst())
        let code: Int32
        do {
            code = try await run(args)
        } catch let error as ReplicationCLIUsageError {
            printError("peersync: \(error.message)")
            printError("run 'peersync --help' for usage")
            code = 2
        } catch let error as UsageError {
            printError("peersync: \(error.message)")
            printError("run 'peersync --help' for usage")
            code = 2
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
            emitLine(usage)
            return args.isEmpty ? 2 : 0
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
            default: return try await DatabaseCommands.run(args)
            }
        }
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

func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Writes a line to standard output immediately (unbuffered), for output another process is
/// waiting to read (`watch`, `serve`).
func emitLine(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
