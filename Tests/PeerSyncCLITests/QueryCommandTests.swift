import Foundation
import PeerSync
@_spi(Indexing) import PeerSyncDatabase
import PeerSyncTestSupport
import Testing
@testable import peersync

/// `peersync query` and `peersync index`, run as a child process on each on-disk backend.
@Suite(.timeLimit(.minutes(5))) struct QueryCommandTests {
    static func peersync(_ args: [String]) async throws -> ChildProcess.Outcome {
        try await ChildProcess.run(product: "peersync", args)
    }

    static var backends: [String] {
        var names = ["sqlite"]
        if StorageBackends.named("lmdb") != nil { names.append("lmdb") }
        return names
    }

    /// Fails when a value index of `collection` in the database at `path` is stale.
    static func expectIndexesUpToDate(_ path: String, backend: String, collection name: String) async throws {
        let storage = try #require(StorageBackends.named(backend))
        let database = try await Database(path: path, config: DatabaseConfiguration(directory: path, backend: storage))
        let collection = try #require(try await database.collection(name: name))
        let definitions = try await collection.indexDefinitions()
        #expect(!definitions.isEmpty)
        for definition in definitions {
            #expect(!definition.isStale, "index \(definition.name) was left stale by a CLI write")
        }
        try await database.close()
    }

    @Test(arguments: QueryCommandTests.backends)
    func queryAndIndexCommands(_ backend: String) async throws {
        try await withTemporaryDirectory { dir in
            let db = dir + "/db"
            // The first command creates the database with the backend asked for; the others detect it.
            let lines = (1...12).map { i in
                #"{"_id":"t\#(String(format: "%02d", i))","type":"\#(i % 3 == 0 ? "note" : "task")","n":\#(i)}"#
            }.joined(separator: "\n")
            let file = dir + "/docs.jsonl"
            try lines.write(toFile: file, atomically: true, encoding: .utf8)
            let imported = try await Self.peersync(["--db", db, "--backend", backend, "--collection", "tasks", "import", file])
            #expect(imported.status == 0, "\(imported.standardError)")

            let create = try await Self.peersync(["--db", db, "--collection", "tasks", "index", "create", "byType", "type", "n"])
            #expect(create.status == 0, "\(create.standardError)")
            // Writes of later commands keep the index up to date (the CLI installs the query
            // module's indexer for every command), so they do not leave it stale for the next
            // query to rebuild.
            let more = dir + "/more.jsonl"
            try #"{"_id":"t13","type":"task","n":13}"#.write(toFile: more, atomically: true, encoding: .utf8)
            let importedMore = try await Self.peersync(["--db", db, "--collection", "tasks", "import", more])
            #expect(importedMore.status == 0, "\(importedMore.standardError)")
            let put = try await Self.peersync(["--db", db, "--collection", "tasks", "put", "t14", #"{"type":"task","n":14}"#])
            #expect(put.status == 0, "\(put.standardError)")
            try await Self.expectIndexesUpToDate(db, backend: backend, collection: "tasks")
            let list = try await Self.peersync(["--db", db, "--collection", "tasks", "index", "list"])
            #expect(list.status == 0)
            #expect(list.standardOutput == "byType\ttype, n\n")

            let sql = "SELECT meta().id, n FROM tasks WHERE type = $t AND n > $min ORDER BY n DESC LIMIT 2"
            let explain = try await Self.peersync(["--db", db, "query", sql, "--explain", "--param", "t=note", "--param", "min=3"])
            #expect(explain.status == 0, "\(explain.standardError)")
            #expect(explain.standardOutput.contains("USING INDEX byType"), "\(explain.standardOutput)")
            let rows = try await Self.peersync(["--db", db, "query", sql, "--param", "t=note", "--param=min=3"])
            #expect(rows.status == 0, "\(rows.standardError)")
            #expect(rows.standardOutput == #"{"id":"t12","n":12}"# + "\n" + #"{"id":"t09","n":9}"# + "\n")
            // A JSON parameter value: the string "3" is not the number 3.
            let typed = try await Self.peersync(["--db", db, "query", "SELECT COUNT(*) AS c FROM tasks WHERE n = $v", "--param", #"v="3""#])
            #expect(typed.standardOutput == #"{"c":0}"# + "\n")

            let drop = try await Self.peersync(["--db", db, "--collection", "tasks", "index", "drop", "byType"])
            #expect(drop.status == 0)
            let scan = try await Self.peersync(["--db", db, "query", sql, "--explain", "--param", "t=note", "--param", "min=3"])
            #expect(scan.standardOutput.contains("SCAN COLLECTION"))
            let again = try await Self.peersync(["--db", db, "query", sql, "--param", "t=note", "--param", "min=3"])
            #expect(again.standardOutput == rows.standardOutput)

            // Errors: one line, exit 1; usage errors: exit 2 with the command's usage.
            let missing = try await Self.peersync(["--db", db, "--collection", "tasks", "index", "drop", "byType"])
            #expect(missing.status == 1)
            #expect(missing.standardError == "peersync: no index 'byType' in _default.tasks\n")
            let syntax = try await Self.peersync(["--db", db, "query", "SELECT FROM tasks"])
            #expect(syntax.status == 1)
            #expect(syntax.standardError.contains("line 1, column 8"), "\(syntax.standardError)")
            #expect(syntax.standardError.split(separator: "\n").count == 1)
            for args in [["query", sql, "--bogus"], ["query"], ["index", "create", "x"], ["index", "rename"],
                         ["query", sql, "--param", "noequals"], ["index", "list", "--explain"]] {
                let usage = try await Self.peersync(["--db", db] + args)
                #expect(usage.status == 2, "\(args)")
                #expect(usage.standardError.contains("usage: peersync"), "\(args): \(usage.standardError)")
            }
            let wrongBackend = try await Self.peersync(["--db", db, "--backend", backend == "sqlite" ? "lmdb" : "sqlite", "query", sql])
            #expect(wrongBackend.status != 0)
        }
    }
}
