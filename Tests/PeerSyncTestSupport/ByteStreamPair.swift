import PeerSyncCore
import Foundation

/// Two connected in-memory byte streams with bounded buffers (test support only).
///
/// `ByteStreamPair().a` writes what `.b` reads and vice versa. A write suspends while the
/// peer's buffer is full (backpressure). `shutdownOutput()` makes the peer read end-of-stream
/// after the buffered bytes; `close()` also ends the peer's writes and this side's pending
/// read with `.closed`.
struct ByteStreamPair {
    let a: MemoryByteStream
    let b: MemoryByteStream

    init(capacity: Int = 16 * 1024) {
        let ab = MemoryPipe(capacity: capacity)
        let ba = MemoryPipe(capacity: capacity)
        a = MemoryByteStream(inbound: ba, outbound: ab, name: "a")
        b = MemoryByteStream(inbound: ab, outbound: ba, name: "b")
    }
}

final class MemoryByteStream: ByteStream {
    let inbound: MemoryPipe
    let outbound: MemoryPipe
    let name: String

    init(inbound: MemoryPipe, outbound: MemoryPipe, name: String) {
        self.inbound = inbound
        self.outbound = outbound
        self.name = name
    }

    func read(maxBytes: Int) async throws -> [UInt8]? { try await inbound.read(maxBytes: maxBytes) }
    func write(_ bytes: [UInt8]) async throws { try await outbound.write(bytes) }
    func shutdownOutput() async { outbound.finish() }
    func close() async {
        outbound.finish()
        inbound.breakReader()
    }
    var remoteAddress: String? { "memory:\(name == "a" ? "b" : "a")" }
}

/// A bounded single-reader, single-writer byte pipe.
final class MemoryPipe: Sendable {
    private struct State {
        var buffer: [UInt8] = []
        var finished = false       // writer is done: reader gets EOF after the buffer
        var broken = false         // reader is gone: reads and writes throw
        var reader: CheckedContinuation<Void, Never>?
        var writer: CheckedContinuation<Void, Never>?
    }
    private let state = TestLocked(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func read(maxBytes: Int) async throws -> [UInt8]? {
        while true {
            enum Outcome { case data([UInt8], CheckedContinuation<Void, Never>?), eof, broken, wait }
            let outcome = state.withLock { s -> Outcome in
                if s.broken { return .broken }
                if !s.buffer.isEmpty {
                    let n = min(maxBytes, s.buffer.count)
                    let out = Array(s.buffer[0..<n])
                    s.buffer.removeFirst(n)
                    let writer = s.writer
                    s.writer = nil
                    return .data(out, writer)
                }
                if s.finished { return .eof }
                return .wait
            }
            switch outcome {
            case .data(let bytes, let writer):
                writer?.resume()
                return bytes
            case .eof: return nil
            case .broken: throw PeerSyncError(.closed, "memory stream closed")
            case .wait:
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { s -> Bool in
                        if s.broken || s.finished || !s.buffer.isEmpty { return true }
                        s.reader = c
                        return false
                    }
                    if resumeNow { c.resume() }
                }
            }
        }
    }

    func write(_ bytes: [UInt8]) async throws {
        var offset = 0
        while offset < bytes.count {
            enum Outcome { case wrote(Int, CheckedContinuation<Void, Never>?), broken, wait }
            let outcome = state.withLock { s -> Outcome in
                if s.broken || s.finished { return .broken }
                let space = capacity - s.buffer.count
                if space <= 0 { return .wait }
                let n = min(space, bytes.count - offset)
                s.buffer.append(contentsOf: bytes[offset..<offset + n])
                let reader = s.reader
                s.reader = nil
                return .wrote(n, reader)
            }
            switch outcome {
            case .wrote(let n, let reader):
                offset += n
                reader?.resume()
            case .broken:
                throw PeerSyncError(.closed, "memory stream closed")
            case .wait:
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { s -> Bool in
                        if s.broken || s.finished || s.buffer.count < capacity { return true }
                        s.writer = c
                        return false
                    }
                    if resumeNow { c.resume() }
                }
            }
        }
    }

    /// The writer is done (EOF for the reader after buffered bytes).
    func finish() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.finished = true
            defer { s.reader = nil; s.writer = nil }
            return [s.reader, s.writer].compactMap { $0 }
        }
        waiters.forEach { $0.resume() }
    }

    /// The reader is gone: pending and later reads and writes throw.
    func breakReader() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.broken = true
            defer { s.reader = nil; s.writer = nil }
            return [s.reader, s.writer].compactMap { $0 }
        }
        waiters.forEach { $0.resume() }
    }
}

/// An NSLock-guarded value (tests only; ThreadSanitizer understands pthread mutexes).
final class TestLocked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value   // protected by `lock`
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
