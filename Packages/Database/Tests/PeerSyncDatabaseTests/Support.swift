import Foundation
import PeerSyncCore
import PeerSyncStorage
import Synchronization
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncDatabase

/// A fresh temporary directory, removed by `remove()`.
struct TempDirectory: Sendable {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory
            .appendingPathComponent("peersync-dbtest-\(UUID().uuidString)", isDirectory: true).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
        MemoryStorageBackend().removeStore(in: path)
    }
}

func makeConfig(_ backend: Backend, _ dir: TempDirectory, maxRevTreeDepth: Int = 20, maxBodySize: Int = 20 << 20,
                pollInterval: Duration = .milliseconds(20)) -> DatabaseConfiguration {
    DatabaseConfiguration(directory: dir.path, backend: backend.make(), maxRevTreeDepth: maxRevTreeDepth,
                          maxBodySize: maxBodySize, durable: false, changePollInterval: pollInterval)
}

/// Opens a fresh database `test` in a temporary directory, runs `body`, then deletes it all
/// (also when `body` throws).
func withDatabase(_ backend: Backend, maxRevTreeDepth: Int = 20, maxBodySize: Int = 20 << 20,
                  _ body: (Database, TempDirectory) async throws -> Void) async throws {
    let dir = try TempDirectory()
    defer { dir.remove() }
    let database = try await Database(name: "test", config: makeConfig(backend, dir, maxRevTreeDepth: maxRevTreeDepth,
                                                                      maxBodySize: maxBodySize))
    do {
        try await body(database, dir)
    } catch {
        try? await database.close()
        throw error
    }
    try await database.close()
}

/// Asserts that `body` throws a `PeerSyncError` with `code`.
func expectError<R>(_ code: PeerSyncError.Code, sourceLocation: SourceLocation = #_sourceLocation,
                    _ body: () async throws -> R) async {
    do {
        _ = try await body()
        Issue.record("expected error \(code), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as PeerSyncError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected PeerSyncError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Collects what a listener delivers.
final class Collected<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.withLock { $0 } }

    /// Waits until `predicate` holds for the items (deadlock guard of 10 s; returns whether
    /// it held).
    func wait(timeout: Duration = .seconds(10), until predicate: ([T]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if predicate(all) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return predicate(all)
    }
}

extension RevisionID {
    /// A test revision ID, e.g. `rev(2, "b")` = `2-bb`.
    static func t(_ generation: UInt64, _ tag: String) -> RevisionID {
        RevisionID(generation: generation, digest: Array(tag.utf8).hexString)
    }
}
