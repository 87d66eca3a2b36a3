// RFC 6455 incremental frame decoder and message assembler, synchronous.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

/// Turns received bytes into WebSocket events, enforcing the protocol rules of the receiving
/// role:
/// - masking: a server requires masked frames, a client requires unmasked ones;
/// - reserved bits must be 0 (no extension is negotiated), opcodes must be defined;
/// - control frames are at most 125 bytes and never fragmented; a close frame carries either
///   nothing or a valid code and a UTF-8 reason;
/// - fragmentation: continuations only inside a message, no new data frame inside one;
/// - size: a frame or a reassembled message longer than `maxMessageSize` fails with
///   `.tooLarge` as soon as its header is read (nothing is buffered for it);
/// - text messages must be valid UTF-8 (`.invalidUTF8`).
///
/// Errors are `PeerSyncError`s; `PeerSyncError.webSocketCloseCode` gives the close code to
/// send. After an error, and after a close frame, the decoder yields nothing more.
/// Not thread-safe: one owner feeds it and pulls events.
public struct WebSocketFrameDecoder: Sendable {
    /// What a complete frame or message means to the connection.
    public enum Event: Sendable, Equatable {
        /// A complete text message (valid UTF-8).
        case text(String)
        /// A complete binary message.
        case binary([UInt8])
        /// A ping, with its payload (to echo in the pong).
        case ping([UInt8])
        /// A pong, with its payload.
        case pong([UInt8])
        /// A close frame; `code` is nil when the frame had no payload (status 1005).
        case close(code: UInt16?, reason: String)
    }

    /// The end this decoder reads for: decides which frames must be masked.
    public let role: WebSocketRole
    /// The largest frame or message payload accepted, in bytes.
    public let maxMessageSize: Int

    private enum State: Sendable {
        case header
        case payload
        case done
    }
    private var state: State = .header
    /// The start of a header split across inputs (at most 13 bytes).
    private var headerBytes: [UInt8] = []

    // The frame being read.
    private var frameFin = false
    private var frameOpcode: WebSocketOpcode = .continuation
    private var frameMask: (UInt8, UInt8, UInt8, UInt8)?
    private var frameRemaining = 0
    private var frameMaskOffset = 0
    private var frameControl: [UInt8] = []

    // The message being reassembled.
    private var messageOpcode: WebSocketOpcode?
    private var message: [UInt8] = []

    // `feed`/`next`: events decoded but not yet returned, and a deferred error.
    private var pending: [Event] = []
    private var pendingHead = 0
    private var pendingError: PeerSyncError?

    /// A decoder for `role` accepting payloads up to `maxMessageSize` bytes (negative means 0).
    public init(role: WebSocketRole, maxMessageSize: Int) {
        self.role = role
        self.maxMessageSize = max(0, maxMessageSize)
    }

    /// Bytes of a partial frame header held until more input arrives.
    public var bufferedByteCount: Int { headerBytes.count }

    /// Bytes held for input not yet returned as an event: the payload read so far of an
    /// unfinished data message (all its fragments) or control frame, and a partial header.
    /// 0 between messages. Connections report it to a `PartialMessageBudget`.
    public var partialMessageByteCount: Int { message.count + frameControl.count + headerBytes.count }

    /// Stops decoding: drops any partial frame and message (freeing their buffers) and yields
    /// nothing more, as after an error. For a connection that refuses to buffer more.
    public mutating func stop() {
        state = .done
        headerBytes = []
        message = []
        frameControl = []
        messageOpcode = nil
    }

    /// Whether the decoder stopped (after a close frame, an error or ``stop()``).
    public var isFinished: Bool {
        if case .done = state { return true }
        return false
    }

    /// Adds received bytes (decoding them at once). Call ``next()`` until it returns nil.
    public mutating func feed(_ bytes: [UInt8]) {
        guard !bytes.isEmpty, pendingError == nil else { return }
        var events: [Event] = []
        let failure = bytes.withUnsafeBytes { raw -> PeerSyncError? in
            do throws(PeerSyncError) {
                try decode(raw, into: &events)
                return nil
            } catch {
                return error
            }
        }
        if pendingHead >= pending.count {
            pending = events
            pendingHead = 0
        } else {
            pending.append(contentsOf: events)
        }
        pendingError = failure
    }

    /// The next event, or nil if more bytes are needed (or the decoder finished). Events
    /// decoded before an error are returned first; then the error is thrown once.
    public mutating func next() throws(PeerSyncError) -> Event? {
        if pendingHead < pending.count {
            let event = pending[pendingHead]
            pendingHead += 1
            if pendingHead == pending.count {
                pending = []
                pendingHead = 0
            }
            return event
        }
        if let error = pendingError {
            pendingError = nil
            throw error
        }
        return nil
    }

    /// Decodes `input` completely (it need not hold whole frames: partial headers and
    /// payloads are kept for the next call) and appends the events to `events`. On an error,
    /// the events before it are in `events` and the decoder is finished.
    public mutating func decode(_ input: UnsafeRawBufferPointer, into events: inout [Event]) throws(PeerSyncError) {
        do {
            try decodeCore(input, &events)
        } catch {
            state = .done
            headerBytes = []
            message = []
            frameControl = []
            throw error
        }
    }

    private mutating func decodeCore(_ input: UnsafeRawBufferPointer, _ events: inout [Event]) throws(PeerSyncError) {
        var p = 0
        let n = input.count
        while true {
            switch state {
            case .done:
                return
            case .header:
                if headerBytes.isEmpty {
                    guard p < n else { return }
                    switch parseHeader(UnsafeRawBufferPointer(rebasing: input[p..<n])) {
                    case .failed(let error):
                        throw error
                    case .incomplete:
                        headerBytes.append(contentsOf: input[p..<n])
                        return
                    case .parsed(let length):
                        p += length
                    }
                } else {
                    // Complete a header split across inputs (a header is at most 14 bytes).
                    let take = min(14 - headerBytes.count, n - p)
                    var combined = headerBytes
                    combined.append(contentsOf: input[p..<(p + take)])
                    let outcome = combined.withUnsafeBytes { parseHeader($0) }
                    switch outcome {
                    case .failed(let error):
                        throw error
                    case .incomplete:
                        headerBytes = combined
                        return  // all of `input` was consumed
                    case .parsed(let length):
                        p += length - headerBytes.count
                        headerBytes = []
                    }
                }
                if frameRemaining == 0, let event = try finishFrame() { events.append(event) }
            case .payload:
                guard p < n else { return }
                let take = min(frameRemaining, n - p)
                let piece = UnsafeRawBufferPointer(rebasing: input[p..<(p + take)])
                if frameOpcode.isControl {
                    Self.append(piece, to: &frameControl, mask: frameMask, offset: frameMaskOffset)
                } else {
                    Self.append(piece, to: &message, mask: frameMask, offset: frameMaskOffset)
                }
                p += take
                frameRemaining -= take
                frameMaskOffset = (frameMaskOffset + take) & 3
                if frameRemaining == 0 {
                    state = .header
                    if let event = try finishFrame() { events.append(event) }
                }
            }
        }
    }

    /// Appends `piece` to `buffer`, unmasking it with `mask` from mask position `offset`.
    private static func append(_ piece: UnsafeRawBufferPointer, to buffer: inout [UInt8],
                               mask: (UInt8, UInt8, UInt8, UInt8)?, offset: Int) {
        let start = buffer.count
        buffer.append(contentsOf: piece)
        guard let mask, !piece.isEmpty else { return }
        buffer.withUnsafeMutableBytes { raw in
            applyMask(UnsafeMutableRawBufferPointer(rebasing: raw[start...]), key: mask, offset: offset)
        }
    }

    private enum HeaderOutcome {
        case incomplete
        case parsed(Int)
        case failed(PeerSyncError)
    }

    /// Parses and validates a frame header at the start of `bytes`; on success sets the frame
    /// fields, enters the payload state and returns the header length.
    private mutating func parseHeader(_ bytes: UnsafeRawBufferPointer) -> HeaderOutcome {
        let available = bytes.count
        guard available >= 2 else { return .incomplete }
        let b0 = bytes[0], b1 = bytes[1]
        let masked = b1 & 0x80 != 0
        let len7 = Int(b1 & 0x7F)
        let extra = len7 == 126 ? 2 : len7 == 127 ? 8 : 0
        let headerLength = 2 + extra + (masked ? 4 : 0)
        // Validate what we can early, so a hostile peer cannot make us wait for nothing.
        if let error = validateFirstBytes(b0, masked: masked) { return .failed(error) }
        guard available >= headerLength else { return .incomplete }
        guard let opcode = WebSocketOpcode(rawValue: b0 & 0x0F) else {
            return .failed(PeerSyncError(.protocolError, "reserved WebSocket opcode \(b0 & 0x0F)"))
        }
        let fin = b0 & 0x80 != 0
        var length = UInt64(len7)
        var i = 2
        if len7 == 126 {
            length = UInt64(bytes[2]) << 8 | UInt64(bytes[3])
            i = 4
        } else if len7 == 127 {
            length = 0
            for k in 2..<10 { length = length << 8 | UInt64(bytes[k]) }
            i = 10
            if length & (1 << 63) != 0 {
                return .failed(PeerSyncError(.protocolError, "WebSocket frame length has its most significant bit set"))
            }
        }
        if opcode.isControl {
            if !fin { return .failed(PeerSyncError(.protocolError, "fragmented WebSocket control frame")) }
            if length > 125 {
                return .failed(PeerSyncError(.protocolError, "WebSocket control frame payload of \(length) bytes (max 125)"))
            }
        } else if opcode == .continuation {
            if messageOpcode == nil {
                return .failed(PeerSyncError(.protocolError, "WebSocket continuation frame without a message to continue"))
            }
        } else if messageOpcode != nil {
            return .failed(PeerSyncError(.protocolError, "new WebSocket data frame inside a fragmented message"))
        }
        if !opcode.isControl {
            let already = opcode == .continuation ? message.count : 0
            if length > UInt64(maxMessageSize) || UInt64(already) + length > UInt64(maxMessageSize) {
                return .failed(PeerSyncError(.tooLarge, "WebSocket message larger than \(maxMessageSize) bytes",
                                             context: ["limit": String(maxMessageSize)]))
            }
        }
        if masked {
            frameMask = (bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3])
            i += 4
        } else {
            frameMask = nil
        }
        frameFin = fin
        frameOpcode = opcode
        frameRemaining = Int(length)
        frameMaskOffset = 0
        if opcode.isControl {
            frameControl = []
            frameControl.reserveCapacity(Int(length))
        } else {
            if opcode != .continuation {
                messageOpcode = opcode
                message = []
            }
            // Reserve at most 1 MiB ahead: a peer announcing a large frame and sending nothing
            // does not make us allocate the whole frame.
            message.reserveCapacity(message.count + min(Int(length), 1 << 20))
        }
        state = .payload
        return .parsed(i)
    }

    private func validateFirstBytes(_ b0: UInt8, masked: Bool) -> PeerSyncError? {
        if b0 & 0x70 != 0 {
            return PeerSyncError(.protocolError, "WebSocket frame with reserved bits set (no extension negotiated)")
        }
        switch role {
        case .server where !masked:
            return PeerSyncError(.protocolError, "unmasked WebSocket frame from a client")
        case .client where masked:
            return PeerSyncError(.protocolError, "masked WebSocket frame from a server")
        default:
            return nil
        }
    }

    /// Called when the current frame's payload is complete.
    private mutating func finishFrame() throws(PeerSyncError) -> Event? {
        state = .header
        switch frameOpcode {
        case .ping:
            let payload = frameControl
            frameControl = []
            return .ping(payload)
        case .pong:
            let payload = frameControl
            frameControl = []
            return .pong(payload)
        case .close:
            let payload = frameControl
            frameControl = []
            state = .done
            if payload.isEmpty { return .close(code: nil, reason: "") }
            if payload.count == 1 {
                throw PeerSyncError(.protocolError, "WebSocket close frame with a 1-byte payload")
            }
            let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
            guard isValidWireCloseCode(code) else {
                throw PeerSyncError(.protocolError, "invalid WebSocket close code \(code)")
            }
            guard let reason = String(validating: payload[2...], as: UTF8.self) else {
                throw PeerSyncError(.invalidUTF8, "WebSocket close reason is not valid UTF-8")
            }
            return .close(code: code, reason: reason)
        case .text, .binary, .continuation:
            guard frameFin, let opcode = messageOpcode else { return nil }
            let payload = message
            message = []
            messageOpcode = nil
            if opcode == .text {
                guard let text = String(validating: payload, as: UTF8.self) else {
                    throw PeerSyncError(.invalidUTF8, "WebSocket text message is not valid UTF-8")
                }
                return .text(text)
            }
            return .binary(payload)
        }
    }
}
