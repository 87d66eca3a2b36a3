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

    /// Settings with these values; every default is nil (the default resolver, no filters, all
    /// documents, no channels).
    public init(conflictResolver: (any ConflictResolver)? = nil, pushFilter: ReplicationFilter? = nil,
                pullFilter: ReplicationFilter? = nil, documentIDs: [String]? = nil, channels: [String]? = nil) {
        self.conflictResolver = conflictResolver
        self.pushFilter = pushFilter
        self.pullFilter = pullFilter
        self.documentIDs = documentIDs
        self.channels = channels
    }
}

/// One document that was pushed or pulled, or failed to be (Couchbase Lite's
/// `ReplicatedDocument`).
public struct ReplicatedDocument: Sendable {
    /// The document ID.
    public let id: String
    /// The name of the scope of the document's collection (`_default` for the default scope).
    public let scope: String
    /// The name of the document's collection, without its scope (`_default` for the default
    /// collection).
    public let collection: String
    /// Deleted, access removed (see ``DocumentFlags``).
    public let flags: DocumentFlags
    /// Why this document failed to replicate, nil on success.
    public let error: PeerSyncError?

    /// The collection's full name, `<scope>.<collection>`.
    public var collectionFullName: String { "\(scope).\(collection)" }

    /// `fullName` is the collection's `<scope>.<collection>` (scope names hold no `.`); a name
    /// without a `.` is taken as a collection of the default scope.
    init(id: String, collection fullName: String, flags: DocumentFlags, error: PeerSyncError?) {
        self.id = id
        if let dot = fullName.firstIndex(of: ".") {
            scope = String(fullName[..<dot])
            collection = String(fullName[fullName.index(after: dot)...])
        } else {
            scope = "_default"
            collection = fullName
        }
        self.flags = flags
        self.error = error
    }
}

/// A batch of replicated documents (Couchbase Lite's `DocumentReplication`).
public struct DocumentReplication: Sendable {
    /// The replicator that replicated the documents. nil only for the events of a passive
    /// session (a listener's side of a replication, e.g. the mesh's incoming links), which no
    /// `Replicator` runs; every event a ``Replicator``'s listeners and streams get has it.
    public internal(set) var replicator: Replicator?
    /// True for pushed documents, false for pulled ones.
    public let isPush: Bool
    /// The documents, in the order they completed.
    public let documents: [ReplicatedDocument]

    init(isPush: Bool, documents: [ReplicatedDocument]) {
        self.isPush = isPush
        self.documents = documents
    }
}
