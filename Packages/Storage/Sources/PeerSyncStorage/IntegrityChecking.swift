/// Optionally adopted by a ``Storage`` whose engine can verify its own files (SQLite's
/// `PRAGMA integrity_check`, LMDB's consistency walk). `Database.checkIntegrity()` calls it
/// and appends the problems it reports.
///
/// Threading: blocks like every storage call; call it from a thread you own.
public protocol StorageIntegrityChecking {
    /// Problems found, one human-readable line each; empty when the store is sound.
    func checkIntegrity() throws -> [String]
}
