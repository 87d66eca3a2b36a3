import PeerSync

/// How every `peersync` command opens `--db DIR`, so that a folder never holds two databases:
/// the backend of an existing database is detected from its files
/// (``StorageBackends/backend(forDatabaseAt:requested:)``); `--backend` only chooses the
/// backend of a new database (default: sqlite) and must agree with an existing one.
enum DatabaseOpening {
    /// The backend to open `directory` with. Throws `UsageError` for a `--backend` name that
    /// is unknown or not compiled in, and `PeerSyncError` (`.invalidArgument`, one line that
    /// says which flag to drop or pass) when `--backend` contradicts the existing database or
    /// the folder already holds databases of several backends. Creates nothing.
    static func backend(for directory: String, requested: String?) throws -> any StorageBackend {
        var requestedBackend: (any StorageBackend)?
        if let requested {
            guard let backend = StorageBackends.named(requested), backend.name != "memory" else {
                let names = StorageBackends.all.map(\.name).filter { $0 != "memory" }
                throw UsageError("unknown backend '\(requested)' (available: \(names.joined(separator: ", ")))")
            }
            requestedBackend = backend
        }
        do throws(PeerSyncError) {
            return try StorageBackends.backend(forDatabaseAt: directory, requested: requestedBackend)
        } catch {
            guard let existing = error.context["backend"], let requested = error.context["requested"] else {
                throw PeerSyncError(error.code, error.message)   // without the context the CLI would append
            }
            throw PeerSyncError(error.code, "the database in \(directory) uses the \(existing) backend; "
                                + "drop --backend \(requested) or pass --backend \(existing)")
        }
    }

    /// Opens (creating if needed) the database in exactly the folder `directory` with the
    /// backend ``backend(for:requested:)`` chooses, and returns it with that backend.
    static func open(_ directory: String, backend requested: String?) async throws -> (Database, any StorageBackend) {
        let backend = try backend(for: directory, requested: requested)
        let db = try await Database(path: directory, config: DatabaseConfiguration(directory: directory, backend: backend))
        // Commands that write documents (put, import, sync, serve, mesh) keep value indexes up
        // to date only in a process where the query module's indexer is installed; it is
        // installed by the first use of an index or query API, so touch one here. Without it
        // their writes would mark the indexes stale, for the next query to rebuild them whole
        // (Query README, "Indexes"). Reading the default collection's index names is cheap.
        _ = try await db.defaultCollection().indexes()
        return (db, backend)
    }
}
