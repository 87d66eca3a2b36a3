import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// Retries as Couchbase Lite does them: exponential backoff capped by `maxAttemptWaitTime`,
/// at most `maxAttempts` failures in a row, and the count (so the backoff) starting again
/// after a connection that got going. The waits are read from ``ReplicatorStatus/retry``,
/// not timed, so the tests do not depend on machine speed.
@Suite(.timeLimit(.minutes(2 * slowFactor))) struct RetryTests {
    /// Records every status a replicator reports.
    final class StatusLog: Sendable {
        let statuses = Mutex<[ReplicatorStatus]>([])
        var count: Int { statuses.withLock { $0.count } }
        func contains(_ level: ReplicatorActivityLevel, after index: Int) -> Bool {
            statuses.withLock { $0.dropFirst(index).contains { $0.activity == level } }
        }
        var offline: [ReplicatorStatus] { statuses.withLock { $0.filter { $0.activity == .offline } } }
    }

    /// A continuous replicator whose link is broken again and again after it got going (idle):
    /// every reconnection wait is the first step of the backoff (attempt 1), not 1, 2, 4 … .
    @Test
    func continuousBackoffStartsAgainAfterAConnectionThatGotGoing() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            let recorder = DeadPeerTests.RecordingConnector(network: p[1].network, endpoint: p[1].endpoint)
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.continuous = true
            cfg.replyTimeout = .seconds(10)
            cfg.maxAttemptWaitTime = .milliseconds(300)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: recorder.connector)
            let log = StatusLog()
            replicator.addChangeListener { change in log.statuses.withLock { $0.append(change.status) } }
            replicator.start()
            #expect(try await eventually { replicator.status.activity == .idle })
            let breaks = 4
            for round in 1...breaks {
                let mark = log.count
                recorder.abortAll()
                #expect(try await eventually { log.contains(.offline, after: mark) })
                // It reconnects and gets going again; a new edit crosses the new connection.
                #expect(try await eventually { recorder.count > round && replicator.status.activity == .idle })
                try await save(a, "after-\(round)", ["round": .int(Int64(round))])
                #expect(try await eventually { try await b.document(id: "after-\(round)") != nil })
            }
            replicator.stop()
            await replicator.waitUntilStopped()
            let offline = log.offline
            #expect(offline.count == breaks)
            for status in offline {
                #expect(status.retry == ReplicatorRetry(failedAttempt: 1, nextAttemptIn: .milliseconds(300)))
                #expect(status.error != nil)
            }
            #expect(replicator.status.retry == nil)
        }
    }

    /// A one-shot pull with `maxAttempts` = 2 over a link that breaks after a few revisions,
    /// many more than 2 times in total: each connection gets going and makes progress, so the
    /// count starts again and the replication completes with every document.
    @Test
    func oneShotCompletesWhenEveryConnectionMakesProgress() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            let docs = 30
            for i in 0..<docs {
                // Random text, so that BLIP's compression keeps each revision about 1-2 kB on the wire.
                let filler = (0..<60).map { _ in UUID().uuidString }.joined()
                try await save(b, "doc-\(i)", ["i": .int(Int64(i)), "filler": .string(filler)])
            }
            let connections = Counter()
            let base = p[1].connector(conditions: LinkConditions(dropAfterBytes: 12_000))
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.replicatorType = .pull
            cfg.maxAttempts = 2
            cfg.maxAttemptWaitTime = .milliseconds(50)
            cfg.replyTimeout = .seconds(10)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: { cfg in
                connections.value.withLock { $0 += 1 }
                return try await base(cfg)
            })
            let log = StatusLog()
            replicator.addChangeListener { change in log.statuses.withLock { $0.append(change.status) } }
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            #expect(replicator.status.retry == nil)
            #expect(try await a.count == docs)
            // The link broke more than maxAttempts times: without the reset it would have given up.
            #expect(connections.value.withLock { $0 } > 3)
            #expect(log.offline.count > 2)
            #expect(log.offline.allSatisfy { $0.retry?.failedAttempt == 1 })
        }
    }

    /// Attempts that never get going (nothing listens) are counted: the waits double up to
    /// `maxAttemptWaitTime`, and after `maxAttempts` the replicator stops with the error and
    /// the last failed attempt (no next one).
    @Test
    func failedConnectionsBackOffAndGiveUp() async throws {
        try await withPeers(1) { p in
            let a = try p[0].defaultCollection
            let endpoint = try Endpoint(url: "loopback://nobody-\(UUID().uuidString.prefix(8))/db")
            var cfg = ReplicatorConfiguration(target: endpoint)
            cfg.maxAttempts = 3
            // The waits are 1 s then 1.5 s (2 s capped): 2.5 s of sleeping in all.
            cfg.maxAttemptWaitTime = .milliseconds(1500)
            cfg.addCollections([a])
            let (replicator, log) = try await runUntilStopped(cfg, network: p[0].network, endpoint: endpoint)
            #expect(replicator.status.error?.code == .connectionRefused)
            #expect(replicator.status.retry == ReplicatorRetry(failedAttempt: 3, nextAttemptIn: nil))
            #expect(log.offline.map(\.retry) == [
                ReplicatorRetry(failedAttempt: 1, nextAttemptIn: .seconds(1)),
                ReplicatorRetry(failedAttempt: 2, nextAttemptIn: .milliseconds(1500)),
            ])
        }
    }

    /// A peer that accepts the connection but never answers: the connection never gets going,
    /// so it does not start the count again — a one-shot replicator still gives up after
    /// `maxAttempts`, with the reply timeout.
    @Test
    func silentPeerDoesNotResetTheCount() async throws {
        let network = LoopbackNetwork()
        let endpoint = try Endpoint(url: "loopback://silent-\(UUID().uuidString.prefix(8))/db")
        let listener = try LoopbackTransport(network: network, host: endpoint.host).listenLoopback(on: endpoint)
        let held = Mutex<[LoopbackConnection]>([])
        let acceptor = Task {
            while let c = try? await listener.acceptLoopback() { held.withLock { $0.append(c) } }
        }
        try await withPeers(1) { p in
            var cfg = ReplicatorConfiguration(target: endpoint)
            cfg.replyTimeout = .milliseconds(300)
            cfg.maxAttempts = 2
            cfg.maxAttemptWaitTime = .milliseconds(50)
            cfg.addCollections([try p[0].defaultCollection])
            let (replicator, log) = try await runUntilStopped(cfg, network: network, endpoint: endpoint)
            #expect(replicator.status.error?.code == .timeout)
            #expect(replicator.status.retry == ReplicatorRetry(failedAttempt: 2, nextAttemptIn: nil))
            #expect(log.offline.map(\.retry) == [ReplicatorRetry(failedAttempt: 1, nextAttemptIn: .milliseconds(50))])
            #expect(try await eventually { held.withLock { $0.count } == 2 })
        }
        await listener.close()
        for c in held.withLock({ $0 }) { c.abort() }
        acceptor.cancel()
        await acceptor.value
    }

    /// A permanent error stops at once, without retry information.
    @Test
    func permanentErrorCarriesNoRetry() async throws {
        try await withPeers(1) { p in
            let a = try p[0].defaultCollection
            var cfg = ReplicatorConfiguration(target: p[0].endpoint)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: { _ in
                throw PeerSyncError(.unauthorized, "no", context: ["status": "401"])
            })
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error?.code == .unauthorized)
            #expect(replicator.status.retry == nil)
        }
    }
}

/// Starts a replicator over loopback to `endpoint`, records its statuses, and waits until it
/// has stopped.
private func runUntilStopped(_ cfg: ReplicatorConfiguration, network: LoopbackNetwork,
                             endpoint: Endpoint) async throws -> (Replicator, RetryTests.StatusLog) {
    let replicator = try Replicator(config: cfg, connector: { _ in
        try await LoopbackTransport(network: network, host: "client").connect(to: endpoint, options: .init())
    })
    let log = RetryTests.StatusLog()
    replicator.addChangeListener { change in log.statuses.withLock { $0.append(change.status) } }
    replicator.start()
    await replicator.waitUntilStopped()
    return (replicator, log)
}
