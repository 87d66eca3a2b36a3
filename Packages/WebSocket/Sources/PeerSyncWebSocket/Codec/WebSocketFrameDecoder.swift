// RFC 6455 incremental frame decoder and message assembler. Pure and synchronous; stdlib +
// PeerSyncCore error type only (compiled into the fuzzers by Tools/fuzz/run).

#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

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
/// Errors are ``PeerSyncError``s; ``PeerSyncError/webSocketCloseCode`` gives the close code to
/// send. After an error, and after a close frame, the decoder yields nothing more.
/// Not thread-safe: one owner feeds it and pulls events.
public struct WebSocketFrameDecoder: Sendable {
    /// What a complete frame or message means to the connection.
    public enum Event: Sendable, Equatable {
        case text(String)
        case binary([UInt8])
        case ping([UInt8])
        case pong([UInt8])
        /// A close frame; `code` is nil when the frame had no payload (status 1005).
        case close(code: UInt16?, reason: String)
    }

    public let role: WebSocketRole
    /// The largest frame or message payload accepted, in bytes.
    public let maxMessageSize: Int

    private var input: [UInt8] = []
    private var inputIndex = 0

    private enum State: Sendable {
        case header
        case payload
        case done
    }
    private var state: State = .header

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

    public init(role: WebSocketRole, maxMessageSize: Int) {
        self.role = role
        self.maxMessageSize = max(0, maxMessageSize)
    }

    /// Bytes received but not yet consumed by ``next()``.
    public var bufferedByteCount: Int { input.count - inputIndex }

    /// Whether the decoder stopped (after a close frame or an error).
    public var isFinished: Bool {
        if case .done = state { return true }
        return false
    }

    /// Adds received bytes. Call ``next()`` until it returns nil afterwards.
    public mutating func feed(_ bytes: [UInt8]) {
        guard !bytes.isEmpty, !isFinished else { return }
        if inputIndex >= input.count {
            input = bytes
            inputIndex = 0
        } else {
            if inputIndex > 0 {
                input.removeSubrange(0..<inputIndex)
                inputIndex = 0
            }
            input.append(contentsOf: bytes)
        }
    }

    /// The next complete event, or nil if more bytes are needed (or the decoder finished).
    public mutating func next() throws(PeerSyncError) -> Event? {
        do {
            let event = try step()
            if inputIndex >= input.count {
                // Release the receive buffer: an idle connection holds no input memory.
                input = []
                inputIndex = 0
            }
            return event
        } catch {
            state = .done
            input = []
            inputIndex = 0
            message = []
            throw error
        }
    }

    private mutating func step() throws(PeerSyncError) -> Event? {
        while true {
            switch state {
            case .done:
                return nil
            case .header:
                guard try readHeader() else { return nil }
                if frameRemaining == 0, let event = try finishFrame() { return event }
            case .payload:
                let available = input.count - inputIndex
                if available == 0 { return nil }
                let take = min(available, frameRemaining)
                let range = inputIndex..<(inputIndex + take)
                if frameOpcode.isControl {
                    let start = frameControl.count
                    frameControl.append(contentsOf: input[range])
                    Self.unmask(&frameControl, from: start, mask: frameMask, offset: frameMaskOffset)
                } else {
                    let start = message.count
                    message.append(contentsOf: input[range])
                    Self.unmask(&message, from: start, mask: frameMask, offset: frameMaskOffset)
                }
                inputIndex += take
                frameRemaining -= take
                frameMaskOffset = (frameMaskOffset + take) & 3
                if frameRemaining == 0 {
                    state = .header
                    if let event = try finishFrame() { return event }
                }
            }
        }
    }

    private static func unmask(_ buffer: inout [UInt8], from start: Int,
                               mask: (UInt8, UInt8, UInt8, UInt8)?, offset: Int) {
        guard let mask, start < buffer.count else { return }
        buffer.withUnsafeMutableBytes { raw in
            applyMask(UnsafeMutableRawBufferPointer(rebasing: raw[start...]), key: mask, offset: offset)
        }
    }

    /// Parses a frame header if enough bytes are buffered; validates it.
    private mutating func readHeader() throws(PeerSyncError) -> Bool {
        let available = input.count - inputIndex
        guard available >= 2 else { return false }
        let b0 = input[inputIndex], b1 = input[inputIndex + 1]
        let masked = b1 & 0x80 != 0
        let len7 = Int(b1 & 0x7F)
        let extra = len7 == 126 ? 2 : len7 == 127 ? 8 : 0
        let headerLength = 2 + extra + (masked ? 4 : 0)
        guard available >= headerLength else {
            // Validate what we can early, so a hostile peer cannot make us wait for nothing.
            try validateFirstBytes(b0, masked: masked)
            return false
        }
        try validateFirstBytes(b0, masked: masked)
        guard let opcode = WebSocketOpcode(rawValue: b0 & 0x0F) else {
            throw PeerSyncError(.protocolError, "reserved WebSocket opcode \(b0 & 0x0F)")
        }
        let fin = b0 & 0x80 != 0
        var length: UInt64 = UInt64(len7)
        var i = inputIndex + 2
        if len7 == 126 {
            length = UInt64(input[i]) << 8 | UInt64(input[i + 1])
            i += 2
        } else if len7 == 127 {
            length = 0
            for _ in 0..<8 { length = length << 8 | UInt64(input[i]); i += 1 }
            if length & (1 << 63) != 0 {
                throw PeerSyncError(.protocolError, "WebSocket frame length has its most significant bit set")
            }
        }
        if opcode.isControl {
            if !fin { throw PeerSyncError(.protocolError, "fragmented WebSocket control frame") }
            if length > 125 {
                throw PeerSyncError(.protocolError, "WebSocket control frame payload of \(length) bytes (max 125)")
            }
        } else if opcode == .continuation {
            if messageOpcode == nil {
                throw PeerSyncError(.protocolError, "WebSocket continuation frame without a message to continue")
            }
        } else if messageOpcode != nil {
            throw PeerSyncError(.protocolError, "new WebSocket data frame inside a fragmented message")
        }
        if !opcode.isControl {
            let already = opcode == .continuation ? message.count : 0
            if length > UInt64(maxMessageSize) || UInt64(already) + length > UInt64(maxMessageSize) {
                throw PeerSyncError(.tooLarge, "WebSocket message larger than \(maxMessageSize) bytes",
                                    context: ["limit": String(maxMessageSize)])
            }
        }
        if masked {
            frameMask = (input[i], input[i + 1], input[i + 2], input[i + 3])
            i += 4
        } else {
            frameMask = nil
        }
        inputIndex = i
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
        return true
    }

    private func validateFirstBytes(_ b0: UInt8, masked: Bool) throws(PeerSyncError) {
        if b0 & 0x70 != 0 {
            throw PeerSyncError(.protocolError, "WebSocket frame with reserved bits set (no extension negotiated)")
        }
        switch role {
        case .server where !masked:
            throw PeerSyncError(.protocolError, "unmasked WebSocket frame from a client")
        case .client where masked:
            throw PeerSyncError(.protocolError, "masked WebSocket frame from a server")
        default:
            break
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
            input = []
            inputIndex = 0
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
