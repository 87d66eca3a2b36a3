#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

/// The body of an outgoing message produced lazily by an `AsyncSequence` of byte chunks.
///
/// The connection pulls chunks in a task of its own only as frames are written: at most
/// ``BLIPTuning/streamSendBufferSize`` bytes (and at least two frames' worth) are buffered
/// ahead of the wire, and pulling stops while the peer has not ACKed the message's window.
/// Each chunk is framed and (if the message is `.compressed`) deflated frame by frame.
///
/// Errors: if the sequence throws before the message's first frame was written and the message
/// is a response, an error response is sent instead (the ``BLIPError`` a thrown
/// `PeerSyncError` carries, else `BLIP`/500). Once a message has begun (or for a request, whose
/// number is already taken) BLIP cannot abort it, so the connection is closed with code 1011
/// and every pending request and incoming stream fails with the error.
public struct BLIPBodySource: Sendable {
    let run: @Sendable (_ sink: @escaping @Sendable ([UInt8]) async -> Bool) async throws -> Void

    /// A body made of the chunks of `sequence`, in order (empty chunks are skipped).
    public init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == [UInt8] {
        run = { sink in
            for try await chunk in sequence where !chunk.isEmpty {
                guard await sink(chunk) else { return }
            }
        }
    }

    /// A body of in-memory bytes, handed to the connection `chunkSize` bytes at a time.
    public init(bytes: [UInt8], chunkSize: Int = 65_536) {
        let size = max(1, chunkSize)
        run = { sink in
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + size)
                guard await sink(Array(bytes[offset..<end])) else { return }
                offset = end
            }
        }
    }
}

/// What a streaming handler (``BLIPConnection/setStreamingHandler(profile:concurrent:_:)``)
/// answers.
public enum BLIPReply: Sendable {
    /// A whole response (or `.error` message).
    case message(BLIPMessage)
    /// A response whose body is `message.body` followed by the chunks of `body`.
    case streamed(BLIPMessage, body: BLIPBodySource)
}

/// A response whose body arrives incrementally (from
/// ``BLIPConnection/sendRequestStreamingResponse(_:body:)``). Returned as soon as its
/// properties arrived.
public struct BLIPIncomingResponse: Sendable {
    /// `.response` or `.error`.
    public let type: BLIPMessageType
    /// The number of the request answered.
    public let number: UInt64
    /// The response's flags (`.compressed`, `.urgent`).
    public let flags: BLIPFlags
    /// The response's properties, complete when this value is returned.
    public let properties: BLIPProperties
    /// The body chunks. Iterate it once; dropping it unread discards the rest of the body.
    public let body: BLIPIncomingBody

    /// Whether this is an error response.
    public var isError: Bool { type == .error }
    /// `Error-Domain` of an error response (default `BLIP`).
    public var errorDomain: String? { type == .error ? (properties["Error-Domain"] ?? "BLIP") : nil }
    /// `Error-Code` of an error response (0 if absent); nil for other responses.
    public var errorCode: Int? { type == .error ? (properties.int("Error-Code") ?? 0) : nil }

    /// Reads the whole body into a ``BLIPMessage``. Throws `.tooLarge` past `maxBytes`.
    public func collected(maxBytes: Int = 1 << 20) async throws(PeerSyncError) -> BLIPMessage {
        BLIPMessage(type: type, number: number, flags: flags, properties: properties,
                    body: try await body.collect(maxBytes: maxBytes))
    }
}

/// The body chunks of an incoming streamed response, in order.
///
/// Backpressure: the connection ACKs the response's bytes only as chunks are taken here, so
/// a slow consumer stalls the sender (LiteCore's sender stops after 128,000 unACKed bytes);
/// bytes waiting for the consumer are counted in ``BLIPConnection/streamStatistics``.
///
/// Errors: if the connection closes or fails before the last frame, `next()` throws a
/// `PeerSyncError` (`.closed` for a clean close, otherwise the connection's error); a
/// cancelled consumer gets `.cancelled` and the rest of the body is discarded.
public struct BLIPIncomingBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]
    public typealias Failure = PeerSyncError
    let handle: BLIPStreamHandle

    public func makeAsyncIterator() -> Iterator { Iterator(handle: handle) }

    /// Takes the chunks one by one; each take lets the connection acknowledge those bytes.
    public struct Iterator: AsyncIteratorProtocol {
        /// A chunk of the body, as received (one frame's payload).
        public typealias Element = [UInt8]
        public typealias Failure = PeerSyncError
        let handle: BLIPStreamHandle

        public mutating func next() async throws(PeerSyncError) -> [UInt8]? {
            try await handle.connection.takeChunk(of: handle.number)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws(PeerSyncError) -> [UInt8]? {
            try await handle.connection.takeChunk(of: handle.number)
        }
    }

    /// Reads the rest of the body. Throws `.tooLarge` past `maxBytes` (the rest is discarded).
    public func collect(maxBytes: Int) async throws(PeerSyncError) -> [UInt8] {
        var out: [UInt8] = []
        var iterator = makeAsyncIterator()
        while let chunk = try await iterator.next() {
            guard out.count + chunk.count <= maxBytes else {
                throw PeerSyncError(.tooLarge, "streamed BLIP body exceeds \(maxBytes) bytes")
            }
            out.append(contentsOf: chunk)
        }
        return out
    }
}

/// Ties an incoming stream to its connection; when the last copy of a body goes away, the
/// connection discards whatever of it is still unread or arriving.
final class BLIPStreamHandle: Sendable {
    let connection: BLIPConnection
    let number: UInt64

    init(connection: BLIPConnection, number: UInt64) {
        self.connection = connection
        self.number = number
    }

    deinit {
        let connection = connection, number = number
        Task { await connection.abandonStream(number) }
    }
}

/// Byte counts of streamed bodies held in memory by one connection (for tests and
/// diagnostics).
public struct BLIPStreamStatistics: Sendable, Equatable {
    /// Bytes of incoming streamed bodies received and not yet taken by their consumers.
    public var bufferedInboundBytes = 0
    /// The maximum of `bufferedInboundBytes` since the connection started (or the last reset).
    public var peakBufferedInboundBytes = 0
    /// Bytes pulled from outgoing body sources and not yet written as frames.
    public var bufferedOutboundBytes = 0
    /// The maximum of `bufferedOutboundBytes` since the connection started (or the last reset).
    public var peakBufferedOutboundBytes = 0

    /// All zero.
    public init() {}
}
