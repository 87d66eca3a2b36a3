import Foundation

/// Log levels, most verbose first (Couchbase Lite's `LogLevel`).
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Everything, including per-message detail of the protocols; for debugging PeerSync itself.
    case debug
    /// Detail of what each component does (each document replicated, each connection).
    case verbose
    /// Events worth knowing in normal operation (a database opened, a replicator stopped).
    case info
    /// Something went wrong and was handled (a retry, a refused peer).
    case warning
    /// An operation failed.
    case error
    /// As a sink's level: deliver nothing.
    case none
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    public var description: String {
        switch self {
        case .debug: "DEBUG"
        case .verbose: "VERBOSE"
        case .info: "INFO"
        case .warning: "WARNING"
        case .error: "ERROR"
        case .none: "NONE"
        }
    }
}

/// Where a message comes from (Couchbase Lite's `LogDomain`). An option set, so a sink can
/// listen to several.
public struct LogDomain: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Databases, collections, documents and storage.
    public static let database = LogDomain(rawValue: 1 << 0)
    /// Queries (Couchbase Lite's domain; PeerSync logs none yet).
    public static let query = LogDomain(rawValue: 1 << 1)
    /// Replicators and replication sessions, both roles.
    public static let replicator = LogDomain(rawValue: 1 << 2)
    /// Transports, TLS, WebSocket and BLIP.
    public static let network = LogDomain(rawValue: 1 << 3)
    /// `URLEndpointListener` and its REST API.
    public static let listener = LogDomain(rawValue: 1 << 4)
    /// Peer discovery (DNS-SD, Bluetooth LE advertising).
    public static let discovery = LogDomain(rawValue: 1 << 5)
    /// The multipeer replicator and its topology.
    public static let mesh = LogDomain(rawValue: 1 << 6)
    /// Every domain.
    public static let all = LogDomain(rawValue: 0x7F)

    public var description: String {
        let names: [(LogDomain, String)] = [(.database, "Database"), (.query, "Query"), (.replicator, "Replicator"),
                                            (.network, "Network"), (.listener, "Listener"),
                                            (.discovery, "Discovery"), (.mesh, "Mesh")]
        return names.filter { contains($0.0) }.map(\.1).joined(separator: "|")
    }
}

/// A destination for log messages. Implementations must be thread-safe: `write` is called
/// from any thread, synchronously with the code that logs, so it must not block for long.
public protocol LogSink: Sendable {
    /// Messages below this level are not delivered.
    var level: LogLevel { get }
    /// Only messages of these domains are delivered.
    var domains: LogDomain { get }
    /// Delivers one message that passed ``level`` and ``domains``. Called from any thread,
    /// synchronously with the code that logs: return quickly, never throw or block for long.
    func write(level: LogLevel, domain: LogDomain, message: String)
}

/// Writes `LEVEL Domain: message` lines to standard error.
public struct ConsoleLogSink: LogSink {
    public let level: LogLevel
    public let domains: LogDomain
    /// A sink for messages at `level` or above (default `.warning`) of `domains` (default all).
    public init(level: LogLevel = .warning, domains: LogDomain = .all) {
        self.level = level
        self.domains = domains
    }
    /// Writes one `LEVEL Domain: message` line to standard error, on the calling thread.
    public func write(level: LogLevel, domain: LogDomain, message: String) {
        FileHandle.standardError.write(Data("\(level) \(domain): \(message)\n".utf8))
    }
}

/// Hands every message to a closure (Couchbase Lite's `CustomLogSink`).
public struct CustomLogSink: LogSink {
    public let level: LogLevel
    public let domains: LogDomain
    private let handler: @Sendable (LogLevel, LogDomain, String) -> Void
    /// A sink that calls `handler` with each message at `level` or above of `domains` (default
    /// all), on the logging thread: `handler` must be thread-safe and quick.
    public init(level: LogLevel, domains: LogDomain = .all,
                handler: @escaping @Sendable (LogLevel, LogDomain, String) -> Void) {
        self.level = level
        self.domains = domains
        self.handler = handler
    }
    /// Calls the handler with the message, on the calling thread.
    public func write(level: LogLevel, domain: LogDomain, message: String) { handler(level, domain, message) }
}

/// Appends timestamped lines to `<directory>/peersync.log`, rotating it to `peersync.1.log`,
/// `peersync.2.log`, ... when it exceeds `maxSize` bytes and keeping at most `maxKeptFiles`
/// old files (Couchbase Lite's `FileLogSink`).
public final class FileLogSink: LogSink {
    public let level: LogLevel
    public let domains: LogDomain
    /// The folder holding `peersync.log` and its rotated predecessors.
    public let directory: String
    /// The size in bytes past which the file is rotated (at least 1024).
    public let maxSize: Int
    /// How many rotated files are kept besides the current one (0: none).
    public let maxKeptFiles: Int

    /// The open file and its size; every write and rotation holds this lock.
    private let state: LockedValue<(handle: FileHandle?, size: Int)>

    /// A sink writing to `<directory>/peersync.log` (the folder is created if needed; the file on
    /// the first message). Defaults: level `.info`, every domain, 512 KiB per file, 2 old files kept;
    /// `maxSize` is raised to at least 1024. Throws `.io` if the folder cannot be created.
    public init(directory: String, level: LogLevel = .info, domains: LogDomain = .all,
                maxSize: Int = 512 * 1024, maxKeptFiles: Int = 2) throws {
        self.level = level
        self.domains = domains
        self.directory = directory
        self.maxSize = max(1024, maxSize)
        self.maxKeptFiles = max(0, maxKeptFiles)
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw PeerSyncError(.io, "cannot create log directory: \(error.localizedDescription)",
                                context: ["path": directory])
        }
        state = LockedValue((nil, 0))
    }

    var currentPath: String { directory + "/peersync.log" }

    /// Appends one timestamped line, rotating the files first when the line would take the
    /// current one past ``maxSize``. Serialized by a lock; I/O errors are ignored (a log
    /// must never fail the code that logs).
    public func write(level: LogLevel, domain: LogDomain, message: String) {
        let stamp = Date().formatted(.iso8601)
        let line = Data("\(stamp) \(level) \(domain): \(message)\n".utf8)
        state.withLock { state in
            if state.handle == nil { state = openCurrent() }
            if state.size + line.count > maxSize, state.size > 0 {
                try? state.handle?.close()
                rotate()
                state = openCurrent()
            }
            state.handle?.write(line)
            state.size += line.count
        }
    }

    private func openCurrent() -> (handle: FileHandle?, size: Int) {
        let fm = FileManager.default
        if !fm.fileExists(atPath: currentPath) { _ = fm.createFile(atPath: currentPath, contents: nil) }
        guard let handle = FileHandle(forWritingAtPath: currentPath) else { return (nil, 0) }
        let size = (try? handle.seekToEnd()).map(Int.init) ?? 0
        return (handle, size)
    }

    private func rotate() {
        let fm = FileManager.default
        func path(_ n: Int) -> String { n == 0 ? currentPath : directory + "/peersync.\(n).log" }
        if maxKeptFiles == 0 { try? fm.removeItem(atPath: currentPath); return }
        try? fm.removeItem(atPath: path(maxKeptFiles))
        for n in stride(from: maxKeptFiles - 1, through: 0, by: -1) where fm.fileExists(atPath: path(n)) {
            try? fm.moveItem(atPath: path(n), toPath: path(n + 1))
        }
    }
}

/// The process-wide log configuration (Couchbase Lite's `LogSinks`): one console sink, one
/// file sink and one custom sink, each optional. Thread-safe.
public enum LogSinks {
    private static let sinks = LockedValue<(console: (any LogSink)?, file: (any LogSink)?, custom: (any LogSink)?)>(
        (ConsoleLogSink(level: .warning), nil, nil))

    /// Default: warnings and errors of every domain to standard error.
    public static var console: (any LogSink)? {
        get { sinks.withLock { $0.console } }
        set { sinks.withLock { $0.console = newValue } }
    }
    /// Default nil (no log file); set a ``FileLogSink`` to keep one.
    public static var file: (any LogSink)? {
        get { sinks.withLock { $0.file } }
        set { sinks.withLock { $0.file = newValue } }
    }
    /// Default nil; set a ``CustomLogSink`` (or any ``LogSink``) to receive messages yourself.
    public static var custom: (any LogSink)? {
        get { sinks.withLock { $0.custom } }
        set { sinks.withLock { $0.custom = newValue } }
    }

    /// Whether any sink wants messages of this level and domain (check before building an
    /// expensive message).
    public static func wants(_ level: LogLevel, _ domain: LogDomain) -> Bool {
        sinks.withLock { s in
            [s.console, s.file, s.custom].contains { sink in
                guard let sink else { return false }
                return level >= sink.level && sink.domains.contains(domain)
            }
        }
    }

    static func dispatch(_ level: LogLevel, _ domain: LogDomain, _ message: String) {
        let current = sinks.withLock { [$0.console, $0.file, $0.custom] }
        for case let sink? in current where level >= sink.level && level != .none && sink.domains.contains(domain) {
            sink.write(level: level, domain: domain, message: message)
        }
    }
}

/// A logger bound to one domain: `let log = Logger(.database); log.info("opened \(path)")`.
/// The message is an autoclosure, built only if some sink wants it.
public struct Logger: Sendable {
    /// The domain of every message this logger writes.
    public let domain: LogDomain
    /// A logger for `domain`.
    public init(_ domain: LogDomain) { self.domain = domain }

    /// Sends `message` at `level` to every sink that wants it; builds it only if one does.
    /// Synchronous; safe from any thread.
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard LogSinks.wants(level, domain) else { return }
        LogSinks.dispatch(level, domain, message())
    }
    /// ``log(_:_:)`` at `.debug`.
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    /// ``log(_:_:)`` at `.verbose`.
    public func verbose(_ message: @autoclosure () -> String) { log(.verbose, message()) }
    /// ``log(_:_:)`` at `.info`.
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    /// ``log(_:_:)`` at `.warning`.
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    /// ``log(_:_:)`` at `.error`.
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
}
