import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncReplicator

/// What `peersync sync` prints on stdout: one line per conflict as soon as it is resolved
/// (`conflict on task-2 resolved (merge): merged local 2-3ddfcb89 and remote 2-9a036455`) and,
/// when the replication completed, one summary line
/// (`sync complete: pushed 1, pulled 1 revisions, 1 conflict resolved`: document revisions
/// transferred without error; a resolved conflict pushes one revision, the resolution — the
/// tombstone closing the local losing branch stays local).
///
/// Conflicts are detected where they are resolved: the configured resolver is wrapped
/// (``ReportingConflictResolver``) and records its decision; the line is printed when the
/// document's pull event arrives without an error, i.e. once the resolution is saved. (The
/// replicator's `ReplicatedDocument` has no "conflict resolved" flag.) Only the active peer —
/// the `sync` process — resolves conflicts; the listener never does.
///
/// Thread-safety: all state is behind `state` (a `LockedValue`); the resolver may call in from any
/// replicator task, the replicator's listeners from its notification queue.
final class SyncReport: Sendable {
    private struct State {
        var decided: [String: String] = [:]   // docID → outcome, waiting for the pull event
        // Counts, not sets of IDs: memory must not grow with the number of documents.
        var pushed = 0
        var pulled = 0
        var resolved = 0
        var unresolved = 0
        var stopped = false
        var stoppedWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = LockedValue(State())
    /// The resolver's name as given by `--conflict` (`default`, `local`, `remote`, `merge`).
    let resolverName: String

    init(resolverName: String) {
        self.resolverName = resolverName
    }

    /// Called by the resolver wrapper with its decision for `docID`.
    func decided(_ docID: String, _ outcome: String) {
        state.withLock { $0.decided[docID] = outcome }
    }

    /// Feeds one document replication event (from `addDocumentReplicationListener`).
    func record(_ event: DocumentReplication) {
        var lines: [String] = []
        state.withLock { s in
            for doc in event.documents {
                if event.isPush {
                    if doc.error == nil { s.pushed += 1 }
                    continue
                }
                if doc.error == nil { s.pulled += 1 }
                guard let outcome = s.decided.removeValue(forKey: doc.id) else { continue }
                if let error = doc.error {
                    s.unresolved += 1
                    lines.append("conflict on \(doc.id) NOT resolved (\(resolverName)): \(error.message)")
                } else {
                    s.resolved += 1
                    lines.append("conflict on \(doc.id) resolved (\(resolverName)): \(outcome)")
                }
            }
        }
        for line in lines { ReplicationCLI.emit(line) }
    }

    /// Feeds a status change; `.stopped` releases ``waitForStoppedEvent()``. The replicator
    /// delivers status and document events on one serial queue, so once `.stopped` is seen
    /// every earlier document event has been recorded.
    func recordStatus(_ activity: ReplicatorActivityLevel) {
        guard activity == .stopped else { return }
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.stopped = true
            defer { s.stoppedWaiters = [] }
            return s.stoppedWaiters
        }
        for w in waiters { w.resume() }
    }

    /// Waits until the `.stopped` status event was delivered (or up to two seconds, so a
    /// missed event cannot hang the command).
    func waitForStoppedEvent() async {
        let timeout = Task {
            try? await Task.sleep(for: .seconds(2))
            self.recordStatus(.stopped)
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done = state.withLock { s -> Bool in
                if s.stopped { return true }
                s.stoppedWaiters.append(c)
                return false
            }
            if done { c.resume() }
        }
        timeout.cancel()
    }

    /// Revisions pushed and pulled without error so far.
    var counts: (pushed: Int, pulled: Int) { state.withLock { ($0.pushed, $0.pulled) } }

    /// `sync complete: pushed P, pulled Q revisions, N conflicts resolved`.
    var summary: String {
        state.withLock { s in
            var line = "sync complete: pushed \(s.pushed), pulled \(s.pulled) revisions, "
                + "\(s.resolved) conflict\(s.resolved == 1 ? "" : "s") resolved"
            if s.unresolved > 0 { line += ", \(s.unresolved) not resolved" }
            return line
        }
    }
}

/// Wraps a resolver and tells a ``SyncReport`` what it decided: the local or the remote
/// revision kept, a merge of both, or a deletion. Errors pass through unchanged.
struct ReportingConflictResolver: ConflictResolver {
    let base: any ConflictResolver
    let report: SyncReport

    func resolve(_ conflict: Conflict) async throws -> (any DocumentProperties)? {
        let result = try await base.resolve(conflict)
        let local = "local \(Self.short(conflict.localRevisionID))"
        let remote = "remote \(Self.short(conflict.remoteRevisionID))"
        let outcome: String
        if let result {
            if let l = conflict.localDocument, result.properties == l.properties {
                outcome = "kept \(local) over \(remote)"
            } else if let r = conflict.remoteDocument, result.properties == r.properties {
                outcome = "kept \(remote) over \(local)"
            } else {
                outcome = "merged \(local) and \(remote)"
            }
        } else {
            outcome = "deleted the document (\(local), \(remote))"
        }
        report.decided(conflict.documentID, outcome)
        return result
    }

    /// `2-9a036455` from `2-9a03645537e0b83b…`.
    static func short(_ rev: RevisionID) -> String {
        let text = rev.description
        guard let dash = text.firstIndex(of: "-") else { return text }
        return String(text[...dash]) + String(text[text.index(after: dash)...].prefix(8))
    }
}
