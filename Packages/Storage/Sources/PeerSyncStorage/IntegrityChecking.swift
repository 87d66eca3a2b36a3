/// Optionally adopted by a ``Storage`` whose engine can verify its own files (SQLite's
/// `PRAGMA integrity_check`, LMDB's consistency walk). `Database.checkIntegrity()` calls it
/// and appends the problems it reports.
///
/// Threading: blocks like every storage call; call it from a thread you own.
public protocol StorageIntegrityChecking {
    /// Problems found, one human-readable line each; empty when the store is sound.
    func checkIntegrity() throws -> [String]
}

/// The same check offered by a ``StorageBackend`` for the store in a directory (which may be
/// open at the time). `Database.checkIntegrity()` calls it when the storage itself does not
/// adopt ``StorageIntegrityChecking``.
///
/// Threading: blocks; call it from a thread you own.
public protocol StorageBackendIntegrityChecking {
    /// Problems found in the store in `directory`, one line each; empty when it is sound.
    func checkIntegrity(directory: String) throws -> [String]
}
