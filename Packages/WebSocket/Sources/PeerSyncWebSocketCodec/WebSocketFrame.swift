// RFC 6455 frame encoding, synchronous.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

/// A WebSocket frame opcode (RFC 6455 §5.2).
public enum WebSocketOpcode: UInt8, Sendable, CaseIterable {
    /// A further fragment of the message being sent.
    case continuation = 0x0
    /// The first (or only) frame of a text message.
    case text = 0x1
    /// The first (or only) frame of a binary message.
    case binary = 0x2
    /// Starts or answers the close handshake.
    case close = 0x8
    /// Asks the peer for a pong with the same payload.
    case ping = 0x9
    /// Answers a ping (or, unsolicited, a one-way heartbeat).
    case pong = 0xA

    /// Close, ping and pong are control frames: at most 125 payload bytes, never fragmented.
    public var isControl: Bool { rawValue & 0x8 != 0 }
}

/// Which end of a WebSocket connection a codec works for. A client masks what it sends and
/// requires unmasked frames from the server; a server is the reverse (RFC 6455 §5.1).
public enum WebSocketRole: Sendable, Hashable {
    /// The end that sent the upgrade request: masks its frames.
    case client
    /// The end that accepted the upgrade: never masks.
    case server
}

/// Close codes that may appear on the wire (RFC 6455 §7.4 and the IANA registry):
/// 1000–1003, 1007–1014, and the application/library ranges 3000–4999.
public func isValidWireCloseCode(_ code: UInt16) -> Bool {
    switch code {
    case 1000...1003, 1007...1014, 3000...4999: true
    default: false
    }
}

/// Serializes frames. All functions are pure; a client passes a fresh random `mask` for every
/// frame, a server passes nil.
public enum WebSocketFrameEncoder {
    /// The size of a frame header for a payload of `length` bytes.
    public static func headerSize(payloadLength length: Int, masked: Bool) -> Int {
        (length < 126 ? 2 : length <= 0xFFFF ? 4 : 10) + (masked ? 4 : 0)
    }

    /// Encodes one frame: header followed by the (masked, if `mask` is given) payload.
    public static func encode(opcode: WebSocketOpcode, fin: Bool = true, payload: [UInt8],
                              mask: UInt32?) -> [UInt8] {
        payload.withUnsafeBytes { encode(opcode: opcode, fin: fin, payload: $0, mask: mask) }
    }

    /// Encodes one frame from a raw buffer (avoids an intermediate copy of large payloads).
    public static func encode(opcode: WebSocketOpcode, fin: Bool = true, payload: UnsafeRawBufferPointer,
                              mask: UInt32?) -> [UInt8] {
        let total = headerSize(payloadLength: payload.count, masked: mask != nil) + payload.count
        return [UInt8](unsafeUninitializedCapacity: total) { out, count in
            count = encode(into: UnsafeMutableRawBufferPointer(out), opcode: opcode, fin: fin, payload: payload, mask: mask)
        }
    }

    /// Writes one frame (header, then the payload masked if `mask` is given) at the start of
    /// `out`, which must hold ``headerSize(payloadLength:masked:)`` + `payload.count` bytes;
    /// returns the number of bytes written (0 if `out` is too small).
    public static func encode(into out: UnsafeMutableRawBufferPointer, opcode: WebSocketOpcode, fin: Bool = true,
                              payload: UnsafeRawBufferPointer, mask: UInt32?) -> Int {
        let length = payload.count
        let header = headerSize(payloadLength: length, masked: mask != nil)
        guard out.count >= header + length, let dst = out.baseAddress else { return 0 }
        var i = 0
        out[i] = (fin ? 0x80 : 0) | opcode.rawValue; i += 1
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        if length < 126 {
            out[i] = maskBit | UInt8(length); i += 1
        } else if length <= 0xFFFF {
            out[i] = maskBit | 126
            out[i + 1] = UInt8(truncatingIfNeeded: length >> 8)
            out[i + 2] = UInt8(truncatingIfNeeded: length)
            i += 3
        } else {
            out[i] = maskBit | 127; i += 1
            let l = UInt64(length)
            for shift in stride(from: 56, through: 0, by: -8) {
                out[i] = UInt8(truncatingIfNeeded: l >> UInt64(shift)); i += 1
            }
        }
        if let mask {
            out[i] = UInt8(truncatingIfNeeded: mask >> 24)
            out[i + 1] = UInt8(truncatingIfNeeded: mask >> 16)
            out[i + 2] = UInt8(truncatingIfNeeded: mask >> 8)
            out[i + 3] = UInt8(truncatingIfNeeded: mask)
            i += 4
        }
        if length > 0, let src = payload.baseAddress {
            if let mask {
                copyMasked(from: src, to: dst + i, count: length, key: maskKeyBytes(mask))
            } else {
                (dst + i).copyMemory(from: src, byteCount: length)
            }
        }
        return header + length
    }

    /// The payload of a close frame: the code (big endian) followed by the UTF-8 reason, cut
    /// to fit the 125-byte control frame limit on a character boundary.
    public static func closePayload(code: UInt16?, reason: String) -> [UInt8] {
        guard let code else { return [] }
        var out: [UInt8] = [UInt8(code >> 8), UInt8(code & 0xFF)]
        var reasonBytes: [UInt8] = []
        for scalar in reason.unicodeScalars {
            let encoded = Array(String(scalar).utf8)
            if reasonBytes.count + encoded.count > 123 { break }
            reasonBytes.append(contentsOf: encoded)
        }
        out.append(contentsOf: reasonBytes)
        return out
    }
}

/// The 4 mask bytes of a 32-bit key, most significant first (the wire order).
@inline(__always)
func maskKeyBytes(_ key: UInt32) -> (UInt8, UInt8, UInt8, UInt8) {
    (UInt8(truncatingIfNeeded: key >> 24), UInt8(truncatingIfNeeded: key >> 16),
     UInt8(truncatingIfNeeded: key >> 8), UInt8(truncatingIfNeeded: key))
}

/// Copies `count` bytes from `src` to `dst`, XORing them with the mask `key` (mask position 0
/// at `src`): one pass, 8 bytes at a time.
func copyMasked(from src: UnsafeRawPointer, to dst: UnsafeMutableRawPointer, count: Int,
                key: (UInt8, UInt8, UInt8, UInt8)) {
    var wordKey: UInt64 = 0
    withUnsafeMutableBytes(of: &wordKey) { w in
        w[0] = key.0; w[1] = key.1; w[2] = key.2; w[3] = key.3
        w[4] = key.0; w[5] = key.1; w[6] = key.2; w[7] = key.3
    }
    var i = 0
    while i + 32 <= count {
        let a = src.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        let b = src.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)
        let c = src.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self)
        let d = src.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)
        dst.storeBytes(of: a ^ wordKey, toByteOffset: i, as: UInt64.self)
        dst.storeBytes(of: b ^ wordKey, toByteOffset: i + 8, as: UInt64.self)
        dst.storeBytes(of: c ^ wordKey, toByteOffset: i + 16, as: UInt64.self)
        dst.storeBytes(of: d ^ wordKey, toByteOffset: i + 24, as: UInt64.self)
        i += 32
    }
    while i + 8 <= count {
        dst.storeBytes(of: src.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ wordKey, toByteOffset: i, as: UInt64.self)
        i += 8
    }
    let k = [key.0, key.1, key.2, key.3]
    while i < count {
        dst.storeBytes(of: src.load(fromByteOffset: i, as: UInt8.self) ^ k[i & 3], toByteOffset: i, as: UInt8.self)
        i += 1
    }
}

/// XORs `buffer` in place with the mask `key`, starting at mask position `offset` (0–3).
/// Works 8 bytes at a time; masking is its own inverse.
func applyMask(_ buffer: UnsafeMutableRawBufferPointer, key: (UInt8, UInt8, UInt8, UInt8), offset: Int) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    let k = [key.0, key.1, key.2, key.3]
    let count = buffer.count
    var i = 0
    // Rotate the key so that position i = 0 uses key[offset].
    let r0 = k[(offset) & 3], r1 = k[(offset + 1) & 3], r2 = k[(offset + 2) & 3], r3 = k[(offset + 3) & 3]
    // 8-byte word of the rotated key in memory order (little- or big-endian independent).
    var wordKey: UInt64 = 0
    withUnsafeMutableBytes(of: &wordKey) { w in
        w[0] = r0; w[1] = r1; w[2] = r2; w[3] = r3; w[4] = r0; w[5] = r1; w[6] = r2; w[7] = r3
    }
    while i + 32 <= count {
        let a = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        let b = base.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)
        let c = base.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self)
        let d = base.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)
        base.storeBytes(of: a ^ wordKey, toByteOffset: i, as: UInt64.self)
        base.storeBytes(of: b ^ wordKey, toByteOffset: i + 8, as: UInt64.self)
        base.storeBytes(of: c ^ wordKey, toByteOffset: i + 16, as: UInt64.self)
        base.storeBytes(of: d ^ wordKey, toByteOffset: i + 24, as: UInt64.self)
        i += 32
    }
    while i + 8 <= count {
        let v = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        base.storeBytes(of: v ^ wordKey, toByteOffset: i, as: UInt64.self)
        i += 8
    }
    let rk = [r0, r1, r2, r3]
    while i < count {
        let p = base.advanced(by: i).assumingMemoryBound(to: UInt8.self)
        p.pointee ^= rk[i & 3]
        i += 1
    }
}
