// The umbrella module: `import PeerSync` is the one import an app needs. It re-exports every
// module its enabled traits build:
//
// - always: the value types (PeerSyncCore), storage (PeerSyncStorage), the database
//   (PeerSyncDatabase), queries (PeerSyncQuery: `QueryBuilder`, `Database.createQuery`), the replicator (PeerSyncReplicator) with its `ws://`/`wss://` connector
//   and `Replicator(config:)` (PeerSyncWebSocketReplication), the listener
//   (PeerSyncListener, `URLEndpointListener`), the WebSocket transport (PeerSyncWebSocket) and
//   the transport protocols (PeerSyncTransport: `Endpoint`/`URLEndpoint`, authenticators), TLS
//   identities and trust (PeerSyncAuth);
// - `SQLite` (default on): the SQLite backend, the default storage; `LMDB`: the LMDB backend;
// - `DNSSD`: peer discovery over DNS-SD (PeerSyncDiscovery, PeerSyncDNSSD);
// - `Mesh` (turns `DNSSD` on): the multipeer replicator and its Wi-Fi transport (PeerSyncMesh,
//   PeerSyncMeshWiFi); `BLE` (turns `Mesh` on): the Bluetooth LE transport (PeerSyncBLE) and the mesh on it
//   (PeerSyncMeshBluetooth).
//
// Tests in Tests/PeerSyncUmbrellaTests and the scratch consumer of Tools/checks/consumer-by-url
// (which runs the README's first example) use nothing but `import PeerSync`.

@_exported import PeerSyncCore
@_exported import PeerSyncStorage
@_exported import PeerSyncDatabase
@_exported import PeerSyncQuery
@_exported import PeerSyncTransport
@_exported import PeerSyncAuth
@_exported import PeerSyncWebSocket
@_exported import PeerSyncReplicator
@_exported import PeerSyncWebSocketReplication
@_exported import PeerSyncListener
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
@_exported import PeerSyncMesh
@_exported import PeerSyncMeshWiFi
#endif
#if BLE
@_exported import PeerSyncBLE
@_exported import PeerSyncMeshBluetooth
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
