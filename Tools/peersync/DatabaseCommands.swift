import Foundation
import PeerSync
@_spi(Replication) import PeerSyncDatabase

/// `peersync --db DIR [--backend B] [--collection SCOPE.NAME] COMMAND ...`
enum DatabaseCommands {
    static let valueOptions: Set<String> = ["db", "backend", "collection", "limit", "count", "timeout"]
    static let flagOptions: Set<String> = ["meta", "json"]
    /// Every command with the number of operands it takes (each has a ``CommandHelp`` entry).
    static let arity: [String: ClosedRange<Int>] = [
        "put": 2...2, "get": 1...1, "rm": 1...1, "purge": 1...1, "ls": 0...0, "count": 0...0,
        "import": 1...1, "export": 0...0, "info": 0...0, "check": 0...0, "watch": 0...0,
        "revs": 1...1, "compact": 0...0,
    ]

    static func run(_ args: [String]) async throws -> Int32 {
        let parsed = try Arguments(args, valueOptions: valueOptions, flagOptions: flagOptions)
        guard let dir = parsed.value("db") else { throw UsageError("--db DIR is required") }
        let command = try parsed.positional(0, "command")
        let operands = Array(parsed.positionals.dropFirst())

        // Validate the command and its operands before touching the database.
        guard let range = arity[command] else { throw UsageError("unknown command '\(command)'") }
        guard range.contains(operands.count) else {
            throw UsageError("'\(command)' takes \(range.lowerBound == range.upperBound ? "\(range.lowerBound)" : "\(range)") argument(s)")
        }
        if parsed.flag("meta") && command != "get" { throw UsageError("--meta goes with 'get'") }
        if parsed.flag("json") && command != "info" { throw UsageError("--json goes with 'info'") }
        if parsed.value("limit") != nil && command != "ls" { throw UsageError("--limit goes with 'ls'") }
        if (parsed.value("count") != nil || parsed.value("timeout") != nil) && command != "watch" {
            throw UsageError("--count and --timeout go with 'watch'")
        }
        let limit = try parsed.int("limit")
        let watchCount = try parsed.int("count")
        let watchTimeout = try parsed.int("timeout")

        let (db, backend) = try await DatabaseOpening.open(dir, backend: parsed.value("backend"))
        do {
            let code = try await execute(command, operands, db: db, backend: backend,
                                         collectionSpec: parsed.value("collection"),
                                         meta: parsed.flag("meta"), json: parsed.flag("json"), limit: limit,
                                         watch: (watchCount, watchTimeout))
            try await db.close()
            return code
        } catch {
            try? await db.close()
            throw error
        }
    }

    static func execute(_ command: String, _ operands: [String], db: Database, backend: any StorageBackend,
                        collectionSpec: String?, meta: Bool, json: Bool, limit: Int?,
                        watch: (count: Int?, timeout: Int?) = (nil, nil)) async throws -> Int32 {
        let creating = command == "put" || command == "import" || command == "watch"
        let collection = try await resolveCollection(collectionSpec, in: db, create: creating)
        switch command {
        case "put":
            let id = operands[0]
            let text = operands[1] == "-" ? readAllStandardInput() : operands[1]
            var doc = try MutableDocument(id: id, json: text)
            try await collection.save(document: &doc)
            print(doc.revisionID ?? "")
        case "get":
            guard let doc = try await collection.document(id: operands[0]) else {
                throw PeerSyncError(.notFound, "document '\(operands[0])' not found")
            }
            var properties = doc.properties
            if meta {
                properties["_id"] = .string(doc.id)
                properties["_rev"] = doc.revisionID.map(JSONValue.string) ?? .null
                properties["_sequence"] = .int(Int64(doc.sequence))
                properties["_deleted"] = .bool(doc.isDeleted)
            }
            print(JSONValue.object(properties).canonicalString)
        case "rm":
            guard let doc = try await collection.document(id: operands[0]) else {
                throw PeerSyncError(.notFound, "document '\(operands[0])' not found")
            }
            _ = try await collection.delete(document: doc)
        case "purge":
            guard try await collection.documentIncludingDeleted(id: operands[0]) != nil else {
                throw PeerSyncError(.notFound, "document '\(operands[0])' not found")
            }
            try await collection.purge(id: operands[0])
        case "ls":
            var ids = try await collection.documentIDs()
            if let limit { ids = Array(ids.prefix(limit)) }
            for id in ids { print(id) }
        case "count":
            print(try await collection.count)
        case "import":
            let count = try await importJSONLines(from: operands[0], into: collection, db: db)
            print(count)
        case "export":
            let documents = try await collection.allDocuments()
            let progress = ProgressLine("export", unit: "docs")
            for (i, doc) in documents.enumerated() {
                var properties = doc.properties
                properties["_id"] = .string(doc.id)
                print(JSONValue.object(properties).canonicalString)
                progress.update(i + 1, of: documents.count)
            }
            progress.finish(documents.count, of: documents.count)
        case "revs":
            guard let revisions = try await collection.revisions(of: operands[0]) else {
                throw PeerSyncError(.notFound, "document '\(operands[0])' not found")
            }
            print(RevisionTreeText.render(revisions))
        case "compact":
            let before = try BlobUsage(databasePath: db.path)
            try await db.performMaintenance(.compact)
            let after = try BlobUsage(databasePath: db.path)
            print("blobs: \(before.count) before, \(after.count) after (\(before.bytes) bytes before, \(after.bytes) after)")
        case "info":
            try await printInfo(db: db, backend: backend, json: json)
        case "watch":
            try await watchChanges(collection, count: watch.count, timeout: watch.timeout)
        case "check":
            let problems = try await db.checkIntegrity()
            if problems.isEmpty {
                print("ok")
            } else {
                for p in problems { print(p) }
                throw PeerSyncError(.corrupt, "\(problems.count) integrity problem(s) found")
            }
        default:
            throw UsageError("unknown command '\(command)'")
        }
        return 0
    }

    /// `SCOPE.NAME`, or `NAME` in the default scope; nil means the default collection.
    static func resolveCollection(_ spec: String?, in db: Database, create: Bool) async throws -> PeerSync.Collection {
        guard let spec else { return try db.defaultCollection() }
        let parts = spec.split(separator: ".", maxSplits: 1).map(String.init)
        let (scope, name) = parts.count == 2 ? (parts[0], parts[1]) : ("_default", parts[0])
        if let existing = try await db.collection(name: name, scope: scope) { return existing }
        if create { return try await db.createCollection(name: name, scope: scope) }
        throw PeerSyncError(.notFound, "collection '\(scope).\(name)' does not exist")
    }

    /// Imports JSON Lines in ONE transaction: a bad line anywhere leaves the database unchanged,
    /// and a process killed mid-import leaves it as before the import.
    static func importJSONLines(from source: String, into collection: PeerSync.Collection, db: Database) async throws -> Int {
        let handle: FileHandle
        var size: Int?
        if source == "-" {
            handle = FileHandle.standardInput
        } else {
            guard let file = FileHandle(forReadingAtPath: source) else {
                throw PeerSyncError(.io, "cannot open \(source)", context: ["path": source])
            }
            handle = file
            size = (try? FileManager.default.attributesOfItem(atPath: source)[.size] as? NSNumber)?.intValue
        }
        let progress = ProgressLine("import", unit: "docs")
        let fileSize = size
        let imported = try await db.inBatch { txn in
            var count = 0
            var lineNumber = 0
            var reader = LineReader(handle: handle)
            while let line = reader.next() {
                lineNumber += 1
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
                do {
                    let value = try JSONValue(parsing: line, options: .strict)
                    guard case .object(var properties) = value else {
                        throw PeerSyncError(.invalidArgument, "a document must be a JSON object")
                    }
                    var id: String?
                    if let rawID = properties.removeValue(forKey: "_id") {
                        guard let text = rawID.stringValue else {
                            throw PeerSyncError(.invalidDocumentID, "\"_id\" must be a string")
                        }
                        id = text
                    }
                    var doc = MutableDocument(id: id ?? DocumentID.generate(), data: properties)
                    try txn.save(document: &doc, in: collection)
                    count += 1
                    progress.update(count, fraction: fileSize.map { Double(reader.bytesConsumed) / Double(max($0, 1)) })
                } catch var error as PeerSyncError {
                    error.context["line"] = String(lineNumber)
                    throw error
                }
            }
            return count
        }
        progress.finish(imported, fraction: fileSize.map { _ in 1 })
        return imported
    }

    static func printInfo(db: Database, backend: any StorageBackend, json: Bool) async throws {
        var collections: [PeerSync.Collection] = []
        for scope in try await db.scopes() {
            collections += try await scope.collections()
        }
        var entries: [JSONValue] = []
        for collection in collections.sorted(by: { $0.fullName < $1.fullName }) {
            let count = try await collection.count
            let last = try await collection.lastSequence
            entries.append(["name": .string(collection.fullName), "count": .int(Int64(count)),
                            "lastSequence": .int(Int64(last))])
        }
        if json {
            let info: JSONValue = ["path": .string(db.path), "backend": .string(backend.name), "collections": .array(entries)]
            print(info.canonicalString)
        } else {
            print("path:     \(db.path)")
            print("backend:  \(backend.name)")
            print("collections:")
            for e in entries {
                print("  \(e["name"]?.stringValue ?? "")  count \(e["count"]?.intValue ?? 0)  last sequence \(e["lastSequence"]?.intValue ?? 0)")
            }
        }
    }

    /// Prints `ready`, then one line `changed: ID ...` per change notification (from this
    /// process or any other that has the database open; notifications batch several changes)
    /// until `count` distinct documents have changed or `timeout` seconds passed (exit 1 on
    /// timeout). Without either it runs until interrupted.
    static func watchChanges(_ collection: PeerSync.Collection, count: Int?, timeout: Int?) async throws {
        let stream = collection.changeStream()
        emitLine("ready")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var seen = Set<String>()
                for await change in stream {
                    emitLine("changed: " + change.documentIDs.joined(separator: " "))
                    seen.formUnion(change.documentIDs)
                    if let count, seen.count >= count { return }
                }
            }
            if let timeout {
                group.addTask {
                    try await Task.sleep(for: .seconds(timeout))
                    throw PeerSyncError(.timeout, "no more changes within \(timeout) s")
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    static func readAllStandardInput() -> String {
        String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
    }
}

/// Reads a file line by line in 64 KiB chunks (lines as bytes, without the newline).
struct LineReader {
    let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var eof = false
    /// Bytes of the input returned so far, newlines included.
    private(set) var bytesConsumed = 0

    init(handle: FileHandle) { self.handle = handle }

    mutating func next() -> ArraySlice<UInt8>? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                let line = buffer[start..<nl]
                bytesConsumed += nl + 1 - start
                start = nl + 1
                return line
            }
            if eof {
                guard start < buffer.count else { return nil }
                let line = buffer[start...]
                bytesConsumed += buffer.count - start
                start = buffer.count
                return line
            }
            buffer.removeFirst(start)
            start = 0
            let chunk = handle.readData(ofLength: 65536)
            if chunk.isEmpty { eof = true } else { buffer.append(contentsOf: chunk) }
        }
    }
}
