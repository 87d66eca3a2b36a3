@_exported import PeerSyncConformance
import PeerSyncCore
import PeerSyncTransport
import Synchronization

/// Whether `error` is a ``PeerSyncError`` with one of `codes` (any code if `codes` is empty).
func isPeerSyncError(_ error: any Error, _ codes: [PeerSyncError.Code] = []) -> Bool {
    guard let error = error as? PeerSyncError else { return false }
    return codes.isEmpty || codes.contains(error.code)
}

func describe(_ error: any Error) -> String {
    if let error = error as? PeerSyncError { return "PeerSyncError(\(error))" }
    return "\(type(of: error)): \(error)"
}

/// Runs `operation` and returns its result, or throws a ``CheckFailure`` naming `what` once
/// `timeout` has passed. The operation runs in its own task, which is cancelled on timeout and
/// not waited for, so a transport that ignores cancellation still cannot hang the suite.
func within<T: Sendable>(_ timeout: Duration, _ what: String,
                         _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = Race<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let work = Task {
                do { race.finish(.success(try await operation())) } catch { race.finish(.failure(error)) }
            }
            let timer = Task {
                do { try await Task.sleep(for: timeout) } catch { return }
                race.finish(.failure(CheckFailure("timed out after \(timeout): \(what)")))
            }
            race.start(continuation, tasks: [work, timer])
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The first of several outcomes wins; the losers are cancelled.
private final class Race<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var result: Result<T, any Error>?
        var tasks: [Task<Void, Never>] = []
        var resumed = false
    }
    // Guards the continuation, the first result and the task handles.
    private let state = LockedValue(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, tasks: [Task<Void, Never>]) {
        let ready: Result<T, any Error>? = state.withLock { s in
            s.tasks = tasks
            if let result = s.result, !s.resumed {
                s.resumed = true
                return result
            }
            s.continuation = continuation
            return nil
        }
        if let ready {
            for task in tasks { task.cancel() }
            continuation.resume(with: ready)
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, tasks): (CheckedContinuation<T, any Error>?, [Task<Void, Never>]) = state.withLock { s in
            guard s.result == nil else { return (nil, []) }
            s.result = result
            guard let continuation = s.continuation, !s.resumed else { return (nil, []) }
            s.resumed = true
            s.continuation = nil
            return (continuation, s.tasks)
        }
        guard let continuation else { return }
        for task in tasks { task.cancel() }
        continuation.resume(with: result)
    }
}

/// Runs the operations concurrently; the first error cancels the others and is rethrown.
func concurrently(_ operations: [@Sendable () async throws -> Void]) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for operation in operations { group.addTask { try await operation() } }
        do {
            for try await _ in group {}
        } catch {
            group.cancelAll()
            throw error
        }
    }
}

/// A thread-safe integer.
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)
    var value: Int { atomic.load(ordering: .acquiring) }
    func set(_ value: Int) { atomic.store(value, ordering: .releasing) }
    @discardableResult func increment() -> Int { atomic.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue }
}

/// A thread-safe flag.
final class Flag: Sendable {
    private let atomic = Atomic<Bool>(false)
    var isSet: Bool { atomic.load(ordering: .acquiring) }
    func set() { atomic.store(true, ordering: .releasing) }
}

/// Deterministic test payloads.
enum Payload {
    typealias Generator = SplitMix64

    /// `count` pseudo-random bytes determined by `seed`.
    static func bytes(seed: UInt64, count: Int) -> [UInt8] {
        // (`Array(unsafeUninitializedCapacity: 0)` writes into the shared empty-array storage,
        // which ThreadSanitizer reports as a race.)
        guard count > 0 else { return [] }
        var generator = Generator(state: seed)
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            var i = 0
            while i + 8 <= count {
                raw.storeBytes(of: generator.next().littleEndian, toByteOffset: i, as: UInt64.self)
                i += 8
            }
            var word = generator.next()
            while i < count {
                raw[i] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                i += 1
            }
            initialized = count
        }
    }

    /// Whether two byte sequences are equal, compared 8 bytes at a time (fast in debug builds).
    static func equal(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in
                var i = 0
                while i + 8 <= x.count {
                    if x.loadUnaligned(fromByteOffset: i, as: UInt64.self) != y.loadUnaligned(fromByteOffset: i, as: UInt64.self) {
                        return false
                    }
                    i += 8
                }
                while i < x.count {
                    if x[i] != y[i] { return false }
                    i += 1
                }
                return true
            }
        }
    }

    /// Whether two messages are equal (type and content).
    static func same(_ a: TransportMessage, _ b: TransportMessage) -> Bool {
        switch (a, b) {
        case (.binary(let x), .binary(let y)): equal(x[...], y[...])
        case (.text(let x), .text(let y)): x.utf8.count == y.utf8.count && equal(Array(x.utf8)[...], Array(y.utf8)[...])
        default: false
        }
    }

    /// Valid UTF-8 text of exactly `byteCount` bytes mixing 1- to 4-byte characters, determined
    /// by `seed`.
    static func text(seed: UInt64, byteCount: Int) -> String {
        let units: [[UInt8]] = [Array("a".utf8), Array("é".utf8), Array("€".utf8), Array("😀".utf8),
                                Array("z".utf8), Array("中".utf8), Array("ß".utf8), Array("\u{1F1EB}".utf8)]
        var generator = Generator(state: seed)
        var chunk: [UInt8] = []
        let chunkSize = Swift.min(byteCount, 4096)
        chunk.reserveCapacity(chunkSize)
        while chunk.count < chunkSize {
            let unit = units[Int(generator.next() % UInt64(units.count))]
            if chunk.count + unit.count <= chunkSize { chunk += unit } else { chunk.append(0x61) }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(byteCount)
        while chunkSize > 0 && bytes.count + chunk.count <= byteCount { bytes += chunk }
        while bytes.count < byteCount { bytes.append(0x62) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A binary message `[tag: 8 bytes LE][payload]` whose payload is derived from the tag.
    static func tagged(_ tag: UInt64, size: Int) -> TransportMessage {
        var bytes = withUnsafeBytes(of: tag.littleEndian) { Array($0) }
        bytes += Payload.bytes(seed: tag, count: size)
        return .binary(bytes)
    }

    /// The tag of a message made by ``tagged(_:size:)``, after checking its payload is intact.
    static func verifyTagged(_ message: TransportMessage) throws -> UInt64 {
        guard case .binary(let bytes) = message else {
            throw CheckFailure("expected a binary message, got \(message)")
        }
        guard bytes.count >= 8 else { throw CheckFailure("message too short to hold a tag: \(bytes.count) bytes") }
        var tag: UInt64 = 0
        for i in 0..<8 { tag |= UInt64(bytes[i]) << (8 * UInt64(i)) }
        let expected = Payload.bytes(seed: tag, count: bytes.count - 8)
        guard equal(bytes[8...], expected[...]) else {
            throw CheckFailure("message with tag \(tag) (\(bytes.count) bytes) is corrupted")
        }
        return tag
    }
}
