import Foundation
import PeerSyncCore
import PeerSyncStorage

/// The child side of the multi-process conformance cases.
///
/// A backend author builds a tiny executable whose `main.swift` is
///
/// ```swift
/// import PeerSyncStorageTesting
/// exit(StorageConformanceChild.main(arguments: CommandLine.arguments, backend: MyBackend()))
/// ```
///
/// and passes its path to the suite as a ``ChildProcessLauncher``. The suite appends
/// ``marker`` and a role to the launcher's arguments; everything before the marker is left to
/// the executable (e.g. to pick a backend by name).
///
/// Roles (the protocol between the suite and the child, not a public contract):
/// - `write DIR PREFIX COUNT`: opens the store, prints `ready`, then commits COUNT
///   transactions, each incrementing the `counter` record of keyspace `shared` and putting
///   `PREFIX<i>`; after each commit it prints `committed KEY SEQUENCE`.
/// - `write-until-killed DIR PREFIX`: the same with 2 KiB bodies, until it is killed (at most
///   1,000,000 transactions).
/// - `hold-write DIR RELEASE-FILE`: opens the store, starts a write transaction that puts
///   `held` in `shared` and `held` in the new keyspace `held-new`, prints `holding`, and keeps
///   the transaction open until RELEASE-FILE exists (at most 120 s); then commits and prints
///   `committed`.
///
/// Output goes straight to the file descriptors (unbuffered), so a line printed is a line the
/// parent can read even if the child is killed right after.
public enum StorageConformanceChild {
    /// The argument that starts the suite's part of the command line.
    public static let marker = "--storage-conformance-child"

    /// Runs the role given after ``marker`` in `arguments` against `backend`.
    /// Returns the process exit status: 0 on success, 1 on a storage error, 64 on bad arguments.
    public static func main(arguments: [String], backend: any StorageBackend) -> Int32 {
        guard let start = arguments.firstIndex(of: marker) else {
            return usage("missing \(marker)")
        }
        let args = Array(arguments[(start + 1)...])
        do {
            switch args.first {
            case "write":
                guard args.count == 4, let count = Int(args[3]), count >= 0 else { return usage("write DIR PREFIX COUNT") }
                try writeLoop(backend: backend, directory: args[1], prefix: args[2], count: count, bodySize: 16)
            case "write-until-killed":
                guard args.count == 3 else { return usage("write-until-killed DIR PREFIX") }
                try writeLoop(backend: backend, directory: args[1], prefix: args[2], count: 1_000_000, bodySize: 2048)
            case "hold-write":
                guard args.count == 3 else { return usage("hold-write DIR RELEASE-FILE") }
                try holdWrite(backend: backend, directory: args[1], releaseFile: args[2])
            default:
                return usage("unknown role \(args.first ?? "(none)")")
            }
            return 0
        } catch {
            printLine("storage-conformance-child: \(error)", to: .standardError)
            return 1
        }
    }

    private static func writeLoop(backend: any StorageBackend, directory: String, prefix: String,
                                  count: Int, bodySize: Int) throws {
        let store = try backend.open(directory: directory, options: StorageOptions(create: false))
        defer { try? store.close() }
        printLine("ready")
        for i in 0..<count {
            let key = prefix + String(format: "%06d", i)
            let sequence = try store.write { w -> UInt64 in
                let body = try w.get("counter", in: "shared")?.body ?? []
                guard let value = Int(String(decoding: body, as: UTF8.self)) else {
                    throw PeerSyncError(.corrupt, "the counter record is missing or not a number")
                }
                try w.put(Record(key: "counter", body: "\(value + 1)".bytes), in: "shared")
                return try w.put(Record(key: key, version: [1], body: patternBytes(count: bodySize, seed: UInt64(i + 1))),
                                 in: "shared")
            }
            printLine("committed \(key) \(sequence)")
        }
    }

    private static func holdWrite(backend: any StorageBackend, directory: String, releaseFile: String) throws {
        let store = try backend.open(directory: directory, options: StorageOptions(create: false))
        defer { try? store.close() }
        try store.write { w in
            try w.put(Record(key: "held", body: "uncommitted".bytes), in: "shared")
            try w.put(Record(key: "held"), in: "held-new")
            printLine("holding")
            let deadline = ContinuousClock.now + CaseContext.hangTimeout
            while !FileManager.default.fileExists(atPath: releaseFile), ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.002)
            }
        }
        printLine("committed")
    }

    private static func usage(_ message: String) -> Int32 {
        printLine("storage-conformance-child: bad arguments: \(message)", to: .standardError)
        return 64
    }

    private static func printLine(_ line: String, to handle: FileHandle = .standardOutput) {
        handle.write(Data((line + "\n").utf8))
    }
}
