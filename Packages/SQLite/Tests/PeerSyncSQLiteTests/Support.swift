import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncSQLite

/// A fresh directory under the system temp directory, removed with everything in it on deinit.
final class TempDirectory: Sendable {
    let path: String

    init() throws {
        path = (NSTemporaryDirectory() as NSString)
            .appendingPathComponent("peersync-sqlite-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    var databasePath: String { (path as NSString).appendingPathComponent(SQLiteStorageBackend.fileName) }

    func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }
}

let backend = SQLiteStorageBackend()

/// A body of `size` bytes that depends on `i`.
func body(_ i: Int, size: Int = 64) -> [UInt8] {
    (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
}

/// Runs `body` and expects it to throw a `PeerSyncError` with `code`.
func expectError(_ code: PeerSyncError.Code, sourceLocation: SourceLocation = #_sourceLocation,
                 _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected a \(code) error, nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as PeerSyncError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected a PeerSyncError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Fills keyspace `ks` with `count` records of `size`-byte bodies.
func fill(_ storage: any Storage, count: Int, size: Int = 1000, keyspace: String = "docs") throws {
    try storage.write { writer throws in
        for i in 0..<count {
            try writer.put(Record(key: String(format: "doc-%06d", i), body: body(i, size: size)), in: keyspace)
        }
    }
}

/// Starts a thread that opens a write transaction on `storage`, signals `entered`, waits for
/// `release`, runs `inside` and commits; `done` is signalled at the end.
func holdWriteTransaction(_ storage: any Storage, entered: DispatchSemaphore, release: DispatchSemaphore,
                          done: DispatchSemaphore, inside: @escaping @Sendable (any StorageWriter) throws -> Void = { _ in }) {
    let thread = Thread {
        do {
            try storage.write { writer throws in
                entered.signal()
                release.wait()
                try inside(writer)
            }
        } catch {
            Issue.record("holder write failed: \(error)")
        }
        done.signal()
    }
    thread.start()
}

/// Overwrites `bytes.count` bytes of the file at `offset`.
func overwrite(_ path: String, at offset: UInt64, with bytes: [UInt8]) throws {
    let handle = try #require(FileHandle(forUpdatingAtPath: path))
    defer { try? handle.close() }
    try handle.seek(toOffset: offset)
    try handle.write(contentsOf: Data(bytes))
}

func fileSize(_ path: String) throws -> UInt64 {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return (attributes[.size] as? NSNumber)?.uint64Value ?? 0
}
