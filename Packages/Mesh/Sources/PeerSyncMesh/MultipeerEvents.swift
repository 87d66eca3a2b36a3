import PeerSyncAuth
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncReplicator

/// The state of a ``MultipeerReplicator`` (Couchbase Lite's `MultipeerReplicatorStatus`),
/// for one transport or, with ``transport`` nil, for all of them together.
public struct MultipeerReplicatorStatus: Sendable, Hashable, CustomStringConvertible {
    /// Whether the replicator runs (started, not stopped) — on this transport: its discovery
    /// and link transport are up.
    public var active: Bool
    /// The last problem: a transport that could not start, a discovery that is unavailable.
    /// Nil while all is well.
    public var error: PeerSyncError?
    /// The transport this status is about; nil for the aggregate.
    public var transport: MultipeerTransport?

    /// A status with these values (the replicator makes these; tests may too).
    public init(active: Bool, error: PeerSyncError? = nil, transport: MultipeerTransport? = nil) {
        self.active = active
        self.error = error
        self.transport = transport
    }

    public var description: String {
        "\(transport.map(\.description) ?? "all"): \(active ? "active" : "inactive")" + (error.map { " (\($0))" } ?? "")
    }
}

/// A peer appeared or disappeared on a transport (Couchbase Lite's `PeerDiscoveryStatus`).
public struct PeerDiscoveryStatus: Sendable, Hashable, CustomStringConvertible {
    /// The peer (the SHA-256 digest of its certificate).
    public var peerID: PeerID
    /// The transport whose discovery saw the change.
    public var transport: MultipeerTransport
    /// True when the peer became visible on ``transport``, false when it is gone from it.
    public var online: Bool

    /// A status with these values.
    public init(peerID: PeerID, transport: MultipeerTransport, online: Bool) {
        self.peerID = peerID
        self.transport = transport
        self.online = online
    }

    public var description: String { "\(peerID.rawValue.prefix(12)) \(online ? "online" : "offline") on \(transport)" }
}

/// A change of the replication with one peer (Couchbase Lite's `PeerReplicatorStatus`).
public struct PeerReplicatorStatus: Sendable, Hashable, CustomStringConvertible {
    /// The peer at the other end of the link.
    public var peerID: PeerID
    /// The transport of the link.
    public var transport: MultipeerTransport
    /// True when this peer dialled the link (it runs the active replicator and resolves
    /// conflicts), false when the peer did.
    public var outgoing: Bool
    /// The replication's status: for outgoing links the replicator's own; for incoming ones
    /// `.busy` while documents move, `.idle` between, `.stopped` (with the error, if any)
    /// when the link ends.
    public var status: ReplicatorStatus

    /// A status with these values.
    public init(peerID: PeerID, transport: MultipeerTransport, outgoing: Bool, status: ReplicatorStatus) {
        self.peerID = peerID
        self.transport = transport
        self.outgoing = outgoing
        self.status = status
    }

    public var description: String {
        "\(peerID.rawValue.prefix(12)) \(outgoing ? "outgoing" : "incoming") on \(transport): \(status.activity)"
            + (status.error.map { " (\($0))" } ?? "")
    }
}

/// One document sent to or received from a peer (Couchbase Lite's `ReplicatedDocument`).
public struct MultipeerReplicatedDocument: Sendable, Hashable {
    /// The scope of the document's collection.
    public var scope: String
    /// The name of the document's collection.
    public var collection: String
    /// The document ID.
    public var id: String
    /// Whether the revision was a deletion, or the peer revoked access to the document.
    public var flags: DocumentFlags
    /// Why the document failed to replicate; nil on success.
    public var error: PeerSyncError?

    /// A document with these values.
    public init(scope: String, collection: String, id: String, flags: DocumentFlags, error: PeerSyncError?) {
        self.scope = scope
        self.collection = collection
        self.id = id
        self.flags = flags
        self.error = error
    }

    init(_ document: ReplicatedDocument) {
        self.init(scope: document.scope, collection: document.collection,
                  id: document.id, flags: document.flags, error: document.error)
    }
}

/// Documents sent to (``isPush``) or received from one peer (Couchbase Lite's
/// `PeerDocumentReplication`).
public struct PeerDocumentReplication: Sendable, Hashable {
    /// The peer the documents went to or came from.
    public var peerID: PeerID
    /// The transport of the link they travelled.
    public var transport: MultipeerTransport
    /// True for documents sent to the peer, false for documents received from it.
    public var isPush: Bool
    /// The documents, in the order they were confirmed.
    public var documents: [MultipeerReplicatedDocument]

    /// A batch with these values.
    public init(peerID: PeerID, transport: MultipeerTransport, isPush: Bool, documents: [MultipeerReplicatedDocument]) {
        self.peerID = peerID
        self.transport = transport
        self.isPush = isPush
        self.documents = documents
    }
}

/// What a ``MultipeerReplicator`` knows about one peer (Couchbase Lite's `PeerInfo`).
public struct PeerInfo: Sendable, Hashable {
    /// The peer (the SHA-256 digest of its certificate).
    public var peerID: PeerID
    /// The peer's certificate, once a link to it was authenticated (this peer's own for self).
    public var certificate: Certificate?
    /// Whether a discovery currently sees the peer (self: whether the replicator runs).
    public var online: Bool
    /// The peer's direct links as it last announced them (self: the current links), sorted.
    /// A neighbour this peer has not discovered itself cannot be named and is left out.
    public var neighborPeers: [PeerID]
    /// The transports the peer is currently seen on.
    public var transports: Set<MultipeerTransport>
    /// The transport of the link to it, nil without one.
    public var replicatorTransport: MultipeerTransport?
    /// The replication's status: `.stopped` without a link (and for self).
    public var replicatorStatus: ReplicatorStatus

    /// Information with these values.
    public init(peerID: PeerID, certificate: Certificate?, online: Bool, neighborPeers: [PeerID],
                transports: Set<MultipeerTransport>, replicatorTransport: MultipeerTransport?,
                replicatorStatus: ReplicatorStatus) {
        self.peerID = peerID
        self.certificate = certificate
        self.online = online
        self.neighborPeers = neighborPeers
        self.transports = transports
        self.replicatorTransport = replicatorTransport
        self.replicatorStatus = replicatorStatus
    }
}

extension ReplicatorStatus {
    /// Stopped, no progress, no error.
    static let stoppedWithoutError = ReplicatorStatus(activity: .stopped, progress: ReplicatorProgress(completed: 0, total: 0), error: nil)
}

/// Returned by the listener registrations of ``MultipeerReplicator``; pass it to
/// ``MultipeerReplicator/removeChangeListener(withToken:)`` or call ``remove()``.
public final class MultipeerListenerToken: Sendable {
    private let onRemove: @Sendable () -> Void
    init(_ onRemove: @escaping @Sendable () -> Void) { self.onRemove = onRemove }
    /// Stops the notifications. Idempotent.
    public func remove() { onRemove() }
}
