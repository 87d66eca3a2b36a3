import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// A connection that ends (abort, partition) or a peer that goes silent must take the
/// replicator out of `.busy`/`.idle`: offline + retry (continuous) or a clear error (one-shot).
@Suite struct DeadPeerTests {
    /// A connector that remembers the connections it opened, so the test can abort them.
    final class RecordingConnector: Sendable {
        let connections = Mutex<[LoopbackConnection]>([])
        let network: LoopbackNetwork
        let endpoint: Endpoint
        let host: String

        init(network: LoopbackNetwork, endpoint: Endpoint, host: String = "client-\(UUID().uuidString.prefix(6))") {
            self.network = network
            self.endpoint = endpoint
            self.host = host
        }

        var connector: ReplicatorConnector {
            { [self] _ in
                let c = try await LoopbackTransport(network: network, host: host).connectLoopback(to: endpoint)
                connections.withLock { $0.append(c) }
                return c
            }
        }

        var count: Int { connections.withLock { $0.count } }
        func abortAll() { for c in connections.withLock({ $0 }) { c.abort() } }
    }

    /// Records every activity change of a replicator.
    final class ActivityLog: Sendable {
        let levels = Mutex<[ReplicatorActivityLevel]>([])
        func contains(_ level: ReplicatorActivityLevel, after index: Int) -> Bool {
            levels.withLock { $0.dropFirst(index).contains(level) }
        }
        var count: Int { levels.withLock { $0.count } }
    }

    @Test(arguments: [false, true])
    func abortedConnectionGoesOfflineThenRecovers(partition: Bool) async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            try await save(a, "before", ["v": 1])
            let recorder = RecordingConnector(network: p[1].network, endpoint: p[1].endpoint)
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.continuous = true
            cfg.replyTimeout = slow(.seconds(2))
            cfg.maxAttemptWaitTime = .milliseconds(200)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: recorder.connector)
            let log = ActivityLog()
            replicator.addChangeListener { change in log.levels.withLock { $0.append(change.status.activity) } }
            replicator.start()
            #expect(try await eventually { try await b.document(id: "before") != nil })
            #expect(try await eventually { replicator.status.activity == .idle })
            let mark = log.count
            if partition {
                p[1].network.partition([recorder.host], [p[1].endpoint.host])
            } else {
                recorder.abortAll()
            }
            // Noticed at once (the link reports the reset), and in any case within the reply timeout
            // (2 s; the wait allows 10 s so that a loaded machine does not fail it).
            #expect(try await eventually { log.contains(.offline, after: mark) })
            #expect(replicator.status.error != nil)
            if partition {
                // While partitioned, reconnecting fails and the replicator stays offline/connecting, never busy.
                try await Task.sleep(for: .milliseconds(500))
                #expect(replicator.status.activity == .offline || replicator.status.activity == .connecting)
                p[1].network.heal()
            }
            // It reconnects, catches up again and picks up new edits.
            #expect(try await eventually { recorder.count >= 2 && replicator.status.activity == .idle })
            try await save(a, "after", ["v": 2])
            #expect(try await eventually { try await b.document(id: "after") != nil })
            replicator.stop()
            await replicator.waitUntilStopped()
            #expect(replicator.status.activity == .stopped)
        }
    }

    /// A peer that accepts the connection and then never answers: the reply timeout ends the
    /// wait. One-shot with one attempt stops with `.timeout`; continuous goes offline.
    @Test(arguments: [false, true])
    func silentPeerIsNoticedWithinTheReplyTimeout(continuous: Bool) async throws {
        let network = LoopbackNetwork()
        let endpoint = try Endpoint(url: "loopback://silent-\(UUID().uuidString.prefix(8))/db")
        let listener = try LoopbackTransport(network: network, host: endpoint.host).listenLoopback(on: endpoint)
        let held = Mutex<[LoopbackConnection]>([])
        let acceptor = Task {
            while let c = try? await listener.acceptLoopback() { held.withLock { $0.append(c) } }
        }
        try await withPeers(1) { p in
            let a = try p[0].defaultCollection
            try await save(a, "doc", ["v": 1])
            var cfg = ReplicatorConfiguration(target: endpoint)
            cfg.continuous = continuous
            cfg.replyTimeout = slow(.milliseconds(500))
            cfg.maxAttempts = continuous ? 0 : 1
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: { _ in
                try await LoopbackTransport(network: network, host: "client").connect(to: endpoint, options: .init())
            })
            let log = ActivityLog()
            replicator.addChangeListener { change in log.levels.withLock { $0.append(change.status.activity) } }
            replicator.start()
            if continuous {
                #expect(try await eventually(.seconds(3)) { log.contains(.offline, after: 0) })
                #expect(replicator.status.error?.code == .timeout)
                replicator.stop()
                await replicator.waitUntilStopped()
            } else {
                #expect(try await eventually(.seconds(3)) { replicator.status.activity == .stopped })
                await replicator.waitUntilStopped()
                #expect(replicator.status.error?.code == .timeout)
            }
        }
        await listener.close()
        for c in held.withLock({ $0 }) { c.abort() }
        acceptor.cancel()
        await acceptor.value
    }
}
