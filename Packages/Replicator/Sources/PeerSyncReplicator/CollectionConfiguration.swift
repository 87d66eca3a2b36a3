import PeerSyncCore
import PeerSyncDatabase

/// Flags of a replicated document (Couchbase Lite's `DocumentFlags`).
public struct DocumentFlags: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// The revision is a deletion.
    public static let deleted = DocumentFlags(rawValue: 1)
    /// The peer revoked access to the document (auto-purged when `enableAutoPurge`).
    public static let accessRemoved = DocumentFlags(rawValue: 2)
}

/// Decides whether a document is pushed or pulled. Runs on a replicator task; keep it quick
/// and free of side effects. Called with the revision's properties (empty for deletions).
public typealias ReplicationFilter = @Sendable (_ document: Document, _ flags: DocumentFlags) -> Bool

/// Per-collection replication settings (Couchbase Lite's `CollectionConfiguration`).
public struct CollectionConfiguration: Sendable {
    /// The resolver for conflicts found while pulling; nil = ``ConflictResolvers/default``.
    public var conflictResolver: (any ConflictResolver)?
    /// Only documents for which this returns true are pushed. Default nil: all.
    public var pushFilter: ReplicationFilter?
    /// Only pulled revisions for which this returns true are saved. Default nil: all.
    public var pullFilter: ReplicationFilter?
    /// Only these documents are pushed and pulled. Default nil: all.
    public var documentIDs: [String]?
    /// Sync Gateway channels to pull from. Accepted for API compatibility and sent to the
    /// peer as a `subChanges` filter; peer-to-peer listeners ignore it.
    public var channels: [String]?

    public init(conflictResolver: (any ConflictResolver)? = nil, pushFilter: ReplicationFilter? = nil,
                pullFilter: ReplicationFilter? = nil, documentIDs: [String]? = nil, channels: [String]? = nil) {
        self.conflictResolver = conflictResolver
        self.pushFilter = pushFilter
        self.pullFilter = pullFilter
        self.documentIDs = documentIDs
        self.channels = channels
    }
}

/// One document that was pushed or pulled (or failed to be).
public struct ReplicatedDocument: Sendable {
    public let id: String
    /// `<scope>.<collection>`.
    public let collection: String
    public let flags: DocumentFlags
    /// Why this document failed to replicate, nil on success.
    public let error: PeerSyncError?
}

/// A batch of replicated documents (Couchbase Lite's `DocumentReplication`).
public struct DocumentReplication: Sendable {
    /// True for pushed documents, false for pulled ones.
    public let isPush: Bool
    public let documents: [ReplicatedDocument]
}
