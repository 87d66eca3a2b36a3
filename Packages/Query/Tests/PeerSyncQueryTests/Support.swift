import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncQuery
import PeerSyncStorage
import Testing
#if SQLite && canImport(PeerSyncSQLite)
import PeerSyncSQLite
#endif
#if LMDB && canImport(PeerSyncLMDB)
import PeerSyncLMDB
#endif

/// The storage backends the query tests run over (those whose traits are enabled).
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, sqlite, lmdb

    static var available: [Backend] {
        var out: [Backend] = [.memory]
        #if SQLite && canImport(PeerSyncSQLite)
        out.append(.sqlite)
        #endif
        #if LMDB && canImport(PeerSyncLMDB)
        out.append(.lmdb)
        #endif
        return out
    }

    /// The on-disk backends (the differential test runs over these).
    static var onDisk: [Backend] { available.filter { $0 != .memory } }

    func make() -> any StorageBackend {
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

    var testDescription: String { rawValue }
}

/// Opens a fresh database in a temporary directory, runs `body`, then deletes it all.
func withDatabase(_ backend: Backend, _ body: (Database) async throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("peersync-querytest-\(UUID().uuidString)", isDirectory: true).path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer {
        try? FileManager.default.removeItem(atPath: path)
        MemoryStorageBackend().removeStore(in: path)
    }
    let database = try await Database(name: "test", config: DatabaseConfiguration(directory: path, backend: backend.make(), durable: false))
    do {
        try await body(database)
    } catch {
        try? await database.close()
        throw error
    }
    try await database.close()
}

/// Foundation declares an `Expression` too: in a file that imports both, the module's own
/// declaration wins (what an app does: `typealias Expression = PeerSyncQuery.Expression`).
typealias Expression = PeerSyncQuery.Expression
