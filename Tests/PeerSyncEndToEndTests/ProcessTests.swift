import Foundation
import PeerSync
import PeerSyncTestSupport
import Testing

extension ChildProcess {
    /// A `peersync` child process (built next to the test bundle).
    convenience init(peersync arguments: [String]) throws {
        try self.init(product: "peersync", arguments)
    }

    /// The port of a `serve` child's "listening on <url>" line.
    func listeningPort() async -> Int? {
        _ = await wait { $0.contains { $0.hasPrefix("listening on ") } }
        guard let line = output.first(where: { $0.hasPrefix("listening on ") }),
              let url = URL(string: String(line.dropFirst("listening on ".count))) else { return nil }
        return url.port
    }
}

/// The progress lines of `sync --verbose`: `activity <level> <completed>/<total>`.
func progress(_ lines: [String]) -> (completed: Int, total: Int)? {
    guard let last = lines.last(where: { $0.hasPrefix("activity ") }) else { return nil }
    let parts = last.split(separator: " ")
    guard parts.count == 3 else { return nil }
    let nums = parts[2].split(separator: "/").compactMap { Int($0) }
    return nums.count == 2 ? (nums[0], nums[1]) : nil
}

/// `peersync serve` and `peersync sync` as separate processes, including SIGKILL of either side.
@Suite(.serialized) struct ProcessTests {
    static let docCount = 3000

    /// A server database with `docCount` documents (written in-process, then closed).
    func prepareServer(_ dir: String) async throws -> String {
        let path = dir + "/server"
        let server = try await Database(path: path, config: DatabaseConfiguration(directory: path, backend: StorageBackends.default))
        let collection = try server.defaultCollection()
        try await server.inBatch { txn in
            for i in 0..<Self.docCount {
                var doc = MutableDocument(id: "doc-\(i)", data: ["n": .int(Int64(i)), "text": .string(String(repeating: "x", count: 200))])
                try txn.save(document: &doc, in: collection)
            }
        }
        try await server.close()
        return path
    }

    func serve(_ path: String, port: Int = 0) throws -> ChildProcess {
        try ChildProcess(peersync: ["--db", path, "serve", "--port", String(port), "--interface", "127.0.0.1", "--name", "server",
                             "--user", "u", "--password", "p"])
    }

    func countDocuments(_ path: String) async throws -> Int {
        let db = try await Database(path: path, config: DatabaseConfiguration(directory: path, backend: StorageBackends.default))
        let count = try await db.defaultCollection().count
        try await db.close()
        return count
    }

    @Test func cliExitCodesAndOneLineErrors() async throws {
        try await withTemporaryDirectory { dir in
            let serverPath = try await prepareServer(dir)
            let server = try serve(serverPath)
            let port = try #require(await server.listeningPort())
            #expect(server.output.filter { $0.hasPrefix("listening on wss://127.0.0.1:") }.count == 1)
            let url = "wss://127.0.0.1:\(port)/server"

            let wrong = try ChildProcess(peersync: ["--db", dir + "/c1", "sync", url, "--self-signed-only", "--user", "u", "--password", "bad"])
            #expect(await wrong.waitForExit() == 1)
            #expect(wrong.output == ["peersync: HTTP 401: the listener rejected the credentials"])

            let untrusted = try ChildProcess(peersync: ["--db", dir + "/c1", "sync", url, "--user", "u", "--password", "p"])
            #expect(await untrusted.waitForExit() == 1)
            #expect(untrusted.output.count == 1)

            let usage = try ChildProcess(peersync: ["--db", dir + "/c1", "sync", url, "--push", "--pull"])
            #expect(await usage.waitForExit() == 2)

            let ok = try ChildProcess(peersync: ["--db", dir + "/c1", "sync", url, "--pull", "--self-signed-only", "--user", "u", "--password", "p"])
            #expect(await ok.waitForExit() == 0)
            #expect(try await countDocuments(dir + "/c1") == Self.docCount)

            server.signal(SIGTERM)
            #expect(await server.waitForExit() == 0)
        }
    }

    /// The listener process is SIGKILLed mid-replication and restarted on the same port: the
    /// (continuous) client goes offline, reconnects, resumes and gets everything.
    /// (Was disabled; passes since the continuous-run and reply-timeout fixes in the replicator.)
    @Test
    func sigkillListenerMidReplication() async throws {
        try await withTemporaryDirectory { dir in
            let serverPath = try await prepareServer(dir)
            var server = try serve(serverPath)
            let port = try #require(await server.listeningPort())
            let client = try ChildProcess(peersync: ["--db", dir + "/client", "sync", "wss://127.0.0.1:\(port)/server", "--pull",
                                              "--continuous", "--self-signed-only", "--user", "u", "--password", "p", "--verbose"])
            #expect(await client.wait { (progress($0)?.completed ?? 0) > 0 })
            server.signal(SIGKILL)
            _ = await server.waitForExit()
            let interrupted = progress(client.output)?.completed ?? 0
            #expect(await client.wait { $0.contains { $0.hasPrefix("activity offline") } })
            server = try serve(serverPath, port: port)
            #expect(await server.listeningPort() == port)
            var complete = false
            for _ in 0..<600 where !complete {
                complete = (try? await countDocuments(dir + "/client")) == Self.docCount
                if !complete { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(complete, "\(client.output.suffix(5))")
            #expect(interrupted < Self.docCount, "the kill came too late to interrupt the replication")
            client.signal(SIGTERM)
            #expect(await client.waitForExit() == 0)
            server.signal(SIGTERM)
            #expect(await server.waitForExit() == 0)
        }
    }

    /// The replicator process is SIGKILLed mid-replication (after at least one checkpoint):
    /// a new run resumes from the checkpoint (it transfers fewer changes) and completes.
    @Test func sigkillReplicatorMidReplicationResumesFromCheckpoint() async throws {
        try await withTemporaryDirectory { dir in
            let serverPath = try await prepareServer(dir)
            let server = try serve(serverPath)
            let port = try #require(await server.listeningPort())
            let url = "wss://127.0.0.1:\(port)/server"
            let first = try ChildProcess(peersync: ["--db", dir + "/client", "sync", url, "--pull", "--continuous",
                                             "--self-signed-only", "--user", "u", "--password", "p", "--verbose"])
            // Past the first checkpoint save (every second while running) but not finished.
            #expect(await first.wait { (progress($0)?.completed ?? 0) > 0 })
            try await Task.sleep(for: .milliseconds(1500))
            first.signal(SIGKILL)
            _ = await first.waitForExit()
            let before = progress(first.output)?.completed ?? 0

            let second = try ChildProcess(peersync: ["--db", dir + "/client", "sync", url, "--pull",
                                              "--self-signed-only", "--user", "u", "--password", "p", "--verbose"])
            #expect(await second.waitForExit() == 0, "\(second.output.suffix(5))")
            let resumed = progress(second.output)?.total ?? Int.max
            #expect(resumed < Self.docCount, "the second run started from scratch (\(resumed) changes; first run got \(before))")
            #expect(try await countDocuments(dir + "/client") == Self.docCount)
            server.signal(SIGTERM)
            #expect(await server.waitForExit() == 0)
        }
    }
}
