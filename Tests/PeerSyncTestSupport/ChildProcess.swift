import Foundation
import PeerSyncCore
import PeerSyncTransportTesting

/// A child process of a test: one of the package's executables (``init(product:_:environment:directory:standardInput:standardError:)``),
/// a program on `PATH` (``init(program:_:environment:directory:standardInput:standardError:)``)
/// or any executable file. Its standard output and error are read on two dedicated threads
/// (never the cooperative pool) and collected as lines and as raw text.
///
/// - Lines: ``output`` has both streams' lines in arrival order; ``standardOutput`` and
///   ``standardError`` each stream's. A last line without a newline counts once the stream
///   ends. Raw text (with `\r`, escape sequences, partial lines) is in ``text`` (both
///   streams), ``standardOutputText`` and ``standardErrorText``.
/// - Waiting polls every 10 ms with `Task.sleep`; every timeout is stretched by
///   `PEERSYNC_SLOW` (``TestTiming/slow(_:)``): timeouts only bound a failure.
/// - The process is started at once, stopped by its own PID (``signal(_:)``, ``stop()``),
///   and SIGKILLed when the object is released while it still runs.
///
/// Thread-safe: every member may be used from any task or thread.
public final class ChildProcess: Sendable {
    /// Where a stream of the child goes.
    public enum Stream: Sendable {
        /// Read by the test (``output``, ``standardOutputText``, …).
        case collected
        /// The test process's own stream.
        case inherited
        /// `/dev/null`.
        case discarded
    }

    /// `@unchecked`: `Process` and `FileHandle` are configured before `run()` and then only
    /// queried (`isRunning`, `terminationStatus`, `processIdentifier`) or written to (stdin, by
    /// the test), which Foundation allows from any thread.
    private struct Handles: @unchecked Sendable {
        let process: Process
        let input: FileHandle?
    }

    private struct Collected {
        var lines: [String] = []
        var outLines: [String] = []
        var errLines: [String] = []
        var outBytes: [UInt8] = []
        var errBytes: [UInt8] = []
        var allBytes: [UInt8] = []
        var openStreams = 0
    }

    private let handles: Handles
    private let collected = LockedValue(Collected())
    /// The command line, for messages.
    public let commandLine: String

    /// Starts `executable` (a path) with `arguments`; `environment` is added to (and
    /// overrides) this process's environment. `standardInput`: a pipe the test writes with
    /// ``send(_:)`` when true, `/dev/null` otherwise. Standard output is always collected.
    /// Throws when the executable cannot be started.
    public init(executable: String, _ arguments: [String], environment: [String: String] = [:],
                directory: String? = nil, standardInput: Bool = false, standardError: Stream = .collected) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        var input: FileHandle?
        if standardInput {
            let pipe = Pipe()
            process.standardInput = pipe
            input = pipe.fileHandleForWriting
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        let out = Pipe()
        process.standardOutput = out
        var readers: [(FileHandle, Bool)] = [(out.fileHandleForReading, false)]
        switch standardError {
        case .collected:
            let err = Pipe()
            process.standardError = err
            readers.append((err.fileHandleForReading, true))
        case .inherited:
            process.standardError = FileHandle.standardError
        case .discarded:
            process.standardError = FileHandle.nullDevice
        }
        handles = Handles(process: process, input: input)
        commandLine = ([executable] + arguments).joined(separator: " ")
        collected.withLock { $0.openStreams = readers.count }
        try process.run()
        for (handle, isError) in readers {
            let collected = self.collected
            let thread = Thread { ChildProcess.read(handle, isError: isError, into: collected) }
            thread.start()
        }
    }

    /// Starts the package's executable product `product` (built next to the tests; see
    /// ``Products``).
    public convenience init(product: String, _ arguments: [String], environment: [String: String] = [:],
                            directory: String? = nil, standardInput: Bool = false, standardError: Stream = .collected) throws {
        try self.init(executable: Products.path(product), arguments, environment: environment, directory: directory,
                      standardInput: standardInput, standardError: standardError)
    }

    /// Starts `program`, looked up on `PATH` (through `/usr/bin/env`).
    public convenience init(program: String, _ arguments: [String], environment: [String: String] = [:],
                            directory: String? = nil, standardInput: Bool = false, standardError: Stream = .collected) throws {
        try self.init(executable: "/usr/bin/env", [program] + arguments, environment: environment, directory: directory,
                      standardInput: standardInput, standardError: standardError)
    }

    private static func read(_ handle: FileHandle, isError: Bool, into collected: LockedValue<Collected>) {
        var pending: [UInt8] = []
        func take(_ line: ArraySlice<UInt8>, _ c: inout Collected) {
            let text = String(decoding: line, as: UTF8.self)
            c.lines.append(text)
            if isError { c.errLines.append(text) } else { c.outLines.append(text) }
        }
        while true {
            let data = handle.availableData
            if data.isEmpty { break }
            pending += data
            collected.withLock { c in
                if isError { c.errBytes += data } else { c.outBytes += data }
                c.allBytes += data
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    take(pending[..<newline], &c)
                    pending.removeSubrange(...newline)
                }
            }
        }
        collected.withLock { c in
            if !pending.isEmpty { take(pending[...], &c) }
            c.openStreams -= 1
        }
    }

    /// The child's process ID.
    public var pid: Int32 { handles.process.processIdentifier }
    public var isRunning: Bool { handles.process.isRunning }

    /// Both streams' lines, in the order they arrived.
    public var output: [String] { collected.withLock { $0.lines } }
    public var standardOutput: [String] { collected.withLock { $0.outLines } }
    public var standardError: [String] { collected.withLock { $0.errLines } }
    public var standardOutputText: String { collected.withLock { String(decoding: $0.outBytes, as: UTF8.self) } }
    public var standardErrorText: String { collected.withLock { String(decoding: $0.errBytes, as: UTF8.self) } }
    /// Both streams' raw text as it arrived (a partial last line included).
    public var text: String { collected.withLock { String(decoding: $0.allBytes, as: UTF8.self) } }

    /// Writes `text` to the child's standard input (started with `standardInput: true`).
    public func send(_ text: String) {
        handles.input?.write(Data(text.utf8))
    }

    /// Closes the child's standard input (it reads end-of-file).
    public func closeInput() {
        try? handles.input?.close()
    }

    /// Waits until `predicate` holds for ``output`` (true), or the child exited or `timeout`
    /// passed without it (false).
    public func wait(timeout: Duration = .seconds(60), until predicate: ([String]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + TestTiming.slow(timeout)
        while ContinuousClock.now < deadline {
            if predicate(output) { return true }
            if !isRunning {
                await waitForStreams(until: deadline)
                return predicate(output)
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return predicate(output)
    }

    /// Waits until ``text`` contains `needle` (true), or the child exited or `timeout` passed
    /// without it (false).
    public func wait(timeout: Duration = .seconds(60), untilTextContains needle: String) async -> Bool {
        let deadline = ContinuousClock.now + TestTiming.slow(timeout)
        while ContinuousClock.now < deadline {
            if text.contains(needle) { return true }
            if !isRunning {
                await waitForStreams(until: deadline)
                return text.contains(needle)
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return text.contains(needle)
    }

    /// Waits for the child to exit and its output to be read to the end; its exit status (a
    /// signal's number for a child killed by a signal, as `Process` reports it), or nil if it
    /// still runs after `timeout`.
    public func waitForExit(timeout: Duration = .seconds(120)) async -> Int32? {
        let deadline = ContinuousClock.now + TestTiming.slow(timeout)
        while isRunning && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        guard !isRunning else { return nil }
        await waitForStreams(until: deadline + .seconds(5))
        return handles.process.terminationStatus
    }

    private func waitForStreams(until deadline: ContinuousClock.Instant) async {
        while collected.withLock({ $0.openStreams > 0 }) && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Sends `signal` to the child (by its PID) if it still runs.
    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// SIGTERM, then SIGKILL if the child still runs after `grace`; returns its exit status
    /// (nil if even SIGKILL did not end it within the timeout).
    @discardableResult
    public func stop(grace: Duration = .seconds(5)) async -> Int32? {
        signal(SIGTERM)
        if let status = await waitForExit(timeout: grace) { return status }
        signal(SIGKILL)
        return await waitForExit(timeout: .seconds(30))
    }

    deinit {
        if handles.process.isRunning { kill(handles.process.processIdentifier, SIGKILL) }
        try? handles.input?.close()
    }
}

extension ChildProcess {
    /// A finished child's exit status and whole output.
    public struct Outcome: Sendable {
        /// nil when the child did not exit within the timeout (it was then killed).
        public let status: Int32?
        public let standardOutput: String
        public let standardError: String
    }

    /// Runs the package's executable `product` to completion (SIGKILLed after `timeout`),
    /// with `input` on its standard input when given.
    public static func run(product: String, _ arguments: [String], environment: [String: String] = [:],
                           input: String? = nil, timeout: Duration = .seconds(120)) async throws -> Outcome {
        let child = try ChildProcess(product: product, arguments, environment: environment, standardInput: input != nil)
        if let input {
            child.send(input)
            child.closeInput()
        }
        var status = await child.waitForExit(timeout: timeout)
        if status == nil {
            child.signal(SIGKILL)
            _ = await child.waitForExit(timeout: .seconds(30))
            status = nil
        }
        return Outcome(status: status, standardOutput: child.standardOutputText, standardError: child.standardErrorText)
    }
}
