import PeerSyncCore
import PeerSyncStorage

/// The identity of a collection and the names of the storage keyspaces that hold it.
///
/// The names used on every document read and write (the full name, the documents and purge
/// log keyspaces) are built once, in `init`: built per call they were a string concatenation
/// and a heap allocation each (`"docs:_default._default"` is too long for a small string),
/// several per replicated revision. Equality and hashing are by `scope` and `name` only.
struct CollectionSpec: Hashable, Sendable {
    let scope: String
    let name: String
    let fullName: String
    /// Documents: key = document ID, the database's record layout (see `DocumentEngine`).
    let documentsKeyspace: String
    /// Purge log: key = purged document ID, so listeners (also in other processes) see purges.
    let purgeLogKeyspace: String

    init(scope: String, name: String) {
        self.scope = scope
        self.name = name
        fullName = "\(scope).\(name)"
        documentsKeyspace = "docs:" + fullName
        purgeLogKeyspace = "purged:" + fullName
    }

    static func == (a: CollectionSpec, b: CollectionSpec) -> Bool { a.scope == b.scope && a.name == b.name }

    func hash(into hasher: inout Hasher) {
        hasher.combine(scope)
        hasher.combine(name)
    }

    static let defaultName = "_default"
    static let `default` = CollectionSpec(scope: defaultName, name: defaultName)

    /// Expiration index: `d:<docID>` → time, `t:<20-digit ms>:<docID>` → empty.
    var expiryKeyspace: String { "exp:" + fullName }
    /// Local (non-replicated) documents of this collection.
    var localKeyspace: String { "local:" + fullName }
    var allKeyspaces: [String] { [documentsKeyspace, expiryKeyspace, purgeLogKeyspace, localKeyspace] }

    /// The key of this collection's entry in the metadata keyspace.
    var metaKey: String { Meta.collectionPrefix + fullName }
}

/// The database-wide metadata keyspace.
enum Meta {
    static let keyspace = "_meta"
    static let collectionPrefix = "collection:"
    static let infoKey = "info"
    static let formatVersion: Int64 = 1
    /// Database-level local documents.
    static let localKeyspace = "_local"
}

/// Name rules shared by scopes and collections (Couchbase Lite's): 1–251 characters of
/// `A-Z a-z 0-9 _ - %`, not starting with `_` or `%`, except the name `_default`.
enum Names {
    static func validate(_ name: String, kind: String) throws(PeerSyncError) {
        if name == CollectionSpec.defaultName { return }
        let scalars = name.unicodeScalars
        guard (1...251).contains(scalars.count) else {
            throw PeerSyncError(.invalidArgument, "\(kind) name must be 1 to 251 characters", context: [kind: String(name.prefix(40))])
        }
        for s in scalars {
            switch s {
            case "A"..."Z", "a"..."z", "0"..."9", "_", "-", "%": continue
            default:
                throw PeerSyncError(.invalidArgument, "\(kind) name may only contain A-Z, a-z, 0-9, _, - and %",
                                    context: [kind: String(name.prefix(40))])
            }
        }
        if let first = scalars.first, first == "_" || first == "%" {
            throw PeerSyncError(.invalidArgument, "\(kind) name must not start with _ or %", context: [kind: name])
        }
    }

    /// Database names: non-empty, at most 240 UTF-8 bytes, no `/`, no NUL, not `.` or `..`.
    static func validateDatabaseName(_ name: String) throws(PeerSyncError) {
        guard !name.isEmpty, name.utf8.count <= 240, !name.contains("/"), !name.contains("\0"),
              name != ".", name != ".." else {
            throw PeerSyncError(.invalidArgument, "invalid database name", context: ["name": String(name.prefix(40))])
        }
    }
}

extension PeerSyncError {
    func with(_ spec: CollectionSpec) -> PeerSyncError { with("collection", spec.fullName) }
}
