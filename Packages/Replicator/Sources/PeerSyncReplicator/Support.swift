import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncTransport

/// Carries BLIP frames over a ``MessageConnection``: one binary message per frame; text
/// messages are ignored (as LiteCore does).
struct MessageConnectionChannel: BLIPFrameChannel {
    let connection: any MessageConnection

    func sendFrame(_ frame: [UInt8]) async throws {
        try await connection.send(.binary(frame))
    }

    func receiveFrame() async throws -> [UInt8]? {
        while let message = try await connection.receive() {
            if case .binary(let bytes) = message { return bytes }
        }
        return nil
    }

    func close(code: Int, reason: String) async {
        await connection.close(code: CloseCode(rawValue: UInt16(clamping: code)), reason: reason)
    }
}

extension BLIPConnection {
    /// A BLIP connection over a transport connection: each binary message is one frame, text
    /// messages are ignored. Call `start()` after registering handlers.
    public init(connection: any MessageConnection, tuning: BLIPTuning = BLIPTuning()) throws {
        try self.init(channel: MessageConnectionChannel(connection: connection), tuning: tuning)
    }
}

/// Runs `operation`, throwing `.timeout` if it has not finished after `limit`.
///
/// Returns (or throws) as soon as the first of: the operation finishes, the limit passes,
/// the calling task is cancelled (`CancellationError`). The operation runs in its own task
/// and is cancelled then, but it is not awaited: a BLIP reply that never comes does not
/// respond to cancellation, and awaiting it would turn the timeout into a hang. Callers
/// close the connection after a timeout, which ends the operation.
func withTimeout<T: Sendable>(_ limit: Duration, _ what: String,
                              _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = TimeoutRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.begin(continuation)
            let op = Task {
                do { race.finish(.success(try await operation())) } catch { race.finish(.failure(error)) }
            }
            // A dispatch timer, not a sleeping task: a cancelled `Task.sleep` keeps its task
            // (about 1 KB) alive until the deadline, so with one timeout per `rev` the memory
            // grew with the replication rate × the reply timeout. A cancelled source is freed at once.
            let timer = TimeoutTimer(after: limit) {
                race.finish(.failure(PeerSyncError(.timeout, "no answer from the peer within \(limit)", context: ["waitingFor": what])))
            }
            race.onFinish { op.cancel(); timer.cancel() }
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// A one-shot timer on a global dispatch queue.
/// `@unchecked Sendable`: a dispatch source is thread-safe; `source` is never reassigned.
private final class TimeoutTimer: @unchecked Sendable {
    private let source: any DispatchSourceTimer

    init(after limit: Duration, _ fire: @escaping @Sendable () -> Void) {
        let (seconds, attoseconds) = limit.components
        // Clamped to ten years: no overflow for huge limits.
        let nanoseconds = min(max(0, seconds), 315_360_000) * 1_000_000_000 + max(0, attoseconds) / 1_000_000_000
        source = DispatchSource.makeTimerSource(queue: .global())
        source.schedule(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds)))
        source.setEventHandler(handler: fire)
        source.resume()
    }

    func cancel() { source.cancel() }
}

/// The first result of a ``withTimeout(_:_:_:)`` race wins; later ones are dropped.
private final class TimeoutRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        /// A result that came before ``begin(_:)``.
        var early: Result<T, any Error>?
        var done = false
        var cleanup: (@Sendable () -> Void)?
    }

    private let state = LockedValue(State())

    func begin(_ c: CheckedContinuation<T, any Error>) {
        let early = state.withLock { s -> Result<T, any Error>? in
            if s.early == nil { s.continuation = c }
            return s.early
        }
        if let early { c.resume(with: early) }
    }

    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let done = state.withLock { s -> Bool in
            if !s.done { s.cleanup = action }
            return s.done
        }
        if done { action() }
    }

    func finish(_ result: Result<T, any Error>) {
        let finished = state.withLock { s -> (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?)? in
            guard !s.done else { return nil }
            s.done = true
            defer { s.continuation = nil; s.cleanup = nil }
            if s.continuation == nil { s.early = result }
            return (s.continuation, s.cleanup)
        }
        guard let (c, action) = finished else { return }
        c?.resume(with: result)
        action?()
    }
}

extension JSONValue {
    static func parse(_ bytes: [UInt8], _ what: String) throws -> JSONValue {
        do { return try JSONValue(parsing: bytes) } catch {
            throw PeerSyncError(.protocolError, "malformed JSON in \(what)", context: ["error": error.message])
        }
    }

    var json: [UInt8] { canonicalData }
}

extension BLIPMessage {
    /// Throws if this is an error response: `.unauthorized` for `HTTP`/401 and 403, else
    /// `.replicationFailed`, carrying the reply as ``PeerSyncError/blipError`` and `what` as
    /// `context["request"]`.
    func checked(_ what: String) throws -> BLIPMessage {
        guard let reply = blipError else { return self }
        let code: PeerSyncError.Code = reply.isHTTP(401) || reply.isHTTP(403) ? .unauthorized : .replicationFailed
        throw PeerSyncError(code, "\(what) failed: \(reply)", context: ["request": what], detail: reply)
    }
}

/// Blob references (`{"@type":"blob","digest":…}`) anywhere in a document body.
func blobReferences(in value: JSONValue) -> [[String: JSONValue]] {
    switch value {
    case .object(let object):
        if object["@type"]?.stringValue == "blob", object["digest"]?.stringValue != nil { return [object] }
        return object.values.flatMap { blobReferences(in: $0) }
    case .array(let array):
        return array.flatMap { blobReferences(in: $0) }
    default:
        return []
    }
}

extension BLIPConnection {
    /// Registers `handler` for `profile` (see ``setHandler(profile:concurrent:_:)``), holding
    /// `owner` weakly so that the connection does not keep its session alive: once `owner` is
    /// gone, requests get `BLIP`/503.
    func setHandler<Owner: AnyObject & Sendable>(
        profile: String, concurrent: Bool = false, owner: Owner,
        _ handler: @escaping @Sendable (Owner, BLIPRequest) async throws -> BLIPMessage?) {
        setStreamingHandler(profile: profile, concurrent: concurrent, owner: owner) { owner, request in
            try await handler(owner, request).map { .message($0) }
        }
    }

    /// The streaming-reply form of ``setHandler(profile:concurrent:owner:_:)``.
    func setStreamingHandler<Owner: AnyObject & Sendable>(
        profile: String, concurrent: Bool = false, owner: Owner,
        _ handler: @escaping @Sendable (Owner, BLIPRequest) async throws -> BLIPReply?) {
        setStreamingHandler(profile: profile, concurrent: concurrent) { [weak owner] request in
            guard let owner else { throw PeerSyncError.reply(.blip(503, "replication session ended")) }
            return try await handler(owner, request)
        }
    }
}

/// `body` applied to every element of `items` with at most `width` running at once (the next
/// element starts when one finishes), the results in completion order. The first error is
/// thrown and cancels the others.
func mapConcurrently<T: Sendable, R: Sendable>(_ items: [T], width: Int,
                                               _ body: @escaping @Sendable (T) async throws -> R) async throws -> [R] {
    try await withThrowingTaskGroup(of: R.self) { group in
        var results: [R] = []
        results.reserveCapacity(items.count)
        var next = items.startIndex
        func startNext() {
            guard next < items.endIndex else { return }
            let item = items[next]
            next += 1
            group.addTask { try await body(item) }
        }
        for _ in 0..<max(1, width) { startNext() }
        while let result = try await group.next() {
            results.append(result)
            startNext()
        }
        return results
    }
}
