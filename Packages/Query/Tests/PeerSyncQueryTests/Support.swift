import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncQuery
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing

/// Opens a fresh database in a temporary directory, runs `body`, then deletes it all.
func withDatabase(_ backend: Backend, _ body: (Database) async throws -> Void) async throws {
    try await withDatabase(on: backend.make(), body)
}

/// Opens a fresh database over `storage` in a temporary directory, runs `body`, then deletes
/// it all.
func withDatabase(on storage: any StorageBackend, _ body: (Database) async throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("peersync-querytest-\(UUID().uuidString)", isDirectory: true).path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer {
        try? FileManager.default.removeItem(atPath: path)
        MemoryStorageBackend().removeStore(in: path)
    }
    let database = try await Database(name: "test", config: DatabaseConfiguration(directory: path, backend: storage, durable: false))
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
