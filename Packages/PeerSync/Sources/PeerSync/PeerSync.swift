// The umbrella module: `import PeerSync` gives the whole public API and the default
// composition (SQLite storage when the `SQLite` trait is on, which it is by default).

@_exported import PeerSyncCore
@_exported import PeerSyncStorage
@_exported import PeerSyncDatabase
#if SQLite
@_exported import PeerSyncSQLite
#endif
#if LMDB
@_exported import PeerSyncLMDB
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
}

extension DatabaseConfiguration {
    /// A configuration on the default storage backend (SQLite) in `directory`.
    public init(directory: String) {
        self.init(directory: directory, backend: StorageBackends.default)
    }
}
