import Foundation
import PeerSyncCore
import PeerSyncStorage
import PeerSyncTestSupport
@testable import PeerSyncLMDB

/// A fresh directory under the system temp directory, removed when `body` returns.
func withTemporaryDirectory<R>(_ body: (String) throws -> R) throws -> R {
    let path = NSTemporaryDirectory() + "peersync-lmdb-tests-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// Opens an LMDB store in `directory` (created if needed).
func openStore(_ directory: String, initialSize: Int = 0, durable: Bool = true,
               busyTimeout: Duration = .seconds(10)) throws -> any Storage {
    try LMDBStorageBackend().open(directory: directory,
                                  options: StorageOptions(durable: durable, busyTimeout: busyTimeout,
                                                          initialSize: initialSize))
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Runs `body` and returns the `PeerSyncError` it threw (nil if it did not throw one).
func caughtError(_ body: () throws -> Void) -> PeerSyncError? {
    do {
        try body()
        return nil
    } catch let error as PeerSyncError {
        return error
    } catch {
        return PeerSyncError(.internalError, "unexpected error type: \(error)")
    }
}

/// All records of a keyspace in key order.
func allRecords(_ reader: any StorageReader, _ keyspace: String) throws -> [Record] {
    var out: [Record] = []
    try reader.enumerate(in: keyspace) { out.append($0); return true }
    return out
}

/// The PeerSyncLMDBTestHelper executable, built next to the test bundle (see ``Products``).
func helperPath() throws -> String {
    let path = Products.path("PeerSyncLMDBTestHelper")
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw PeerSyncError(.notFound, "PeerSyncLMDBTestHelper not found at \(path)")
    }
    return path
}

/// A child process running the helper; killed (by its PID) if still running when released.
final class Child {
    let process = Process()
    let output = Pipe()
    let errors = Pipe()

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: try helperPath())
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// Reads one line of the child's standard output (blocking).
    func readLine() -> String? {
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if byte.first == 0x0A { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// Waits for the child to exit; returns (status, remaining stdout, stderr).
    func finish() -> (status: Int32, output: String, errors: String) {
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// Runs the helper to completion and returns its trimmed standard output; throws on failure.
func runHelper(_ arguments: [String]) throws -> String {
    let child = try Child(arguments)
    let result = child.finish()
    guard result.status == 0 else {
        throw PeerSyncError(.internalError, "helper \(arguments) failed (\(result.status)): \(result.errors)")
    }
    return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
}
