import Foundation
import PeerSync
@_spi(Replication) import PeerSyncDatabase
import PeerSyncTestSupport
import Testing
@testable import peersync

/// The built `peersync`, run as a child process: help for every command, exit statuses and
/// one-line errors, the progress line, `revs` and `compact`.
@Suite(.timeLimit(.minutes(5))) struct CLIProcessTests {
    static func peersync(_ args: [String], environment: [String: String] = [:], input: String? = nil) async throws
        -> ChildProcess.Outcome {
        try await ChildProcess.run(product: "peersync", args, environment: environment, input: input)
    }

    /// The lines of a stream's text (without the empty string after a final newline).
    static func lines(_ text: String) -> [String] {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        return lines
    }

    // MARK: Help

    /// Every command the dispatcher runs has a help entry (so `--help` cannot forget one).
    @Test func everyCommandHasHelp() {
        var commands = DatabaseCommands.arity.keys.map { [$0] } + [["serve"], ["sync"], ["mesh"], ["query"], ["index"]]
        commands += BenchCommand.subjects.map { ["bench", $0] }
        commands += IdentityCommand.subcommands.map { ["identity", $0] }
        for command in commands {
            #expect(CommandHelp.entries(for: command).count == 1, "no help for \(command.joined(separator: " "))")
        }
    }

    @Test func globalHelpShowsEveryCommandAndTheExitStatuses() async throws {
        let run = try await Self.peersync(["--help"])
        #expect(run.status == 0)
        for entry in CommandHelp.databaseCommands + CommandHelp.toolCommands {
            let synopsis = try #require(entry.text.split(separator: "\n").first)
            #expect(run.standardOutput.contains(synopsis), "--help lacks \(entry.name)")
        }
        #expect(run.standardOutput.contains("identity create --label L [--keystore DIR] [--self-signed | --issuer LABEL | --ca]"))
        #expect(run.standardOutput.contains("exit status:"))
        for code in ["0 ", "1 ", "2 ", "128+N "] {
            #expect(run.standardOutput.contains("\n  \(code)"), "exit status \(code) is not documented")
        }
        #expect(run.standardError.isEmpty)
    }

    /// `peersync help X` and `peersync X --help` print X's usage (exit 0) for every command,
    /// and `bench --help` every benchmark's (it used to say "unknown benchmark '--help'").
    @Test func helpForEachCommand() async throws {
        for entry in CommandHelp.databaseCommands + CommandHelp.toolCommands {
            let words = entry.name.split(separator: " ").map(String.init)
            let viaHelp = try await Self.peersync(["help"] + words)
            #expect(viaHelp.status == 0, "help \(entry.name): \(viaHelp.standardError)")
            #expect(viaHelp.standardOutput.hasPrefix("usage: peersync "), "help \(entry.name): \(viaHelp.standardOutput)")
            #expect(viaHelp.standardOutput.contains(entry.text.split(separator: "\n")[0]))
            #expect(viaHelp.standardOutput.contains("exit status:"))

            let isDatabaseCommand = CommandHelp.databaseCommands.contains { $0.name == entry.name }
            let flagged = try await Self.peersync((isDatabaseCommand ? ["--db", "/nonexistent/never-created"] : []) + words + ["--help"])
            #expect(flagged.status == 0, "\(entry.name) --help: \(flagged.standardError)")
            #expect(flagged.standardOutput == viaHelp.standardOutput, "\(entry.name) --help differs from help \(entry.name)")
        }
        #expect(!FileManager.default.fileExists(atPath: "/nonexistent/never-created"))
        let bench = try await Self.peersync(["bench", "--help"])
        #expect(bench.status == 0, "\(bench.standardError)")
        for subject in BenchCommand.subjects {
            #expect(bench.standardOutput.contains("peersync bench \(subject) "), "bench --help lacks \(subject)")
        }
        let unknown = try await Self.peersync(["help", "frobnicate"])
        #expect(unknown.status == 2)
        #expect(Self.lines(unknown.standardError).first == "peersync: no command 'frobnicate'")
    }

    // MARK: Exit statuses and errors

    @Test func usageErrorsExitTwoWithTheCommandsUsage() async throws {
        try await withTemporaryDirectory { dir in
            let db = dir + "/db"
            let missing = try await Self.peersync(["--db", db, "get"])
            #expect(missing.status == 2)
            let lines = Self.lines(missing.standardError)
            #expect(lines.first == "peersync: 'get' takes 1 argument(s)")
            #expect(lines.dropFirst().first == "usage: peersync --db DIR [--backend sqlite|lmdb] [--collection SCOPE.NAME]",
                    "\(missing.standardError)")
            #expect(lines.dropFirst(2).first?.hasPrefix("         get ID [--meta]") == true, "\(missing.standardError)")

            let unknown = try await Self.peersync(["--db", db, "frobnicate"])
            #expect(unknown.status == 2)
            #expect(Self.lines(unknown.standardError) == ["peersync: unknown command 'frobnicate'",
                                                           "run 'peersync --help' for usage"])

            let serve = try await Self.peersync(["--db", db, "serve", "--bogus"])
            #expect(serve.status == 2)
            #expect(Self.lines(serve.standardError).first == "peersync: unknown option --bogus")
            #expect(serve.standardError.contains("usage: peersync --db DIR"))
            #expect(serve.standardError.contains(" serve [--port P]"))
            #expect(!FileManager.default.fileExists(atPath: db), "a usage error created the database")
        }
    }

    @Test func errorsAreOneLineAndExitOne() async throws {
        try await withTemporaryDirectory { dir in
            let db = dir + "/db"
            let notFound = try await Self.peersync(["--db", db, "get", "nothing"])
            #expect(notFound.status == 1)
            #expect(Self.lines(notFound.standardError) == ["peersync: document 'nothing' not found"])
            #expect(notFound.standardOutput.isEmpty)
            let noRevs = try await Self.peersync(["--db", db, "revs", "nothing"])
            #expect(noRevs.status == 1)
            #expect(Self.lines(noRevs.standardError) == ["peersync: document 'nothing' not found"])
        }
    }

    // MARK: Progress

    /// With `PEERSYNC_PROGRESS=1` (what a terminal turns on) import and export draw a progress
    /// line on stderr ending with the final count; without it (stderr a pipe) nothing.
    @Test func importAndExportShowProgressOnlyWhenAsked() async throws {
        try await withTemporaryDirectory { dir in
            let count = 3000
            let file = dir + "/docs.jsonl"
            let text = (0..<count).map { "{\"_id\":\"d\($0)\",\"n\":\($0)}" }.joined(separator: "\n") + "\n"
            try text.write(toFile: file, atomically: true, encoding: .utf8)
            let on = ["PEERSYNC_PROGRESS": "1"]

            let quiet = try await Self.peersync(["--db", dir + "/quiet", "import", file])
            #expect(quiet.status == 0)
            #expect(quiet.standardError.isEmpty, "progress without a terminal: \(quiet.standardError)")

            let imported = try await Self.peersync(["--db", dir + "/db", "import", file], environment: on)
            #expect(imported.status == 0, "\(imported.standardError)")
            #expect(imported.standardOutput == "\(count)\n")
            #expect(imported.standardError.hasPrefix("\rimport  "))
            #expect(imported.standardError.hasSuffix("\n"))
            let importFinal = try #require(imported.standardError.split(separator: "\r").last)
            #expect(importFinal.hasPrefix("import  [####################]  100%  \(count) docs  "), "\(importFinal)")
            #expect(importFinal.contains(" docs/s"))

            let exported = try await Self.peersync(["--db", dir + "/db", "export"], environment: on)
            #expect(exported.status == 0)
            #expect(Self.lines(exported.standardOutput).count == count)
            let exportFinal = try #require(exported.standardError.split(separator: "\r").last)
            #expect(exportFinal.hasPrefix("export  [####################]  100%  \(count)/\(count) docs  "), "\(exportFinal)")
        }
    }

    /// An error after progress was drawn starts a line of its own.
    @Test func anErrorEndsTheProgressLine() async throws {
        try await withTemporaryDirectory { dir in
            let file = dir + "/bad.jsonl"
            try "{\"_id\":\"a\"}\n{\"_id\":\"b\"}\n{not json\n".write(toFile: file, atomically: true, encoding: .utf8)
            let run = try await Self.peersync(["--db", dir + "/db", "import", file], environment: ["PEERSYNC_PROGRESS": "1"])
            #expect(run.status == 1)
            #expect(run.standardError.hasPrefix("\rimport  "), "\(run.standardError)")
            let last = try #require(Self.lines(run.standardError).last)
            #expect(last.hasPrefix("peersync: invalid JSON: "), "\(run.standardError)")
            #expect(last.contains("line 3"))
        }
    }

    @Test func progressLineRendering() {
        let line = ProgressLine("sync", unit: "changes", enabled: false)
        #expect(line.render(5, of: 10, fraction: nil, elapsed: .seconds(1)) == "sync  [##########..........]  50%  5/10 changes  5 changes/s")
        #expect(line.render(7, of: nil, fraction: nil, elapsed: .seconds(2)) == "sync  7 changes  4 changes/s")
        #expect(line.render(0, of: 0, fraction: nil, elapsed: .zero) == "sync  [####################]  100%  0/0 changes")
        #expect(line.render(3, of: nil, fraction: 0.25, elapsed: .seconds(3)) == "sync  [#####...............]  25%  3 changes  1 changes/s")
    }

    // MARK: revs and compact

    /// A document with two conflicting branches and a deletion: `revs` prints the tree with
    /// each revision's marks.
    @Test func revsPrintsTheRevisionTree() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/db"
            let db = try await Database(path: path, config: DatabaseConfiguration(directory: path, backend: StorageBackends.default))
            let collection = try db.defaultCollection()
            var doc = MutableDocument(id: "doc", data: ["v": 1])
            try await collection.save(document: &doc)
            let first = try #require(doc.revisionID)
            doc["v"] = 2
            try await collection.save(document: &doc)
            let local = try #require(doc.revisionID)
            let remote = RevisionID(generation: 2, digest: "ffff")
            try await collection.insertRevision(docID: "doc", revID: remote, history: [try RevisionID(first)],
                                                body: ["v": 3], deleted: false)
            var other = MutableDocument(id: "gone", data: ["v": 1])
            try await collection.save(document: &other)
            _ = try await collection.delete(document: try #require(try await collection.document(id: "gone")))
            try await db.close()

            let run = try await Self.peersync(["--db", path, "revs", "doc"])
            #expect(run.status == 0, "\(run.standardError)")
            let lines = Self.lines(run.standardOutput)
            #expect(lines.count == 4, "\(run.standardOutput)")
            #expect(lines.first?.hasPrefix("doc  sequence ") == true)
            #expect(lines.first?.hasSuffix("current \(local)  conflicted") == true, "\(lines)")
            #expect(lines.contains("\(first)  body") || lines.contains("\(first)  no body"), "\(lines)")
            #expect(lines.contains("  \(local)  current leaf body"), "\(lines)")
            #expect(lines.contains("  \(remote)  leaf conflict body"), "\(lines)")

            let deleted = try await Self.peersync(["--db", path, "revs", "gone"])
            #expect(deleted.status == 0)
            let deletedLines = Self.lines(deleted.standardOutput)
            #expect(deletedLines.first?.hasSuffix("  deleted") == true, "\(deletedLines)")
            #expect(deletedLines.last?.hasPrefix("  2-") == true && deletedLines.last?.hasSuffix("current leaf deleted body") == true,
                    "\(deletedLines)")
        }
    }

    /// `compact` removes a blob no document references and keeps a referenced one.
    @Test func compactRemovesUnreferencedBlobs() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/db"
            let db = try await Database(path: path, config: DatabaseConfiguration(directory: path, backend: StorageBackends.default))
            let kept = Blob(contentType: "text/plain", data: Data("kept".utf8))
            var doc = MutableDocument(id: "with-blob", data: [:])
            doc.setBlob(kept, forKey: "file")
            try await db.defaultCollection().save(document: &doc)
            try await db.saveBlob(Blob(contentType: "text/plain", data: Data("orphan!".utf8)))
            try await db.close()

            let run = try await Self.peersync(["--db", path, "compact"])
            #expect(run.status == 0, "\(run.standardError)")
            #expect(run.standardOutput == "blobs: 2 before, 1 after (11 bytes before, 4 after)\n")
            let again = try await Self.peersync(["--db", path, "compact"])
            #expect(again.standardOutput == "blobs: 1 before, 1 after (4 bytes before, 4 after)\n")
            let get = try await Self.peersync(["--db", path, "get", "with-blob"])
            #expect(get.status == 0)
        }
    }
}
