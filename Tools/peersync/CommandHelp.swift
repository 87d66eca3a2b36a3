/// The help text of every `peersync` command, in one table: `peersync --help` prints all of it,
/// `peersync help COMMAND` and `peersync COMMAND --help` one command's (for `bench` and
/// `identity`, every subcommand's unless one is named), and a usage error prints the
/// synopsis of the command it concerns. A command missing here is a test failure
/// (`HelpTests` checks that every command the dispatcher knows has an entry).
enum CommandHelp {
    /// One command: its name as typed (`put`, `bench storage`, `identity create`) and its
    /// text as it appears in the global help — the synopsis first, then indented notes.
    struct Entry {
        let name: String
        let text: String
    }

    /// The options every database command takes before its name.
    static let databaseOptions = "--db DIR [--backend sqlite|lmdb] [--collection SCOPE.NAME]"

    /// Commands on one database (`peersync --db DIR … COMMAND`).
    static let databaseCommands: [Entry] = [
        Entry(name: "put", text: """
            put ID JSON          store a document (JSON "-" reads stdin); prints its new revision ID
            """),
        Entry(name: "get", text: """
            get ID [--meta]      print a document (--meta: with _id, _rev, _sequence, _deleted)
            """),
        Entry(name: "rm", text: """
            rm ID                delete a document (leaves a tombstone that replicates)
            """),
        Entry(name: "purge", text: """
            purge ID             remove a document and its history completely
            """),
        Entry(name: "revs", text: """
            revs ID              the document's revision tree, root first, children indented: each
                                 revision with its marks: current, leaf, deleted, conflict (an
                                 unresolved pulled branch), closed (the local end of a resolved
                                 conflict), and "body" or "no body" (whether its body is kept)
            """),
        Entry(name: "ls", text: """
            ls [--limit N]       list document IDs
            """),
        Entry(name: "count", text: """
            count                number of live documents
            """),
        Entry(name: "import", text: """
            import FILE|-        import JSON Lines ("_id" is the ID, generated when missing), all or
                                 nothing (one transaction); prints the number of documents
            """),
        Entry(name: "export", text: """
            export               print every document as JSON Lines with "_id"
            """),
        Entry(name: "info", text: """
            info [--json]        backend, collections, counts, last sequence
            """),
        Entry(name: "check", text: """
            check                integrity check (non-zero exit on any inconsistency)
            """),
        Entry(name: "query", text: """
            query SQL [--explain] [--param NAME=VALUE]...
                                 run a SQL++ query (FROM names the collection): one JSON object per
                                 row (JSON Lines); --explain prints the plan (the index used, or a
                                 scan) instead; a --param VALUE is JSON when it parses, else a string
            """),
        Entry(name: "index", text: """
            index create NAME EXPR... | index list | index drop NAME
                                 value indexes of the collection (--collection, default _default):
                                 create (EXPR: SQL++ expressions, e.g. type "lower(name)"; the same
                                 name with other expressions replaces it), list (NAME, tab,
                                 expressions), drop
            """),
        Entry(name: "compact", text: """
            compact              delete blobs no kept revision references and stale temporary blob
                                 files (Couchbase Lite's performMaintenance(type: .compact)); prints
                                 the blobs and bytes before and after
            """),
        Entry(name: "serve", text: """
            serve [--port P] [--no-tls] [--identity LABEL] [--keystore DIR] [--user U --password P]
                  [--read-only] [--delta-sync] [--rest] [--name DBNAME] [--interface IF]
                                 run a listener (passive peer) on /DBNAME/_blipsync; prints "listening on <url>"
                                 --rest: also serve the REST API (GET/PUT/DELETE /DBNAME/ID) on the port
                                 --name: default the folder's name, lower-cased, invalid characters as _;
                                         must match [a-z][a-z0-9_$()+-]*
            """),
        Entry(name: "sync", text: """
            sync URL [--push|--pull] [--continuous] [--user U --password P]
                 [--identity LABEL --keystore DIR] [--pinned-cert FILE | --self-signed-only | --ca FILE]
                 [--conflict default|local|remote|merge] [--doc-ids a,b] [--reset] [--verbose]
                 [--max-attempts N] [--max-attempt-wait S]
                                 replicate with a listener (active peer)
                                 retries transient failures after 1, 2, 4 … s (at most S, default 300),
                                 at most N attempts in a row (default 10; unlimited with --continuous),
                                 one stderr line per failed attempt; --verbose: activity lines on stderr
            """),
        Entry(name: "mesh", text: """
            mesh --group G --identity LABEL [--keystore DIR] [--trust-root FILE]... [--port P]
                 [--interface IF] [--transports wifi,bluetooth] [--duration S] [--json]
                                 join peer group G on the local network (DNS-SD via avahi-daemon, mutual
                                 TLS): sync with every peer of the group, print events as lines, a summary
                                 on SIGINT/SIGTERM or after S seconds; trusts peers chained to a --trust-root
                                 (default: the root of the identity's own chain); --transports: wifi
                                 (default), bluetooth or both (Wi-Fi preferred, Bluetooth LE as fallback;
                                 a transport that cannot start is reported and left out)
            """),
        Entry(name: "watch", text: """
            watch [--count N] [--timeout S]
                                 print changes live, also other processes' (until N distinct docs changed;
                                 exit 1 when S seconds pass first)
            """),
    ]

    /// Notes printed after the database commands.
    static let databaseNotes = """
        Document IDs: non-empty UTF-8, at most 255 bytes, no control characters (U+0000-U+001F, U+007F).
        JSON (put, import): an object with the same key twice ({"a":1,"a":2}) is an error.
        """

    /// `peersync bench …` and `peersync identity …` (no database).
    static let toolCommands: [Entry] = [
        Entry(name: "bench storage", text: """
            bench storage [--docs N] [--backend sqlite|lmdb|all] [--saves N] [--reads N]
                          [--write-docs N] [--rounds N] [--json]
                                 bulk insert, durable saves, reads and reader scaling, beside raw SQLite/LMDB
            """),
        Entry(name: "bench transport", text: """
            bench transport [--json] [--transports loopback,ws,wss] [--sizes 1024,65536]
                            [--total-mb N] [--repeat N] [--idle N]
                                 message throughput and latency of each transport, beside raw TCP
            """),
        Entry(name: "bench sync", text: """
            bench sync [--docs N] [--repeat R] [--json] [--transports wss,ws] [--backend sqlite|lmdb]
                       [--directions push,pull,push-and-pull] [--timeout S]
                                 replication between two peersync processes, beside the raw bulk insert
            bench sync --against URL [--docs N] [--repeat R] [--json] [--directions push,pull]
                       [--user U --password P] [--self-signed-only | --pinned-cert FILE | --ca FILE]
                                 the same documents pushed to / pulled from any replication endpoint
            """),
        Entry(name: "bench mesh", text: """
            bench mesh [--peers 16,64] [--docs-per-peer N] [--repeat R] [--json] [--timeout S]
                                 in-process multipeer meshes: convergence time, links, diameter, RSS
            """),
        Entry(name: "bench query", text: """
            bench query [--docs N] [--repeat R] [--backend sqlite|lmdb] [--json] [--streamed]
                        [--upkeep-only plain|indexed|both] [--loop SECONDS]
                                 indexed and scanned queries and index upkeep, beside SQLite's JSON
                                 functions with json_extract expression indexes on the same documents;
                                 --streamed: memory of reading every row of N and 4N documents,
                                 resultStream() against execute(); --upkeep-only: only our bulk
                                 inserts without and/or with the two indexes (seconds per round);
                                 --loop: then each indexed case in a loop for S seconds (µs per run)
            """),
        Entry(name: "identity create", text: """
            identity create --label L [--keystore DIR] [--self-signed | --issuer LABEL | --ca]
                            [--usage server|client|both] [--cn NAME] [--days N] [--hostname NAME] [--ip ADDR]
                                 --ca: a certificate authority, the only kind of identity --issuer accepts
            """),
        Entry(name: "identity list", text: """
            identity list [--keystore DIR]
            """),
        Entry(name: "identity export", text: """
            identity export --label L [--keystore DIR] (--pem | --p12 FILE --password P)
                                 --pem prints the certificate chain only, never the key
            """),
        Entry(name: "identity import", text: """
            identity import FILE --label L [--keystore DIR] [--password P]
                                 PKCS#12 or PEM
            """),
        Entry(name: "identity delete", text: """
            identity delete --label L [--keystore DIR]
            """),
        Entry(name: "help", text: """
            help [COMMAND]       this text, or one command's (also: peersync COMMAND --help)
            """),
    ]

    /// The exit statuses every command uses.
    static let exitStatus = """
        exit status:
          0      success
          1      error: one line on stderr ("peersync: …"); check prints the problems on stdout
                 first; sync prints one line per failed attempt, the last one instead of the error
          2      usage error: the message on stderr, then the command's usage
          128+N  bench sync ended by signal N (SIGINT, SIGTERM): its child processes killed, its
                 scratch folder removed
        """

    /// The whole help text (`peersync --help`).
    static var fullText: String {
        var lines = ["usage:", "  peersync \(databaseOptions) COMMAND"]
        lines += databaseCommands.map { indent($0.text, by: 4) }
        lines.append(indent(databaseNotes, by: 4))
        lines += toolCommands.map { "  peersync " + indent($0.text, by: 11).dropFirst(11) }
        lines.append(exitStatus)
        return lines.joined(separator: "\n")
    }

    /// The entries a help topic names: `["put"]`, `["bench"]` (every benchmark),
    /// `["identity", "create"]`; empty when the topic names no command.
    static func entries(for topic: [String]) -> [Entry] {
        let name = topic.joined(separator: " ")
        let all = databaseCommands + toolCommands
        if let exact = all.first(where: { $0.name == name }) { return [exact] }
        guard topic.count == 1 else { return [] }
        return toolCommands.filter { $0.name.hasPrefix(name + " ") }
    }

    /// `usage: peersync …` for the entries of `topic` (nil when it names no command), with
    /// their notes, and the exit statuses when `withExitStatus`.
    static func usage(for topic: [String], withExitStatus: Bool = false) -> String? {
        let found = entries(for: topic)
        guard !found.isEmpty else { return nil }
        var lines: [String] = []
        for (i, entry) in found.enumerated() {
            let lead = i == 0 ? "usage: " : "       "
            if databaseCommands.contains(where: { $0.name == entry.name }) {
                // The global options on a line of their own, the command under them.
                lines.append(lead + "peersync " + databaseOptions)
                lines.append(indent(entry.text, by: 9))
            } else {
                let prefix = lead + "peersync "
                lines.append(prefix + indent(entry.text, by: prefix.count).dropFirst(prefix.count))
            }
        }
        if withExitStatus { lines.append(exitStatus) }
        return lines.joined(separator: "\n")
    }

    /// The help topic of a command line: the database command after the global options, or
    /// `bench`/`identity` with the subcommand when it is one. Empty when there is none.
    static func topic(of args: [String]) -> [String] {
        guard let first = args.first else { return [] }
        if first == "bench" || first == "identity" {
            if args.count > 1, !entries(for: [first, args[1]]).isEmpty { return [first, args[1]] }
            return [first]
        }
        guard let command = PeerSyncCLI.commandName(in: args),
              databaseCommands.contains(where: { $0.name == command }) else { return [] }
        return [command]
    }

    /// Whether `args` asks for help about a command (`--help` anywhere before a `--`).
    static func asksForHelp(_ args: [String]) -> Bool {
        args.prefix(while: { $0 != "--" }).contains("--help")
    }

    private static func indent(_ text: String, by width: Int) -> String {
        let pad = String(repeating: " ", count: width)
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { pad + $0 }.joined(separator: "\n")
    }
}
