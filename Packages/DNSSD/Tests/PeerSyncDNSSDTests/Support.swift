import Dispatch
import Foundation
import PeerSyncCore
import Testing

/// How many times slower than full speed this run is: `PEERSYNC_SLOW` (`Tools/test --sanitize`
/// sets it: 30 under TSan, 3 under ASan), 1 otherwise.
let slowFactor = max(1, Int(ProcessInfo.processInfo.environment["PEERSYNC_SLOW"] ?? "") ?? 1)

/// A deadline that assumes full speed, stretched by ``slowFactor``.
func slow(_ duration: Duration) -> Duration { duration * slowFactor }

/// Polls `condition` until it holds (true) or `timeout`, stretched by ``slowFactor``, passes.
func eventually(_ timeout: Duration = .seconds(20), _ condition: () async throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + slow(timeout)
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// Runs programs for the tests, on Dispatch threads (never blocking the cooperative pool).
enum Command {
    /// Runs `program` (a path, or a name looked up on PATH) to completion; its exit status and
    /// its output and error output together. Blocks the calling thread.
    static func runBlocking(_ program: String, _ arguments: [String], environment: [String: String] = [:]) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [program] + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch { return (-1, "cannot run \(program): \(error)") }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// ``runBlocking(_:_:environment:)`` on a Dispatch thread.
    static func run(_ program: String, _ arguments: [String], environment: [String: String] = [:]) async -> (status: Int32, output: String) {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: runBlocking(program, arguments, environment: environment))
            }
        }
    }
}

