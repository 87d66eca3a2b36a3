import PeerSyncStorage
import Testing
#if SQLite && canImport(PeerSyncSQLite)
import PeerSyncSQLite
#endif
#if LMDB && canImport(PeerSyncLMDB)
import PeerSyncLMDB
#endif

/// The storage backends a test body runs over — those whose traits are enabled — shared by the
/// tests of the packages built on the database (one test body over every backend).
public enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, sqlite, lmdb

    /// The backends built into this configuration (memory always).
    public static var available: [Backend] {
        var out: [Backend] = [.memory]
        #if SQLite && canImport(PeerSyncSQLite)
        out.append(.sqlite)
        #endif
        #if LMDB && canImport(PeerSyncLMDB)
        out.append(.lmdb)
        #endif
        return out
    }

    /// The backends with a store on disk, which several processes can open at once.
    public static var onDisk: [Backend] { available.filter { $0 != .memory } }

    /// A new instance of the backend (the memory backend for one not built in).
    public func make() -> any StorageBackend {
        switch self {
        case .memory: return MemoryStorageBackend()
        case .sqlite:
            #if SQLite && canImport(PeerSyncSQLite)
            return SQLiteStorageBackend()
            #else
            return MemoryStorageBackend()
            #endif
        case .lmdb:
            #if LMDB && canImport(PeerSyncLMDB)
            return LMDBStorageBackend()
            #else
            return MemoryStorageBackend()
            #endif
        }
    }

    /// The test argument's name.
    public var testDescription: String { rawValue }
}
