import Foundation
import PeerSync

/// `peersync --db DIR query "SELECT …" [--explain] [--param NAME=VALUE]...` and
/// `peersync --db DIR [--collection SCOPE.NAME] index create NAME EXPR... | list | drop NAME`.
///
/// `query` prints one JSON object per result row (JSON Lines, keys = the column names, MISSING
/// values omitted) as the rows are read, through `Query.resultStream()` (a page of rows in memory
/// at a time for a query without sort, group, distinct or join), or with `--explain` the plan (which index it uses, or "SCAN"). A `--param`
/// value is parsed as JSON when it parses (`3`, `true`, `"x"`, `[1]`), else taken as a string.
/// The database's backend is detected as for every command (``DatabaseOpening``).
enum QueryCommands {
    static let valueOptions: Set<String> = ["db", "backend", "collection"]
    static let flagOptions: Set<String> = ["explain"]
    static let indexSubcommands = ["create", "list", "drop"]

    static func run(_ args: [String]) async throws -> Int32 {
        // `--param` may repeat: take those pairs out before the common parser sees the rest.
        var rest: [String] = []
        var parameters: [(String, JSONValue)] = []
        var i = 0
        while i < args.count {
            let arg = args[i]
            if arg == "--" { rest += args[i...]; break }
            if arg == "--param" || arg.hasPrefix("--param=") {
                let pair: String
                if arg == "--param" {
                    guard i + 1 < args.count else { throw UsageError("option --param needs a value") }
                    pair = args[i + 1]
                    i += 2
                } else {
                    pair = String(arg.dropFirst("--param=".count))
                    i += 1
                }
                parameters.append(try parameter(pair))
                continue
            }
            rest.append(arg)
            i += 1
        }
        let parsed = try Arguments(rest, valueOptions: valueOptions, flagOptions: flagOptions)
        guard let dir = parsed.value("db") else { throw UsageError("--db DIR is required") }
        let command = try parsed.positional(0, "command")
        let operands = Array(parsed.positionals.dropFirst())
        switch command {
        case "query":
            guard operands.count == 1 else { throw UsageError("'query' takes 1 argument (the SQL++ text)") }
            if parsed.value("collection") != nil { throw UsageError("--collection goes with 'index' (a query names its collection in FROM)") }
        case "index":
            if parsed.flag("explain") || !parameters.isEmpty { throw UsageError("--explain and --param go with 'query'") }
            guard let sub = operands.first else {
                throw UsageError("'index' needs a subcommand: create NAME EXPR..., list or drop NAME")
            }
            guard indexSubcommands.contains(sub) else {
                throw UsageError("unknown 'index' subcommand '\(sub)': create NAME EXPR..., list or drop NAME")
            }
            switch sub {
            case "create": if operands.count < 3 { throw UsageError("'index create' takes a name and at least one expression") }
            case "list": if operands.count != 1 { throw UsageError("'index list' takes no argument") }
            default: if operands.count != 2 { throw UsageError("'index drop' takes 1 argument (the index name)") }
            }
        default:
            throw UsageError("unknown command '\(command)'")
        }

        let (db, _) = try await DatabaseOpening.open(dir, backend: parsed.value("backend"))
        do {
            if command == "query" {
                try await runQuery(operands[0], db: db, explain: parsed.flag("explain"), parameters: parameters)
            } else {
                try await runIndex(operands, db: db, collectionSpec: parsed.value("collection"))
            }
            try await db.close()
            return 0
        } catch {
            try? await db.close()
            throw error
        }
    }

    /// `NAME=VALUE`, the value as JSON when it parses, else as a string.
    static func parameter(_ pair: String) throws(UsageError) -> (String, JSONValue) {
        guard let eq = pair.firstIndex(of: "="), eq != pair.startIndex else {
            throw UsageError("--param needs NAME=VALUE, got '\(pair)'")
        }
        let name = String(pair[..<eq])
        let text = String(pair[pair.index(after: eq)...])
        if let value = try? JSONValue(parsing: text) { return (name, value) }
        return (name, .string(text))
    }

    static func runQuery(_ sql: String, db: Database, explain: Bool, parameters: [(String, JSONValue)]) async throws {
        let query = try db.createQuery(sql)
        if !parameters.isEmpty {
            let bound = Parameters()
            for (name, value) in parameters { bound.setValue(value, forName: name) }
            query.parameters = bound
        }
        if explain {
            print(try await query.explain())
            return
        }
        // Streamed: one page of rows in memory at a time (see `Query.resultStream`).
        var out = ""
        for try await row in query.resultStream() {
            out += row.toJSON()
            out += "\n"
            if out.utf8.count > 1 << 16 { FileHandle.standardOutput.write(Data(out.utf8)); out = "" }
        }
        FileHandle.standardOutput.write(Data(out.utf8))
    }

    static func runIndex(_ operands: [String], db: Database, collectionSpec: String?) async throws {
        let collection = try await DatabaseCommands.resolveCollection(collectionSpec, in: db, create: false)
        switch operands[0] {
        case "create":
            try await collection.createIndex(withName: operands[1], config: ValueIndexConfiguration(Array(operands.dropFirst(2))))
        case "list":
            for name in try await collection.indexes() {
                guard let index = try await collection.index(withName: name) else { continue }
                print("\(name)\t\(index.expressions.joined(separator: ", "))")
            }
        default:
            guard try await collection.index(withName: operands[1]) != nil else {
                throw PeerSyncError(.notFound, "no index '\(operands[1])' in \(collection.fullName)")
            }
            try await collection.deleteIndex(forName: operands[1])
        }
    }
}
