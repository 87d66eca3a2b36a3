// What the examples share: printing a line at once, failing with one clear line, waiting for a
// condition with a generous deadline, and comparing the contents of two collections. Kept
// small on purpose: each example's main.swift shows the PeerSync API it is about.

import Foundation
import PeerSync

/// Writes `line` and a newline to standard output at once (unbuffered), so the lines of
/// several processes and of listener callbacks interleave in the order they happened.
/// Thread-safe.
public func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Writes `<program>: <message>` to standard error and exits with status 1.
public func fail(_ message: String) -> Never {
    let program = URL(fileURLWithPath: CommandLine.arguments.first ?? "example").lastPathComponent
    FileHandle.standardError.write(Data("\(program): \(message)\n".utf8))
    exit(1)
}

/// The factor every example deadline is multiplied by: `PEERSYNC_SLOW` from the environment
/// (as in the test suites, e.g. 30 under ThreadSanitizer), at least 1.
public let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// Thrown by ``waitUntil(_:timeout:_:)`` when the condition did not hold in time; its
/// description says what was awaited.
public struct ExampleTimeout: Error, CustomStringConvertible {
    public let what: String
    public let timeout: Duration
    public var description: String { "\(what) did not happen within \(timeout)" }
}

/// Checks `condition` every 50 ms until it returns true. Throws ``ExampleTimeout`` after
/// `timeout` × ``slowFactor`` (default 60 s: generous, the examples' normal runs take well
/// under a second per step), and whatever `condition` throws.
public func waitUntil(_ what: String, timeout: Duration = .seconds(60),
                      _ condition: () async throws -> Bool) async throws {
    let limit = timeout * slowFactor
    let deadline = ContinuousClock.now + limit
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw ExampleTimeout(what: what, timeout: limit) }
        try await Task.sleep(for: .milliseconds(50))
    }
}

/// The live documents of `collection` as `[id: canonical JSON body]`: two collections hold
/// the same documents exactly when these are equal.
public func contents(of collection: PeerSync.Collection) async throws -> [String: String] {
    var result: [String: String] = [:]
    for document in try await collection.allDocuments() { result[document.id] = document.toJSON() }
    return result
}

/// Whether `a` and `b` hold the same live documents (IDs and bodies), `count` of them.
public func sameDocuments(_ a: PeerSync.Collection, _ b: PeerSync.Collection, count: Int) async throws -> Bool {
    let left = try await contents(of: a)
    return left.count == count ? try await contents(of: b) == left : false
}

/// A new empty directory under the system's temporary directory, named `<prefix>.<random>`.
public func makeTemporaryDirectory(prefix: String) throws -> String {
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("\(prefix).\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
