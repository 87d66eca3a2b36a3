import PeerSyncCore
import Foundation

/// Two connected in-memory byte streams with bounded buffers (test support only): TLS,
/// WebSocket framing and anything else over a ``ByteStream`` run without sockets.
///
/// `ByteStreamPair().a` writes what `.b` reads and vice versa. A write suspends while the
/// peer's buffer is full (backpressure). `shutdownOutput()` makes the peer read end-of-stream
/// after the buffered bytes; `close()` also ends the peer's writes and this side's pending
/// read with `.closed`.
public struct ByteStreamPair: Sendable {
    public let a: MemoryByteStream
    public let b: MemoryByteStream

    /// `capacity`: the bytes each direction buffers before a write suspends.
    public init(capacity: Int = 16 * 1024) {
        let ab = MemoryPipe(capacity: capacity)
        let ba = MemoryPipe(capacity: capacity)
        a = MemoryByteStream(inbound: ba, outbound: ab, name: "a")
        b = MemoryByteStream(inbound: ab, outbound: ba, name: "b")
    }
}

/// One end of a ``ByteStreamPair``. Thread-safe; one reader and one writer at a time.
public final class MemoryByteStream: ByteStream {
    let inbound: MemoryPipe
    let outbound: MemoryPipe
    let name: String

    init(inbound: MemoryPipe, outbound: MemoryPipe, name: String) {
        self.inbound = inbound
        self.outbound = outbound
        self.name = name
    }

    /// Up to `maxBytes` buffered bytes (suspends while none are); nil at end of stream (the
    /// peer shut its output down or closed); throws `.closed` after ``close()``.
    public func read(maxBytes: Int) async throws -> [UInt8]? { try await inbound.read(maxBytes: maxBytes) }
    /// Buffers `bytes` for the peer, suspending while its buffer is full; throws `.closed`
    /// once either side closed.
    public func write(_ bytes: [UInt8]) async throws { try await outbound.write(bytes) }
    /// The peer reads end-of-stream after the buffered bytes.
    public func shutdownOutput() async { outbound.finish() }
    /// Ends this side's writes and pending reads (they throw `.closed`).
    public func close() async {
        outbound.finish()
        inbound.breakReader()
    }
    /// `memory:a` or `memory:b`: the peer's end.
    public var remoteAddress: String? { "memory:\(name == "a" ? "b" : "a")" }
}

/// A bounded single-reader, single-writer byte pipe (one direction of a ``ByteStreamPair``).
public final class MemoryPipe: Sendable {
    private struct State {
        var buffer: [UInt8] = []
        var finished = false       // writer is done: reader gets EOF after the buffer
        var broken = false         // reader is gone: reads and writes throw
        var reader: CheckedContinuation<Void, Never>?
        var writer: CheckedContinuation<Void, Never>?
    }
    private let state = LockedValue(State())
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
