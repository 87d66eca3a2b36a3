import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import Synchronization
import Testing

@Suite struct ContinuousTests {
    /// A continuous push-and-pull replicator goes connecting → busy → idle, picks up live
    /// edits made on either side within a second, reports progress, and stops on `stop()`.
    @Test
    func liveEditsOnBothSidesAndActivity() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            try await save(a, "before", ["v": 1])
            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.continuous = true
            cfg.replyTimeout = slow(.seconds(10))
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollections([a])
            let replicator = try Replicator(config: cfg, connector: p[1].connector())
            let seen = Mutex<[ReplicatorActivityLevel]>([])
            // Its first element replays the status of the not yet started replicator (`.stopped`).
            let stream = replicator.changes().dropFirst()
            let collector = Task {
                for await change in stream {
                    seen.withLock { $0.append(change.status.activity) }
                    if change.status.activity == .stopped { break }
                }
            }
            replicator.start()
            #expect(try await eventually { try await b.document(id: "before") != nil })
            #expect(try await eventually { replicator.status.activity == .idle })
            // Live edits on both sides, picked up by the running replicator (no new run; the
            // wait is generous so that a loaded or sanitized machine does not fail it).
            try await save(a, "fromA", ["v": 2])
            #expect(try await eventually { try await b.document(id: "fromA") != nil })
            try await save(b, "fromB", ["v": 3])
            #expect(try await eventually { try await a.document(id: "fromB") != nil })
            try await save(b, "fromA", ["v": 4])
            #expect(try await eventually { try await a.document(id: "fromA")?.int(forKey: "v") == 4 })
            #expect(try await eventually { replicator.status.activity == .idle })
            let progress = replicator.status.progress
            #expect(progress.completed >= 3 && progress.completed <= progress.total)
            replicator.stop()
            await replicator.waitUntilStopped()
            await collector.value
            let levels = seen.withLock { $0 }
            #expect(levels.first == .connecting)
            #expect(levels.contains(.busy))
            #expect(levels.contains(.idle))
            #expect(levels.last == .stopped)
            if let c = levels.firstIndex(of: .connecting), let i = levels.firstIndex(of: .idle) { #expect(c < i) }
        }
    }
}
