// The umbrella module: `import PeerSync` gives the whole public API and the default
// composition (SQLite storage when the `SQLite` trait is on, which it is by default; peer
// discovery over DNS-SD when the opt-in `DNSSD` trait is on; the multipeer replicator and its
// Wi-Fi transport when the opt-in `Mesh` trait is on, which turns `DNSSD` on).

@_exported import PeerSyncCore
@_exported import PeerSyncStorage
@_exported import PeerSyncDatabase
#if SQLite
@_exported import PeerSyncSQLite
#endif
#if LMDB
@_exported import PeerSyncLMDB
#endif
#if DNSSD
@_exported import PeerSyncDiscovery
@_exported import PeerSyncDNSSD
#endif
#if Mesh
@_exported import PeerSyncAuth
@_exported import PeerSyncMesh
@_exported import PeerSyncMeshWiFi
#endif

/// The storage backends compiled into this build (chosen by package traits).
public enum StorageBackends {
    /// Every backend available, the default first.
    public static var all: [any StorageBackend] {
        var result: [any StorageBackend] = []
        #if SQLite
        result.append(SQLiteStorageBackend())
        #endif
        #if LMDB
        result.append(LMDBStorageBackend())
        #endif
        result.append(MemoryStorageBackend())
        return result
    }

    /// The default backend: SQLite when built with the `SQLite` trait, else the first
    /// on-disk backend available.
    public static var `default`: any StorageBackend { all[0] }

    /// The backend with this name (`"sqlite"`, `"lmdb"`, `"memory"`), or nil if it is not
    /// compiled in.
    public static func named(_ name: String) -> (any StorageBackend)? {
        all.first { $0.name == name.lowercased() }
    }

    /// The backend whose files are in `directory`, or nil if none is (a new database).
    public static func detect(in directory: String) -> (any StorageBackend)? {
        all.first { $0.hasStore(in: directory) }
    }

    /// The backend to open the database folder `directory` with — the one rule that keeps a
    /// folder from ever holding two databases: the backend whose store is already in the
    /// folder; for a new database `requested`, else ``default``.
    ///
    /// Throws `.invalidArgument` when `requested` names another backend than the existing
    /// store's (context `backend`: the existing backend's name, `requested`: the requested
    /// one), or when the folder already holds stores of several backends (context
    /// `backends`, comma-separated). Reads the folder only; creates nothing.
    public static func backend(forDatabaseAt directory: String,
                               requested: (any StorageBackend)? = nil) throws(PeerSyncError) -> any StorageBackend {
        let existing = all.filter { $0.hasStore(in: directory) }
        if existing.count > 1 {
            let names = existing.map(\.name).joined(separator: ", ")
            throw PeerSyncError(.invalidArgument,
                                "the folder \(directory) holds databases of several backends (\(names)); keep one",
                                context: ["backends": names])
        }
        if let found = existing.first {
            if let requested, requested.name != found.name {
                throw PeerSyncError(.invalidArgument,
                                    "the database in \(directory) uses the \(found.name) backend, not \(requested.name)",
                                    context: ["backend": found.name, "requested": requested.name])
            }
            return found
        }
        return requested ?? `default`
    }
}

extension DatabaseConfiguration {
    /// A configuration on the default storage backend (SQLite) in `directory`.
    public init(directory: String) {
        self.init(directory: directory, backend: StorageBackends.default)
    }
}
