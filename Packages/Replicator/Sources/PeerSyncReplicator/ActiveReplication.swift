import Foundation
import PeerSyncBLIP
import PeerSyncCore
@_spi(Replication) import PeerSyncDatabase
import PeerSyncTransport

/// One connection's worth of active replication: open, compare checkpoints, push and/or
/// pull every collection, save checkpoints; returns when a one-shot run is complete or when
/// a continuous run's connection ends (throwing why).
struct ActiveReplication: Sendable {
    let database: Database
    let collections: [SessionCollection]
    let push: Bool
    let pull: Bool
    let continuous: Bool
    let reset: Bool
    let remoteURL: String
    var enableAutoPurge = true
    let replyTimeout: Duration
    let events: SessionEvents

    static func checkpointID(database: Database, remoteURL: String, _ sc: SessionCollection, push: Bool, pull: Bool) -> String {
        var text = "\(database.path)|\(remoteURL)|\(sc.collection.fullName)|\(push)|\(pull)"
        if let ids = sc.config.documentIDs { text += "|" + ids.sorted().joined(separator: ",") }
        if let ch = sc.config.channels { text += "|" + ch.sorted().joined(separator: ",") }
        return "cp-" + Data(SHA1.hash(Array(text.utf8))).base64EncodedString()
    }

    func run(connection: any MessageConnection) async throws {
        let blip = try BLIPConnection(connection: connection)
        let session = ActiveSession(blip: blip, database: database, collections: collections, push: push, pull: pull,
                                    enableAutoPurge: enableAutoPurge, replyTimeout: replyTimeout, events: events)
        await session.start()
        // When the connection ends, end the session too: a one-shot pull waiting for
        // revisions (which only the peer can complete) must not wait forever. The task ends
        // when the connection closes, at the latest through session.stop() below.
        Task { _ = await blip.waitUntilClosed(); await session.stop() }
        do {
            try await replicate(session)
            if let failure = session.failure { throw failure }
            if continuous {
                // replicate() only returns for continuous runs when the connection ended.
                if case .error(let error) = await blip.waitUntilClosed() { throw error }
                throw PeerSyncError(.closed, "the peer closed the connection")
            }
            await session.stop()
            await blip.waitUntilHandlersFinished()
        } catch {
            await session.stop()
            // A revision being stored when the connection ended is reported before the
            // replicator says it stopped (and while it is still alive to report it).
            await blip.waitUntilHandlersFinished()
            // The session's own failure (a revision not stored) is why the connection closed.
            throw session.failure ?? error
        }
    }

    private func replicate(_ session: ActiveSession) async throws {
        let ids = collections.map { Self.checkpointID(database: database, remoteURL: remoteURL, $0, push: push, pull: pull) }
        let remote = try await session.open(checkpointIDs: ids)
        let keeper = CheckpointKeeper()
        for (i, sc) in collections.enumerated() {
            let local = try await sc.collection.getLocal(id: ids[i])?.properties
            var cp = Checkpoint()
            cp.remoteRev = remote[i].rev
            if !reset, let local, let theirs = remote[i].body {
                let mine = UInt64(clamping: local["local"]?.intValue ?? 0)
                let other = UInt64(clamping: theirs["local"]?.intValue ?? 0)
                cp.local = min(mine, other)
                if local["remote"] == theirs["remote"] { cp.remote = local["remote"] }
            }
            await keeper.set(i, cp)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Each collection's pusher and puller run concurrently, in tasks of their own.
            for (i, sc) in collections.enumerated() {
                let start = await keeper.get(i)
                if let pusher = session.pushers[i] {
                    group.addTask {
                        try await pusher.push(since: start.local, continuous: continuous,
                                              docIDs: sc.config.documentIDs.map(Set.init), progress: { seq in
                            await keeper.update(i) { $0.local = seq }
                        })
                    }
                }
                if let puller = session.pullers[i] {
                    group.addTask {
                        try await puller.resolveExistingConflicts()
                        try await puller.subscribe(since: start.remote?.isNull == false ? start.remote : nil,
                                                   continuous: continuous, docIDs: sc.config.documentIDs, channels: sc.config.channels)
                        await puller.waitUntilIdle()
                    }
                }
            }
            if continuous {
                // Save checkpoints every second while running.
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: .seconds(1))
                        try await self.saveCheckpoints(session, keeper, ids)
                    }
                }
                group.addTask {
                    _ = await session.context.blip.waitUntilClosed()
                    throw PeerSyncError(.connectionClosed, "the replication connection closed")
                }
                // Push and pull tasks may finish (a pull that caught up, a collection
                // without changes feed): that must not end the others. The run ends only
                // when a task throws, the connection-closed watcher at the latest; leaving
                // the group then cancels the rest; the connection is closed first so that the
                // watcher (which waits for the close, not for cancellation) ends too.
                do {
                    while try await group.next() != nil {}
                } catch {
                    await session.stop()
                    throw error
                }
            } else {
                try await group.waitForAll()
            }
        }
        // A pull released because the session failed: nothing more is pushed or checkpointed.
        if let failure = session.failure { throw failure }
        if !continuous {
            // Conflicts resolved while pulling made new local revisions: push them too.
            if pull {
                for (i, sc) in collections.enumerated() {
                    guard let pusher = session.pushers[i] else { continue }
                    let start = await keeper.get(i)
                    try await pusher.push(since: start.local, continuous: false, docIDs: sc.config.documentIDs.map(Set.init),
                                          progress: { seq in await keeper.update(i) { $0.local = seq } })
                }
            }
            try await saveCheckpoints(session, keeper, ids)
        }
    }

    private func saveCheckpoints(_ session: ActiveSession, _ keeper: CheckpointKeeper, _ ids: [String]) async throws {
        for (i, sc) in collections.enumerated() {
            var cp = await keeper.get(i)
            if let remote = await session.pullers[i]?.pulledRemoteSequence { cp.remote = remote }
            let body: [String: JSONValue] = ["local": .int(Int64(clamping: cp.local)), "remote": cp.remote ?? .null,
                                             "time": .int(Int64(Date().timeIntervalSince1970))]
            guard await keeper.changed(i, body) else { continue }
            cp.remoteRev = try await session.saveRemoteCheckpoint(index: i, client: ids[i], body: .object(body), rev: cp.remoteRev)
            try await sc.collection.putLocal(id: ids[i], json: body)
            let saved = cp
            await keeper.update(i) { $0 = saved }
        }
    }
}

/// One collection's checkpoint in an active run: the local sequence pushed up to, the remote
/// sequence pulled up to, and the MVCC revision of the copy saved on the peer.
struct Checkpoint: Sendable {
    var local: UInt64 = 0
    var remote: JSONValue?
    var remoteRev: String?
}

/// Checkpoint state of one active run, per collection index (LiteCore's Checkpointer): the
/// pusher advances `local`, the puller's completed remote sequence becomes `remote` when saved.
actor CheckpointKeeper {
    private var checkpoints: [Int: Checkpoint] = [:]
    private var lastSaved: [Int: [String: JSONValue]] = [:]

    func set(_ i: Int, _ cp: Checkpoint) { checkpoints[i] = cp }
    func get(_ i: Int) -> Checkpoint { checkpoints[i] ?? .init() }
    func update(_ i: Int, _ change: (inout Checkpoint) -> Void) {
        var cp = checkpoints[i] ?? .init()
        change(&cp)
        checkpoints[i] = cp
    }

    /// Whether `body` differs from what was saved last (ignoring the time).
    func changed(_ i: Int, _ body: [String: JSONValue]) -> Bool {
        var b = body
        b["time"] = nil
        if lastSaved[i] == b { return false }
        lastSaved[i] = b
        return true
    }
}
