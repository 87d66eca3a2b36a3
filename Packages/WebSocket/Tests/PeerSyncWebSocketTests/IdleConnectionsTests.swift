import Foundation
import PeerSyncCore
import PeerSyncTestSupport
import PeerSyncTransport
@testable import PeerSyncWebSocket
import Testing

/// 1,000 idle WebSocket connections must not hold 1,000 threads.
///
/// Threads are counted in /proc/self/task, which covers the whole process. Other tests of the
/// package run in parallel and start threads of their own (Process, Dispatch), so the exact
/// count is measured in a child process: the test binary re-runs itself with only
/// ``IdleConnectionsTests/probe()`` selected and `PEERSYNC_IDLE_PROBE=1`.
@Suite("Idle connections", .timeLimit(.minutes(2)))
struct IdleConnectionsTests {
    static let childConnections = 1000

    /// Opens `count` client connections to a server in this process and keeps them idle;
    /// returns (threads, resident MiB) measured while they are all open.
    static func openIdle(count: Int) async throws -> (threads: Int, rssMB: Double, baselineThreads: Int, reactorThreads: Int) {
        let accepted = Counter()
        let holder = ConnectionList()
        var configuration = WebSocketServerConfiguration()
        configuration.host = "127.0.0.1"
        let route = WebSocketRoute(path: nil) { connection in
            holder.add(connection)
            accepted.add(1)
        }
        let server = try await WebSocketServer.start(configuration: configuration, routes: [route])
        let baselineThreads = threadCount()
        let clients = ConnectionList()
        let endpoint = try Endpoint(url: "ws://127.0.0.1:\(server.port)/idle")
        var opened = 0
        while opened < count {
            let batch = min(50, count - opened)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<batch {
                    group.addTask { clients.add(try await WebSocketTransport().connectWebSocket(to: endpoint)) }
                }
                try await group.waitForAll()
            }
            opened += batch
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while accepted.value < count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try #require(accepted.value == count)
        // Let everything settle into its idle state.
        try await Task.sleep(for: .milliseconds(500))
        let threads = threadCount()
        let rss = residentMegabytes()
        let reactors = threadNames().filter { $0 == "PeerSyncReactor" }.count
        // Still alive and usable after idling.
        let sample = try #require(clients.all.first)
        try await sample.send(text: "wake up")
        await withTaskGroup(of: Void.self) { group in
            for connection in clients.all { group.addTask { await connection.close() } }
        }
        await server.stop()
        return (threads, rss, baselineThreads, reactors)
    }

    @Test("1,000 idle connections hold fewer than 16 threads and less than 100 MB (child process)")
    func thousandIdleConnections() async throws {
        if ProcessInfo.processInfo.environment["PEERSYNC_IDLE_PROBE"] != nil { return }  // we are the child
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let child = try ChildProcess(executable: executable,
                                     ["--testing-library", "swift-testing", "--filter", "IdleConnectionsTests/probe"],
                                     environment: ["PEERSYNC_IDLE_PROBE": "1"])
        let status = await child.waitForExit(timeout: .seconds(90))
        let output = child.text
        try #require(status != nil, "the idle-connections child did not finish: \(output)")
        let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("IDLE ") }, "child output: \(output)")
        var values: [String: Double] = [:]
        for field in line.dropFirst(5).split(separator: " ") {
            let parts = field.split(separator: "=")
            if parts.count == 2 { values[String(parts[0])] = Double(parts[1]) }
        }
        let threads = try #require(values["threads"])
        let rss = try #require(values["rss_mb"])
        #expect(values["connections"] == Double(Self.childConnections))
        #expect(values["reactor_threads"] == 1)
        #expect(threads < 16, "threads with \(Self.childConnections) idle connections: \(threads)")
        // Under a sanitizer (`Tools/test --sanitize` sets PEERSYNC_SANITIZER) RSS measures the
        // sanitizer (ASan: 328 MB here, its shadow memory, redzones and quarantine), not ours.
        if ProcessInfo.processInfo.environment["PEERSYNC_SANITIZER"] == nil {
            #expect(rss < 100, "resident MiB with \(Self.childConnections) idle connections (both ends): \(rss)")
        }
        #expect(status == 0, "child output: \(output)")
    }

    /// In the child: 1,000 connections and the measured figures on one line. In a normal run:
    /// 200 connections must not add threads beyond the few the runtime may start.
    @Test("probe")
    func probe() async throws {
        if ProcessInfo.processInfo.environment["PEERSYNC_IDLE_PROBE"] != nil {
            let result = try await Self.openIdle(count: Self.childConnections)
            print("IDLE connections=\(Self.childConnections) threads=\(result.threads) rss_mb=\(Int(result.rssMB)) baseline_threads=\(result.baselineThreads) reactor_threads=\(result.reactorThreads)")
            return
        }
        let result = try await Self.openIdle(count: 200)
        // Other tests run in parallel and start threads of their own, so the total is only
        // checked loosely here (the child process measures it exactly); our own threads are
        // counted by name: one reactor, whatever the number of connections.
        #expect(result.threads - result.baselineThreads < 64,
                "200 idle connections added \(result.threads - result.baselineThreads) threads")
        #expect(result.reactorThreads == 1)
    }
}

final class ConnectionList: Sendable {
    private let list = LockedValue<[WebSocketConnection]>([])
    func add(_ connection: WebSocketConnection) { list.withLock { $0.append(connection) } }
    var all: [WebSocketConnection] { list.withLock { $0 } }
}
