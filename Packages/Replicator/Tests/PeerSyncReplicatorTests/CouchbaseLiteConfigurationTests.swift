import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Testing

/// `ReplicatorConfiguration` under Couchbase Lite's names (seed 002): zero meaning the default
/// for the time settings, the `TimeInterval` forms, the collection methods; and the
/// replicator's `removeChangeListener(withToken:)` and document events. (The named defaults and
/// their values are checked through `import PeerSync` in `Tests/PeerSyncUmbrellaTests`,
/// `CouchbaseLiteAPITests.staticDefaultsHaveTheValuesOfSeed002`.)
@Suite struct CouchbaseLiteConfigurationTests {
    /// A connector that is never reached (the replicators here are not started).
    static let unreachable: ReplicatorConnector = { _ in
        throw PeerSyncError(.invalidArgument, "not connected in this test")
    }

    static func configuration(_ peer: Peer) throws -> ReplicatorConfiguration {
        var config = ReplicatorConfiguration(target: peer.endpoint)
        config.addCollection(try peer.defaultCollection)
        return config
    }

    /// Seconds and `Duration` are one setting; zero means the default (the replicator's
    /// `config` holds the value used); negative, NaN and infinite values are refused.
    @Test func timeIntervalsZeroAndNegatives() async throws {
        try await withPeers(1) { peers in
            var config = try Self.configuration(peers[0])
            config.heartbeatTimeInterval = 12.5
            #expect(config.heartbeat == .milliseconds(12_500))
            config.maxAttemptWaitTime = .milliseconds(1_500)
            #expect(config.maxAttemptWaitTimeInterval == 1.5)
            var replicator = try Replicator(config: config, connector: Self.unreachable)
            #expect(replicator.config.heartbeat == .milliseconds(12_500))
            #expect(replicator.config.maxAttemptWaitTime == .milliseconds(1_500))

            config.heartbeatTimeInterval = 0
            config.maxAttemptWaitTime = .zero
            replicator = try Replicator(config: config, connector: Self.unreachable)
            #expect(replicator.config.heartbeat == ReplicatorConfiguration.defaultHeartbeat)
            #expect(replicator.config.maxAttemptWaitTime == ReplicatorConfiguration.defaultMaxAttemptWaitTime)

            for bad in [-1, .nan, .infinity, -.infinity, 1e300] as [TimeInterval] {
                var heartbeat = config
                heartbeat.heartbeatTimeInterval = bad
                let error = #expect(throws: PeerSyncError.self, "heartbeat \(bad)") {
                    try Replicator(config: heartbeat, connector: Self.unreachable)
                }
                #expect(error?.code == .invalidArgument)
                var wait = config
                wait.maxAttemptWaitTimeInterval = bad
                #expect(throws: PeerSyncError.self, "wait \(bad)") { try Replicator(config: wait, connector: Self.unreachable) }
            }
        }
    }

    @Test func collectionsAreAddedReplacedAndRemoved() async throws {
        try await withPeers(1) { peers in
            let db = peers[0].db
            let tasks = try await db.createCollection(name: "tasks", scope: "app")
            let notes = try await db.createCollection(name: "notes", scope: "app")
            var config = ReplicatorConfiguration(target: peers[0].endpoint)
            let chained = config.addCollections([tasks, notes], config: nil)
            #expect(chained.collections == [tasks, notes])
            #expect(config.collections == [tasks, notes])
            #expect(config.collectionConfig(tasks)?.documentIDs == nil)

            // Re-adding replaces the settings and keeps the collection's place.
            config.addCollection(tasks, config: CollectionConfiguration(documentIDs: ["a"]))
            #expect(config.collections == [tasks, notes])
            #expect(config.collectionConfig(tasks)?.documentIDs == ["a"])
            #expect(config.collectionConfiguration(tasks)?.documentIDs == ["a"])

            config.removeCollection(tasks)
            #expect(config.collections == [notes])
            #expect(config.collectionConfig(tasks) == nil)
            config.removeCollection(tasks)   // not there: no change
            #expect(config.collections == [notes])

            let copy = ReplicatorConfiguration(config: config)
            #expect(copy.collections == [notes] && copy.target == config.target)
        }
    }

    /// Document events name the scope and the collection apart and carry the replicator; a
    /// listener removed with `removeChangeListener(withToken:)` gets no event; a removed status
    /// listener no status.
    @Test func documentEventsAndRemovedListeners() async throws {
        try await withPeers(2) { peers in
            let (active, passive) = (peers[0], peers[1])
            let mine = try await active.db.createCollection(name: "tasks", scope: "app")
            let theirs = try await passive.db.createCollection(name: "tasks", scope: "app")
            try passive.listen(collections: [theirs])
            try await save(mine, "pushed", ["n": 1])
            try await save(theirs, "pulled", ["n": 2])

            var config = ReplicatorConfiguration(target: passive.endpoint)
            config.addCollection(mine)
            config.replyTimeout = slow(.seconds(10))
            let replicator = try Replicator(config: config, connector: passive.connector())
            let events = EventLog()
            replicator.addDocumentReplicationListener { e in events.events.withLock { $0.append(e) } }
            let removedEvents = EventLog()
            let documentToken = replicator.addDocumentReplicationListener { e in removedEvents.events.withLock { $0.append(e) } }
            replicator.removeChangeListener(withToken: documentToken)
            let removedStatuses = Counter()
            let statusToken = replicator.addChangeListener { _ in removedStatuses.value.withLock { $0 += 1 } }
            replicator.removeChangeListener(withToken: statusToken)

            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)

            let all = events.events.withLock { $0 }
            let documents = all.flatMap(\.documents)
            #expect(Set(documents.map(\.id)) == ["pushed", "pulled"])
            #expect(documents.allSatisfy { $0.scope == "app" && $0.collection == "tasks" && $0.collectionFullName == "app.tasks" })
            #expect(all.allSatisfy { $0.replicator === replicator })
            #expect(removedEvents.events.withLock { $0.isEmpty })
            #expect(removedStatuses.value.withLock { $0 } == 0)
        }
    }
}
