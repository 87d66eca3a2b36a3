#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

/// Limits and tuning of the BLIP framing (defaults are LiteCore's, except `compressionLevel`).
public struct BLIPTuning: Sendable, Hashable {
    /// Maximum frame size including header and checksum (LiteCore: 16384).
    public var maxFrameSize = 16384
    /// Frame size while an urgent message waits behind a normal one (LiteCore: 4096).
    public var urgentFrameSize = 4096
    /// A receiver ACKs a message after this many unacknowledged bytes (LiteCore: 50,000).
    public var ackThreshold = 50_000
    /// A sender stops sending a message with this many unacknowledged bytes (LiteCore: 128,000).
    public var maxUnackedBytes = 128_000
    /// Maximum encoded properties size (LiteCore rejects > 100 KiB).
    public var maxPropertiesSize = 100 * 1024
    /// Maximum size of a message that is assembled in memory (streamed messages are not
    /// limited by this).
    public var maxMessageSize = 64 * 1024 * 1024
    /// Streamed bodies: the most bytes of an outgoing body source buffered ahead of the
    /// frames written (at least two frames' worth is always allowed).
    public var streamSendBufferSize = 64 * 1024
    /// Streamed bodies: when the incoming streamed bodies hold more than this many bytes not
    /// yet taken by their consumers, the connection stops reading frames until they drain
    /// (only reached with very compressible data, since ACKs follow consumption).
    public var maxStreamBufferedBytes = 1024 * 1024
    /// Deflate level for compressed frames (0 disables compression). LiteCore uses 6; any
    /// level interoperates (the receiver only inflates). The default is 3: on ~1 KB JSON
    /// revision bodies it costs about half of level 6's CPU for ~15 % more compressed bytes
    /// (the level-6 hash-chain search was the largest single cost of a push).
    public var compressionLevel: Int32 = 3

    /// The defaults listed with each property.
    public init() {}
}

/// Builds outgoing frames for one connection: owns the outbound running CRC-32 and the
/// outbound deflate stream. Frames must be written to the wire in the order they are built.
/// Not thread-safe; the connection's writer serializes use.
///
/// The deflate stream (about 400 KiB of zlib state) is created with the first compressed
/// frame, so a connection that never sends one (an idle or silent peer) does not hold it.
final class BLIPFrameEncoder {
    private(set) var crc: UInt32 = 0
    private let compressionLevel: Int32
    private var deflater: Deflater?

    /// Whether the deflate stream exists (created by the first compressed frame).
    var hasDeflater: Bool { deflater != nil }

    init(compressionLevel: Int32) throws(PeerSyncError) {
        self.compressionLevel = compressionLevel
    }

    private func makeDeflater() throws(PeerSyncError) -> Deflater {
        if let deflater { return deflater }
        let created = try Deflater(level: compressionLevel)
        deflater = created
        return created
    }

    /// The next frame of a message: at most about `maxFrameSize` bytes of content from
    /// `content[offset...]`. Returns the frame and the payload byte count that flow control
    /// counts (payload after the header, checksum included), and advances `offset`.
    /// `isLast: false` (a streamed body with more to come) keeps MoreComing set even when the
    /// frame takes the rest of `content`.
    func nextFrame(type: BLIPMessageType, number: UInt64, flags: BLIPFlags, content: [UInt8],
                   offset: inout Int, maxFrameSize: Int, isLast: Bool = true) throws(PeerSyncError) -> (frame: [UInt8], counted: Int) {
        let headerSize = Varint.size(of: number)
        let headerRoom = headerSize + 1 + 4  // flags byte + checksum
        let room = max(1, maxFrameSize - headerRoom)
        let end = min(content.count, offset + room)
        let slice = content[offset..<end]
        // An empty payload (the end of a streamed body) is never sent through the deflater.
        let compress = flags.contains(.compressed) && compressionLevel > 0 && !slice.isEmpty
        var frameFlags = flags.subtracting([.moreComing, .compressed])
        if compress { frameFlags.insert(.compressed) }
        if end < content.count || !isLast { frameFlags.insert(.moreComing) }
        frameFlags = BLIPFlags(rawValue: frameFlags.rawValue | type.rawValue)

        var frame: [UInt8] = []
        frame.reserveCapacity(headerRoom + slice.count + (compress ? slice.count / 100 + 16 : 0))
        Varint.append(number, to: &frame)
        frame.append(frameFlags.rawValue)
        let payloadStart = frame.count
        if compress {
            try makeDeflater().compress(slice, appendingTo: &frame)
        } else {
            frame.append(contentsOf: slice)
        }
        crc = slice.withUnsafeBytes { crc32Update(crc, $0) }
        frame.append(UInt8(truncatingIfNeeded: crc >> 24))
        frame.append(UInt8(truncatingIfNeeded: crc >> 16))
        frame.append(UInt8(truncatingIfNeeded: crc >> 8))
        frame.append(UInt8(truncatingIfNeeded: crc))
        offset = end
        return (frame, frame.count - payloadStart)
    }

    /// An ACK frame: Urgent|NoReply, body = varint(bytes received), no checksum, no CRC update.
    static func ackFrame(type: BLIPMessageType, number: UInt64, received: UInt64) -> [UInt8] {
        var frame: [UInt8] = []
        Varint.append(number, to: &frame)
        frame.append(type.rawValue | BLIPFlags.urgent.rawValue | BLIPFlags.noReply.rawValue)
        Varint.append(received, to: &frame)
        return frame
    }
}

/// What the decoder found in one incoming frame.
enum BLIPInboundEvent: Equatable {
    /// The peer acknowledged `received` bytes of our outgoing message (`type` says whether it
    /// is our request or our response).
    case ack(of: BLIPMessageType, number: UInt64, received: UInt64)
    /// A message's properties are complete (its body may still be arriving).
    case started(type: BLIPMessageType, number: UInt64, flags: BLIPFlags, properties: BLIPProperties)
    /// More body bytes of a started message.
    case body(type: BLIPMessageType, number: UInt64, bytes: [UInt8])
    /// The message's last frame arrived.
    case completed(type: BLIPMessageType, number: UInt64)
    /// A frame of a streamed response arrived (emitted after `.started`, before `.body`): `received` is the
    /// flow-control byte count of the message so far. The decoder sends no ACKs for streamed
    /// responses; the connection ACKs as the consumer takes the data.
    case streamProgress(number: UInt64, received: UInt64)
    /// An ACK frame to send back to the peer (flow control).
    case sendAck([UInt8])
}

/// Parses incoming frames for one connection: owns the inbound CRC-32 and inflate stream, and
/// applies every reassembly rule of the protocol; any violation throws
/// ``PeerSyncError/Code/protocolError`` and the connection must close.
/// Not thread-safe; the connection's reader serializes use.
final class BLIPFrameDecoder {
    private struct Incoming {
        var type: BLIPMessageType
        var flags: BLIPFlags
        /// Header bytes (properties-length varint and properties) until the properties are complete.
        var pending: [UInt8] = []
        var started = false
        var received: UInt64 = 0
        var unacked = 0
    }

    private(set) var crc: UInt32 = 0
    /// Created with the first compressed frame received (about 40 KiB of zlib state plus
    /// buffers), so a connection that never receives one does not hold it.
    private var inflater: Inflater?
    private let tuning: BLIPTuning
    private var lastRequestNumber: UInt64 = 0
    private var requests: [UInt64: Incoming] = [:]
    private var responses: [UInt64: Incoming] = [:]
    /// Numbers of our requests that expect a response and have not completed one.
    private var awaitingResponse: Set<UInt64> = []
    /// The subset of `awaitingResponse` whose response is streamed to a consumer.
    private var streamedResponses: Set<UInt64> = []

    init(tuning: BLIPTuning) throws(PeerSyncError) {
        self.tuning = tuning
    }

    /// Whether the inflate stream exists (created by the first compressed frame).
    var hasInflater: Bool { inflater != nil }

    private func makeInflater() throws(PeerSyncError) -> Inflater {
        if let inflater { return inflater }
        let created = try Inflater(maxOutput: max(tuning.maxFrameSize * 64, 1 << 20))
        inflater = created
        return created
    }

    /// Call when sending a request that expects a response, so its response is accepted.
    /// With `streamed`, the response's ACKs are left to the connection (see `.streamProgress`).
    func expectResponse(to number: UInt64, streamed: Bool = false) {
        awaitingResponse.insert(number)
        if streamed { streamedResponses.insert(number) }
    }

    /// Call when we gave up on a request (e.g. the connection is closing).
    func forgetResponse(to number: UInt64) {
        awaitingResponse.remove(number)
        streamedResponses.remove(number)
    }

    func decode(_ frame: [UInt8]) throws(PeerSyncError) -> [BLIPInboundEvent] {
        let bytes = frame[...]
        var index = bytes.startIndex
        guard let number = try Varint.read(bytes, at: &index),
              let rawFlags = try Varint.read(bytes, at: &index) else {
            throw PeerSyncError(.protocolError, "frame too short for its header")
        }
        guard rawFlags <= 0x7F else {
            throw PeerSyncError(.protocolError, "unknown frame flag bits 0x\(String(rawFlags, radix: 16))")
        }
        let flagByte = UInt8(rawFlags)
        guard let type = BLIPMessageType(rawValue: flagByte & BLIPFlags.typeMask) else {
            return []  // types 3, 6, 7: unused, ignored as the spec says
        }
        let flags = BLIPFlags(rawValue: flagByte & ~BLIPFlags.typeMask)

        if type.isAck {
            var i = index
            guard let received = try Varint.read(bytes, at: &i), i == bytes.endIndex else {
                throw PeerSyncError(.protocolError, "malformed ACK frame")
            }
            // ACKMSG acknowledges a request *we* sent; ACKRPY a response we sent.
            return [.ack(of: type == .ackRequest ? .request : .response, number: number, received: received)]
        }

        guard bytes.endIndex - index >= 4 else {
            throw PeerSyncError(.protocolError, "frame too short for its checksum")
        }
        let payloadEnd = bytes.endIndex - 4
        let counted = bytes.endIndex - index
        let payload = flags.contains(.compressed)
            ? try makeInflater().decompress(bytes[index..<payloadEnd]) : Array(bytes[index..<payloadEnd])
        crc = crc32Update(crc, payload)
        let sent = UInt32(bytes[payloadEnd]) << 24 | UInt32(bytes[payloadEnd + 1]) << 16
            | UInt32(bytes[payloadEnd + 2]) << 8 | UInt32(bytes[payloadEnd + 3])
        guard sent == crc else {
            throw PeerSyncError(.protocolError, "frame checksum mismatch (message \(number))")
        }

        // Find or create the incoming message this frame belongs to.
        var state: Incoming
        var events: [BLIPInboundEvent] = []
        switch type {
        case .request:
            if let existing = requests[number] {
                state = existing
            } else {
                guard number == lastRequestNumber + 1 else {
                    throw PeerSyncError(.protocolError,
                                        "request \(number) arrived out of order (expected \(lastRequestNumber + 1))")
                }
                lastRequestNumber = number
                state = Incoming(type: .request, flags: flags)
            }
        default:
            if let existing = responses[number] {
                state = existing
            } else {
                guard awaitingResponse.contains(number) else {
                    throw PeerSyncError(.protocolError, "response to unknown request \(number)")
                }
                state = Incoming(type: type, flags: flags)
            }
        }
        state.received += UInt64(counted)
        state.unacked += counted
        let streamed = type != .request && streamedResponses.contains(number)

        var body = payload[...]
        if !state.started {
            state.pending.append(contentsOf: body)
            body = []
            var i = state.pending.startIndex
            if let propsLength = try Varint.read(state.pending[...], at: &i) {
                guard propsLength <= UInt64(tuning.maxPropertiesSize) else {
                    throw PeerSyncError(.protocolError, "message properties of \(propsLength) bytes exceed the limit")
                }
                let propsEnd = i + Int(propsLength)
                if state.pending.count >= propsEnd {
                    let properties = try BLIPProperties.decode(state.pending[i..<propsEnd])
                    events.append(.started(type: state.type, number: number, flags: state.flags, properties: properties))
                    body = state.pending[propsEnd...]
                    state.pending = []
                    state.started = true
                }
            }
        }
        if streamed { events.append(.streamProgress(number: number, received: state.received)) }
        if !body.isEmpty {
            events.append(.body(type: state.type, number: number, bytes: Array(body)))
        }

        let more = flags.contains(.moreComing)
        if !more {
            guard state.started else {
                throw PeerSyncError(.protocolError, "message \(number) ended inside its properties")
            }
            events.append(.completed(type: state.type, number: number))
            if type == .request { requests[number] = nil } else {
                responses[number] = nil
                awaitingResponse.remove(number)
                streamedResponses.remove(number)
            }
        } else {
            if !streamed, state.unacked >= tuning.ackThreshold {
                state.unacked = 0
                events.append(.sendAck(BLIPFrameEncoder.ackFrame(
                    type: type == .request ? .ackRequest : .ackResponse, number: number, received: state.received)))
            }
            if type == .request { requests[number] = state } else { responses[number] = state }
        }
        return events
    }

    /// Messages partly received (for diagnostics and limits).
    var inProgressCount: Int { requests.count + responses.count }
}
