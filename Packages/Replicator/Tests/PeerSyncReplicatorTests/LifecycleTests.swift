import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Synchronization
import Testing

/// Life cycle and events: closing the database stops its replicators, status listeners hear
/// only changes, `waitUntilStopped()` waits for the listeners, `changes()` replays.
@Suite struct LifecycleTests {
    /// A continuous replicator to `passive` with a connector that counts its attempts.
    private static func continuousReplicator(_ active: Peer, to passive: Peer, attempts: Counter) throws -> Replicator {
        var cfg = ReplicatorConfiguration(target: passive.endpoint)
        cfg.continuous = true
        cfg.replyTimeout = slow(.seconds(10))
        cfg.maxAttemptWaitTime = .milliseconds(100)
        cfg.addCollections([try active.defaultCollection])
        let connect = passive.connector()
        return try Replicator(config: cfg) { config in
            attempts.value.withLock { $0 += 1 }
            return try await connect(config)
        }
    }

    /// Replicators made on a shared listener queue (as the mesh makes its links' replicators,
    /// on its event queue) call their listeners there: while a job holds that queue none of
    /// them runs, and once it is free every replicator's changes arrive.
    @Test
    func replicatorsOnASharedListenerQueueCallTheirListenersThere() async throws {
        try await withPeers(1) { p in
            var cfg = ReplicatorConfiguration(target: p[0].endpoint)
            cfg.addCollections([try p[0].defaultCollection])
            let queue = SerialDelivery(label: "test.shared-listeners")
            let replicators = try (0..<2).map { _ in
                try Replicator(config: cfg, connector: { _ in
                    throw PeerSyncError(.unauthorized, "no", context: ["status": "401"])
                }, listenerQueue: queue)
            }
            let stopped = Mutex<[Int]>([])
            for (index, replicator) in replicators.enumerated() {
                replicator.addChangeListener { change in
                    if change.status.activity == .stopped { stopped.withLock { $0.append(index) } }
                }
            }
            let hold = DispatchSemaphore(value: 0)
            queue.async { hold.wait() }
            for replicator in replicators { replicator.start() }
            #expect(try await eventually { replicators.allSatisfy { $0.status.activity == .stopped } })
            // Each replicator's own queue would have called its listener by now.
            try await Task.sleep(for: .milliseconds(300))
            #expect(stopped.withLock { $0 }.isEmpty)
            hold.signal()
            for replicator in replicators { await replicator.waitUntilStopped() }
            #expect(stopped.withLock { $0.sorted() } == [0, 1])
        }
    }

    /// `Database.close()` stops a running continuous replicator and waits for it: when close
    /// returns the replicator is `.stopped` without an error, and it never connects again.
    @Test
    func closingTheDatabaseStopsItsReplicator() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            try await save(p[0].defaultCollection, "doc", ["v": 1])
            let attempts = Counter()
            let replicator = try Self.continuousReplicator(p[0], to: p[1], attempts: attempts)
            replicator.start()
            #expect(try await eventually(.seconds(60)) { replicator.status.activity == .idle })
            try await p[0].db.close()
            // Checked at once: close() returned only after the replicator stopped.
            let status = replicator.status
            #expect(status.activity == .stopped)
            #expect(status.error == nil)
            replicator.stop()  // a no-op when close() did its job; keeps a failing run from hanging
            await replicator.waitUntilStopped()
            // No retries afterwards (several backoff periods later), nor after a new start.
            let attemptsAtClose = attempts.value.withLock { $0 }
            try await Task.sleep(for: .milliseconds(500))
            replicator.start()
            #expect(replicator.status.activity == .stopped)
            #expect(replicator.status.error?.code == .closed)
            replicator.stop()
            await replicator.waitUntilStopped()
            #expect(attempts.value.withLock { $0 } == attemptsAtClose)
        }
    }

    /// A replicator started on an already-closed database stops at once with `.closed` and
    /// never calls its connector.
    @Test
    func startingOnAClosedDatabaseStopsAtOnce() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let attempts = Counter()
            let replicator = try Self.continuousReplicator(p[0], to: p[1], attempts: attempts)
            let statuses = Mutex<[ReplicatorStatus]>([])
            replicator.addChangeListener { change in statuses.withLock { $0.append(change.status) } }
            try await p[0].db.close()
            replicator.start()
            #expect(replicator.status.activity == .stopped)
            #expect(replicator.status.error?.code == .closed)
            replicator.stop()  // a no-op when start() refused; keeps a failing run from hanging
            await replicator.waitUntilStopped()
            #expect(attempts.value.withLock { $0 } == 0)
            let seen = statuses.withLock { $0 }
            #expect(seen.map(\.activity) == [.stopped])
            #expect(seen.last?.error?.code == .closed)
        }
    }

    /// A status listener is called only when activity, progress or error changed: a one-shot
    /// replication never reports the same status twice in a row.
    @Test
    func statusListenersHearOnlyChanges() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection
            for i in 0..<4 { try await save(a, "doc\(i)", ["v": .int(Int64(i))]) }
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.replyTimeout = slow(.seconds(10))
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: p[1].connector())
            let statuses = Mutex<[ReplicatorStatus]>([])
            replicator.addChangeListener { change in statuses.withLock { $0.append(change.status) } }
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            let seen = statuses.withLock { $0 }
            #expect(seen.first?.activity == .connecting)
            #expect(seen.last?.activity == .stopped)
            for (before, after) in zip(seen, seen.dropFirst()) {
                #expect(before != after, "two consecutive notifications carry \(after)")
            }
        }
    }

    /// `waitUntilStopped()` returns only after the listeners have been given `.stopped`, even
    /// a slow one.
    @Test
    func waitUntilStoppedWaitsForTheListeners() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            try await save(p[0].defaultCollection, "doc", ["v": 1])
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.replyTimeout = slow(.seconds(10))
            cfg.addCollections([try p[0].defaultCollection])
            let replicator = try Replicator(config: cfg, connector: p[1].connector())
            let recorded = Mutex<[ReplicatorActivityLevel]>([])
            replicator.addChangeListener { change in
                // Slow on purpose: blocks the listener queue before recording `.stopped`.
                if change.status.activity == .stopped { Thread.sleep(forTimeInterval: 0.5) }
                recorded.withLock { $0.append(change.status.activity) }
            }
            // Called while running: returns once the listener has recorded `.stopped`.
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(recorded.withLock { $0.last } == .stopped)
            // Called when the status already says `.stopped` but the listener is (most likely)
            // still busy with it: also waits for it.
            recorded.withLock { $0 = [] }
            replicator.start()
            #expect(try await eventually(.seconds(60)) { replicator.status.activity == .stopped })
            await replicator.waitUntilStopped()
            #expect(recorded.withLock { $0.last } == .stopped)
        }
    }

    /// A status stream created while running yields the current status first (a replay),
    /// then the changes that follow.
    @Test
    func changesReplaysTheCurrentStatus() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let replicator = try Self.continuousReplicator(p[0], to: p[1], attempts: Counter())
            replicator.start()
            #expect(try await eventually(.seconds(60)) { replicator.status.activity == .idle })
            let stream = replicator.changes()
            replicator.stop()
            var seen: [ReplicatorActivityLevel] = []
            for await change in stream {
                seen.append(change.status.activity)
                if change.status.activity == .stopped { break }
            }
            #expect(seen.first == .idle)
            #expect(seen.last == .stopped)
            // Created after the stop, the replay is the final status, ahead of the next run's.
            var iterator = replicator.changes().makeAsyncIterator()
            replicator.start()
            #expect(await iterator.next()?.status.activity == .stopped)
            #expect(await iterator.next()?.status.activity == .connecting)
            replicator.stop()
            await replicator.waitUntilStopped()
        }
    }
}
