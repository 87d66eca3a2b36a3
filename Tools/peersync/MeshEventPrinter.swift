import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncMeshWiFi
import PeerSyncReplicator

/// Prints a ``MultipeerReplicator``'s events as `peersync mesh` lines (text or JSON; the
/// formats are in ``MeshCommand``), and counts the documents moved for the summary.
///
/// Threading: the replicator calls the listeners on its one serial event queue; the counters
/// are under a lock because ``summary(_:collection:)`` reads them from the command's task.
final class MeshEventPrinter: Sendable {
    private let json: Bool
    private let counts = LockedValue<(pushed: Int, pulled: Int)>((0, 0))

    init(json: Bool) { self.json = json }

    /// Registers a listener for every kind of event; remove the tokens when done.
    func listen(to replicator: MultipeerReplicator) -> [MultipeerListenerToken] {
        [
            replicator.addStatusListener { [self] status in
                emit(text: "status \(status)",
                     ["event": "status", "transport": status.transport.map { .string($0.rawValue) } ?? .null,
                      "active": .bool(status.active), "error": errorValue(status.error)])
            },
            replicator.addPeerDiscoveryStatusListener { [self] change in
                emit(text: "peer \(change.peerID) \(change.online ? "online" : "offline") on \(change.transport)",
                     ["event": "peer", "peer": .string(change.peerID.rawValue), "transport": .string(change.transport.rawValue),
                      "online": .bool(change.online)])
            },
            replicator.addPeerReplicatorStatusListener { [self] change in
                let activity = Self.name(change.status.activity)
                emit(text: "link \(change.peerID) \(change.outgoing ? "outgoing" : "incoming") on \(change.transport): \(activity)"
                         + (change.status.error.map { " (\($0.message))" } ?? ""),
                     ["event": "link", "peer": .string(change.peerID.rawValue), "transport": .string(change.transport.rawValue),
                      "outgoing": .bool(change.outgoing), "activity": .string(activity), "error": errorValue(change.status.error)])
            },
            replicator.addPeerDocumentReplicationListener { [self] replication in
                let ids = replication.documents.map(\.id)
                let failed = replication.documents.filter { $0.error != nil }
                counts.withLock { count in
                    if replication.isPush { count.pushed += ids.count - failed.count } else { count.pulled += ids.count - failed.count }
                }
                let direction = replication.isPush ? "pushed" : "pulled"
                var text = "\(direction) \(ids.count) \(replication.isPush ? "to" : "from") \(replication.peerID) on \(replication.transport): "
                    + ids.joined(separator: " ")
                if !failed.isEmpty { text += " (\(failed.count) failed: \(failed.map(\.id).joined(separator: " ")))" }
                emit(text: text,
                     ["event": "documents", "peer": .string(replication.peerID.rawValue),
                      "transport": .string(replication.transport.rawValue),
                      "direction": .string(replication.isPush ? "push" : "pull"), "ids": .array(ids.map { .string($0) }),
                      "errors": .int(Int64(failed.count))])
            },
        ]
    }

    /// The line after a successful start: who we are and where we listen.
    func started(_ replicator: MultipeerReplicator, group: String) {
        let port = replicator.wifiLinks?.port ?? 0
        emit(text: "mesh \(replicator.peerID) group \(group) listening on port \(port)",
             ["event": "started", "peer": .string(replicator.peerID.rawValue), "group": .string(group),
              "port": .int(Int64(port))])
    }

    /// The closing status line: the peers seen, the links with their activity, the documents
    /// in the collection and the documents moved.
    func summary(_ replicator: MultipeerReplicator, collection: Collection) async {
        let online = replicator.neighborPeers
        let links = online.compactMap { peer -> (PeerID, PeerInfo)? in
            guard let info = replicator.peerInfo(for: peer), info.replicatorTransport != nil else { return nil }
            return (peer, info)
        }
        let documents = (try? await collection.count) ?? -1
        let (pushed, pulled) = counts.withLock { ($0.pushed, $0.pulled) }
        let linkText: String = links.isEmpty ? "none"
            : links.map { "\($0.0) (\(Self.name($0.1.replicatorStatus.activity)))" }.joined(separator: ", ")
        let linkValues: [JSONValue] = links.map { link -> JSONValue in
            .object(["peer": .string(link.0.rawValue), "activity": .string(Self.name(link.1.replicatorStatus.activity))])
        }
        let onlineValues: [JSONValue] = online.map { .string($0.rawValue) }
        let object: [String: JSONValue] = [
            "event": "summary", "peer": .string(replicator.peerID.rawValue), "online": .array(onlineValues),
            "links": .array(linkValues), "documents": .int(Int64(documents)), "pushed": .int(Int64(pushed)),
            "pulled": .int(Int64(pulled)),
        ]
        emit(text: "summary: peer \(replicator.peerID), \(online.count) peers online, links: \(linkText); "
                 + "\(documents) documents, pushed \(pushed), pulled \(pulled)", object)
    }

    private func emit(text: String, _ object: [String: JSONValue]) {
        ReplicationCLI.emit(json ? JSONValue.object(object).canonicalString : text)
    }

    private func errorValue(_ error: PeerSyncError?) -> JSONValue {
        error.map { .string($0.message) } ?? .null
    }

    static func name(_ activity: ReplicatorActivityLevel) -> String {
        switch activity {
        case .stopped: "stopped"
        case .offline: "offline"
        case .connecting: "connecting"
        case .idle: "idle"
        case .busy: "busy"
        }
    }
}
