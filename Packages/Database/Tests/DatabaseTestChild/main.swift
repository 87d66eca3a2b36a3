// The child process of PeerSyncDatabaseTests' multi-process tests.
//
//   database-test-child BACKEND write DBPATH PREFIX COUNT EXPECTED
//       Opens the database, listens for changes, prints "READY", saves COUNT documents
//       PREFIX0 … PREFIX<COUNT-1>, then waits (at most 120 s) until its listener has seen
//       EXPECTED distinct document IDs that do not start with PREFIX; prints "SAW <n>" and
//       exits 0 if it saw them all, 1 otherwise.
//   database-test-child BACKEND stream DBPATH PREFIX
//       Saves documents PREFIX0, PREFIX1, … (every 5th with a small blob) until killed,
//       printing "SAVED <id>" after each save has returned.
//   database-test-child BACKEND hold-write DBPATH RELEASEFILE
//       Opens the database, starts a batch (one write transaction) that saves the document
//       "held", prints "HOLDING", keeps the transaction open until RELEASEFILE exists (at
//       most 120 s), then commits and prints "COMMITTED".
//
// BACKEND is "sqlite" or "lmdb" (when their package traits are on) or "memory".
import Foundation
import PeerSync
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncStorage
import Synchronization

enum Child {
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    static func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("database-test-child: \(message)\n".utf8))
        return 2
    }

    static func run(_ arguments: [String]) async -> Int32 {
        guard arguments.count >= 4, let backend = StorageBackends.named(arguments[1]) else {
            return fail("usage: database-test-child BACKEND write|stream DBPATH ...")
        }
        let mode = arguments[2]
        let path = arguments[3]
        do {
            let config = DatabaseConfiguration(backend: backend, durable: mode == "stream",
                                               changePollInterval: .milliseconds(20), busyTimeout: .seconds(60))
            let database = try await Database(path: path, config: config)
            switch mode {
            case "write" where arguments.count == 7:
                guard let count = Int(arguments[5]), let expected = Int(arguments[6]) else { return fail("bad numbers") }
                return try await write(database, prefix: arguments[4], count: count, expected: expected)
            case "hold-write" where arguments.count == 5:
                try await holdWrite(database, releaseFile: arguments[4])
                return 0
            case "stream" where arguments.count == 5:
                try await stream(database, prefix: arguments[4])
                return 0
            default:
                return fail("unknown mode or wrong arguments: \(arguments.dropFirst())")
            }
        } catch {
            return fail("\(error)")
        }
    }

    static func write(_ database: Database, prefix: String, count: Int, expected: Int) async throws -> Int32 {
        let collection = try database.defaultCollection()
        let seen = Mutex(Set<String>())
        let token = collection.addChangeListener { change in
            seen.withLock { set in
                for id in change.documentIDs where !id.hasPrefix(prefix) { set.insert(id) }
            }
        }
        // Let the listener's registration reach the database queue before announcing it.
        _ = try await collection.lastSequence
        say("READY")
        for i in 0..<count {
            var doc = MutableDocument(id: "\(prefix)\(i)", data: ["n": .int(Int64(i)), "writer": .string(prefix)])
            try await collection.save(document: &doc)
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while seen.withLock({ $0.count }) < expected && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let n = seen.withLock { $0.count }
        token.remove()
        say("SAW \(n)")
        try await database.close()
        return n >= expected ? 0 : 1
    }

    static func holdWrite(_ database: Database, releaseFile: String) async throws {
        let collection = try database.defaultCollection()
        try await database.inBatch { transaction in
            var doc = MutableDocument(id: "held", data: ["state": "uncommitted"])
            try transaction.save(document: &doc, in: collection)
            say("HOLDING")
            let deadline = ContinuousClock.now + .seconds(120)
            while !FileManager.default.fileExists(atPath: releaseFile), ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.002)
            }
        }
        say("COMMITTED")
        try await database.close()
    }

    static func stream(_ database: Database, prefix: String) async throws {
        let collection = try database.defaultCollection()
        var i = 0
        while true {
            let id = "\(prefix)\(i)"
            var doc = MutableDocument(id: id, data: ["n": .int(Int64(i)), "text": .string(String(repeating: "x", count: i % 300))])
            if i % 5 == 0 {
                doc.setBlob(Blob(contentType: "application/octet-stream", data: Data("blob \(prefix)\(i)".utf8)), forKey: "file")
            }
            try await collection.save(document: &doc)
            say("SAVED \(id)")
            i += 1
        }
    }
}

exit(await Child.run(CommandLine.arguments))
