import Foundation
import PeerSyncCore
import PeerSyncStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Two processes on one store; a child killed in the middle of its writes; readers of one
/// process while another writes.
enum MultiProcessCases {
    static func twoProcesses(_ t: CaseContext) throws {
        let dir = t.directory()
        let store = try t.open(dir)
        try store.write { try $0.put(Record(key: "counter", body: "0".bytes), in: "shared") }  // sequence 1
        let n = 120
        let child = try ChildProcess(t, role: ["write", dir, "child-", "\(n)"])
        defer { child.killAndReap() }
        try t.check(child.waitForLines(1), "the child did not start (no \"ready\"); stderr: \(child.stderrText)")
        try t.checkEqual(child.lines.first, "ready", "the child's first line")

        // Write and read while the child writes.
        for i in 0..<n {
            try store.write { w in
                let value = Int(String(decoding: try w.get("counter", in: "shared")?.body ?? [], as: UTF8.self)) ?? -1_000_000
                try w.put(Record(key: "counter", body: "\(value + 1)".bytes), in: "shared")
                try w.put(Record(key: String(format: "parent-%06d", i), body: [UInt8(i % 256)]), in: "shared")
            }
            if i % 10 == 0 {
                try store.read { r in
                    let counter = Int(String(decoding: try r.get("counter", in: "shared")?.body ?? [], as: UTF8.self)) ?? -1
                    let records = try r.count(in: "shared", includeDeleted: true)
                    try t.checkEqual(counter, records - 1,
                                     "in one snapshot, the counter equals the number of records written by both processes")
                }
            }
        }
        try t.check(child.waitForExit(), "the child did not exit")
        try t.checkEqual(child.exitStatus, 0, "the child's exit status (stderr: \(child.stderrText))")
        // The exit can be seen before the stdout thread has read everything: wait for EOF.
        try t.check(child.waitForEndOfOutput(), "the child's output did not end")
        let committed = try parseCommitted(t, child.lines)
        try t.checkEqual(committed.count, n, "lines \"committed KEY SEQ\" printed by the child")

        func checkFinal(_ r: any StorageReader, _ when: String) throws {
            try t.checkEqual(try r.get("counter", in: "shared")?.body, "\(2 * n)".bytes,
                             "the counter incremented by both processes (a lost update means writers were not serialized) \(when)")
            for entry in committed {
                try t.checkEqual(try r.get(entry.key, in: "shared")?.sequence, entry.sequence,
                                 "the child's record \(entry.key) at the sequence the child was given \(when)")
            }
            for i in 0..<n {
                try t.checkEqual(try r.get(String(format: "parent-%06d", i), in: "shared")?.body, [UInt8(i % 256)],
                                 "the parent's record \(i) \(when)")
            }
            try t.checkEqual(try r.lastSequence(in: "shared"), UInt64(1 + 4 * n), "lastSequence \(when)")
            let feed = try t.changes(r, "shared")
            try t.checkEqual(feed.count, 2 * n + 1, "records in the feed \(when)")
            try t.check(zip(feed, feed.dropFirst()).allSatisfy { $0.sequence < $1.sequence },
                        "the feed's sequences are unique and increasing \(when)")
        }
        // The handle that stayed open sees the other process's commits without reopening.
        try store.read { try checkFinal($0, "(handle open during the run)") }
        try t.open(dir).read { try checkFinal($0, "(new handle)") }
    }

    static func childKilledMidWrite(_ t: CaseContext) throws {
        let dir = t.directory()
        let store = try t.open(dir)
        try store.write { try $0.put(Record(key: "counter", body: "0".bytes), in: "shared") }
        let child = try ChildProcess(t, role: ["write-until-killed", dir, "k-"])
        defer { child.killAndReap() }
        try t.check(child.waitForLines(1), "the child did not start (no \"ready\"); stderr: \(child.stderrText)")
        // Let it commit a good number of transactions, writing ourselves meanwhile.
        for i in 0..<5 {
            try store.write { try $0.put(Record(key: "parent-\(i)"), in: "other") }
            _ = child.waitForLines(1 + 8 * (i + 1))
        }
        try t.check(child.waitForLines(41), "the child committed fewer than 40 transactions before stalling; stderr: \(child.stderrText)")
        child.kill()
        try t.check(child.waitForExit(), "the killed child was not reaped")
        try t.check(child.wasKilledBySignal, "the child should have died from SIGKILL, not exited (stderr: \(child.stderrText))")
        try t.check(child.waitForEndOfOutput(), "the child's output did not end")
        let committed = try parseCommitted(t, child.lines)
        try t.check(committed.count >= 40, "at least 40 commits were reported")

        func checkCommitted(_ s: any Storage, _ when: String) throws {
            try s.read { r in
                for entry in committed {
                    try t.checkEqual(try r.get(entry.key, in: "shared")?.sequence, entry.sequence,
                                     "committed record \(entry.key) \(when)")
                }
                let records = try t.keys(r, "shared", range: .prefix("k-"))
                try t.check(records.count >= committed.count, "all committed records exist \(when)")
                let counter = Int(String(decoding: try r.get("counter", in: "shared")?.body ?? [], as: UTF8.self)) ?? -1
                try t.checkEqual(counter, records.count,
                                 "the counter equals the number of records: every transaction is all or nothing \(when)")
                let feed = try t.changes(r, "shared")
                try t.check(zip(feed, feed.dropFirst()).allSatisfy { $0.sequence < $1.sequence },
                            "the feed is strictly increasing \(when)")
            }
        }
        try checkCommitted(store, "(handle open during the kill)")
        try t.checkEqual(try store.write { try $0.put(Record(key: "after-kill"), in: "other") }, 6,
                         "a write after the child was killed (its locks must be released)")
        try store.close()
        let reopened = try t.open(dir)
        try checkCommitted(reopened, "(after reopening)")
        try reopened.write { w in try w.put(Record(key: "after-reopen"), in: "shared") }
        try t.checkEqual(try reopened.read { try $0.get("after-reopen", in: "shared") != nil }, true, "a write after reopening")
    }

    /// Opening an existing store and reading it never wait for a writer of another process.
    /// A child holds a write transaction open until told to commit (a file appearing); this
    /// process meanwhile opens the store afresh, reads it every way (including a keyspace the
    /// child's transaction is creating), closes it, and runs the backend's integrity checks.
    /// All of that must be done while the child still holds its transaction: an ordering, not
    /// a timing, so the case holds under a slow (sanitizer) build.
    static func readersDoNotWaitForAnotherProcessWriting(_ t: CaseContext) throws {
        let dir = t.directory()
        let store = try t.open(dir)
        try store.write { w in
            try w.put(Record(key: "counter", body: "0".bytes), in: "shared")
            try w.put(Record(key: "a", body: "1".bytes), in: "shared")
        }
        // Closed, so that the open below is a new one (a backend may share one open store per
        // process, as LMDB must).
        try store.close()
        let release = t.root.appendingPathComponent("release-\(UUID().uuidString)").path
        let child = try ChildProcess(t, role: ["hold-write", dir, release])
        defer {
            _ = FileManager.default.createFile(atPath: release, contents: nil)
            child.killAndReap()
        }
        try t.check(child.waitForLines(1), "the child did not start (no \"holding\"); stderr: \(child.stderrText)")
        try t.checkEqual(child.lines.first, "holding", "the child's first line")

        // A write would wait for the child (or throw `.busy`); opening and reading must not.
        let reader = try t.open(dir, options: StorageOptions(create: false))
        try reader.read { r in
            try t.checkEqual(try r.get("counter", in: "shared")?.body, "0".bytes, "a committed record")
            try t.checkEqual(try r.get("held", in: "shared"), nil, "the child's uncommitted record")
            try t.checkEqual(try r.count(in: "shared", includeDeleted: true), 2, "count")
            try t.checkEqual(try r.lastSequence(in: "shared"), 2, "lastSequence")
            try t.checkEqual(try t.keys(r, "shared"), ["a", "counter"], "keys")
            try t.checkEqual(try t.changes(r, "shared").map(\.key), ["counter", "a"], "the changes feed")
            try t.checkEqual(try r.keyspaces(), ["shared"], "keyspaces (not the one the child is creating)")
            try t.checkEqual(try r.count(in: "held-new", includeDeleted: true), 0, "count of the keyspace being created")
            try t.checkEqual(try r.lastSequence(in: "held-new"), 0, "lastSequence of the keyspace being created")
            try t.checkEqual(try t.keys(r, "held-new"), [], "keys of the keyspace being created")
        }
        if let checking = reader as? any StorageIntegrityChecking {
            try t.checkEqual(try checking.checkIntegrity(), [], "the store's integrity check")
        }
        try reader.close()
        if let checking = t.backend as? any StorageBackendIntegrityChecking {
            try t.checkEqual(try checking.checkIntegrity(directory: dir), [], "the backend's integrity check")
        }
        try t.checkEqual(child.lines, ["holding"],
                         "the child's output: it must still hold its write transaction after this process opened, read and checked the store")

        _ = FileManager.default.createFile(atPath: release, contents: nil)
        try t.check(child.waitForExit(), "the child did not exit")
        try t.checkEqual(child.exitStatus, 0, "the child's exit status (stderr: \(child.stderrText))")
        try t.check(child.waitForEndOfOutput(), "the child's output did not end")
        try t.checkEqual(child.lines, ["holding", "committed"], "the child's output")
        try t.open(dir).read { r in
            try t.checkEqual(try r.get("held", in: "shared")?.body, "uncommitted".bytes, "the child's record once committed")
            try t.checkEqual(try r.keyspaces(), ["held-new", "shared"], "keyspaces once the child committed")
        }
    }

    private static func parseCommitted(_ t: CaseContext, _ lines: [String]) throws -> [KeySeq] {
        var result: [KeySeq] = []
        for line in lines.dropFirst() {
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[0] == "committed", let sequence = UInt64(parts[2]) else {
                throw t.failure("unexpected line from the child: \(brief(line))", file: #fileID, line: #line)
            }
            result.append(KeySeq(String(parts[1]), sequence))
        }
        return result
    }
}

/// A child process running ``StorageConformanceChild``, with its stdout collected line by line
/// on a thread of its own and its stderr in a file.
final class ChildProcess: Sendable {
    private struct State {
        var lines: [String] = []
        var partial: [UInt8] = []
        var endOfOutput = false
    }

    /// What the stdout thread and the termination handler share with the case thread.
    private final class Shared: Sendable {
        let state = LockedValue(State())
        /// Signalled on every new output and at the end of output.
        let changed = DispatchSemaphore(value: 0)
        /// Signalled when the process exited.
        let exited = DispatchSemaphore(value: 0)
    }

    private let process: Process
    private let stderrURL: URL
    private let shared = Shared()

    init(_ t: CaseContext, role: [String]) throws {
        guard let launcher = t.suite.childLauncher else {
            throw t.failure("no childLauncher", file: #fileID, line: #line)
        }
        stderrURL = t.root.appendingPathComponent("child-stderr-\(UUID().uuidString).txt")
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: launcher.executablePath)
        process.arguments = launcher.arguments + [StorageConformanceChild.marker] + role
        process.environment = ProcessInfo.processInfo.environment.merging(launcher.environment) { $1 }
        let stdout = Pipe()
        process.standardOutput = stdout
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        process.standardInput = FileHandle.nullDevice
        let shared = self.shared
        process.terminationHandler = { _ in shared.exited.signal() }
        do {
            try process.run()
        } catch {
            throw t.failure("could not start the child \(launcher.executablePath): \(error)", file: #fileID, line: #line,
                            underlying: error)
        }
        let reader = stdout.fileHandleForReading
        let thread = Thread {
            while true {
                let data = reader.availableData
                shared.state.withLock { s in
                    if data.isEmpty {
                        s.endOfOutput = true
                        return
                    }
                    s.partial += data
                    while let newline = s.partial.firstIndex(of: UInt8(ascii: "\n")) {
                        s.lines.append(String(decoding: s.partial[..<newline], as: UTF8.self))
                        s.partial.removeSubrange(...newline)
                    }
                }
                shared.changed.signal()
                if data.isEmpty { return }
            }
        }
        thread.name = "child-stdout"
        thread.start()
    }

    var lines: [String] { shared.state.withLock { $0.lines } }

    /// Waits until at least `count` complete lines were read; false on end of output or a hang.
    func waitForLines(_ count: Int) -> Bool {
        waitUntil { $0.lines.count >= count }
    }

    /// Waits for end of output (the child and every process sharing its stdout exited).
    func waitForEndOfOutput() -> Bool { waitUntil { $0.endOfOutput } }

    func waitForExit() -> Bool {
        if shared.exited.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .timedOut { return false }
        shared.exited.signal()  // later waits return at once
        return true
    }

    private func waitUntil(_ condition: (State) -> Bool) -> Bool {
        let deadline = DispatchTime.now() + CaseContext.hangTimeout.timeInterval
        while true {
            let (met, over) = shared.state.withLock { (condition($0), $0.endOfOutput) }
            if met { return true }
            if over { return false }
            if shared.changed.wait(timeout: deadline) == .timedOut { return shared.state.withLock { condition($0) } }
        }
    }

    var exitStatus: Int32 { process.terminationReason == .exit ? process.terminationStatus : -1 }
    var wasKilledBySignal: Bool { process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL }

    var stderrText: String {
        let data = (try? Data(contentsOf: stderrURL)) ?? Data()
        return brief(String(decoding: data, as: UTF8.self))
    }

    /// Sends SIGKILL to the child if it is still running.
    func kill() {
        if process.isRunning { _ = sendSignal(process.processIdentifier, SIGKILL) }
    }

    /// Makes sure the child is gone (used on every exit path of a case).
    func killAndReap() {
        kill()
        _ = waitForExit()
    }
}

private func sendSignal(_ pid: Int32, _ signal: Int32) -> Int32 {
    #if canImport(Glibc)
    Glibc.kill(pid, signal)
    #else
    Darwin.kill(pid, signal)
    #endif
}
