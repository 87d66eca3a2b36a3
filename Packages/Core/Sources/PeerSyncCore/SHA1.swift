/// SHA-1 (FIPS 180-4), incremental. Used for revision digests and blob digests, where the
/// protocol fixes the algorithm; it is not used for any security decision.
public struct SHA1: Sendable {
    private var state: (UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
    private var pending: [UInt8] = []
    private var length: UInt64 = 0

    /// A digest with no input yet: ``update(_:)`` it, then ``finalize()``.
    public init() { pending.reserveCapacity(64) }

    /// Feeds more bytes.
    public mutating func update(_ bytes: some Sequence<UInt8>) {
        let done: Void? = bytes.withContiguousStorageIfAvailable { buffer in
            update(buffer: UnsafeRawBufferPointer(buffer))
        }
        if done != nil { return }
        for byte in bytes {
            length &+= 1
            pending.append(byte)
            if pending.count == 64 {
                processBlock(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Feeds more bytes from a contiguous buffer (faster path for large inputs).
    public mutating func update(buffer: UnsafeRawBufferPointer) {
        var offset = 0
        length &+= UInt64(buffer.count)
        if !pending.isEmpty {
            let take = min(64 - pending.count, buffer.count)
            pending.append(contentsOf: buffer[0..<take])
            offset = take
            if pending.count == 64 {
                processBlock(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
        while buffer.count - offset >= 64 {
            processBlock(UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + 64]))
            offset += 64
        }
        if offset < buffer.count { pending.append(contentsOf: buffer[offset...]) }
    }

    /// Finishes and returns the 20-byte digest.
    public consuming func finalize() -> [UInt8] {
        var bitLength = length &* 8
        var tail = pending
        tail.append(0x80)
        while tail.count % 64 != 56 { tail.append(0) }
        var lengthBytes = [UInt8](repeating: 0, count: 8)
        for i in (0..<8).reversed() { lengthBytes[i] = UInt8(truncatingIfNeeded: bitLength); bitLength >>= 8 }
        tail.append(contentsOf: lengthBytes)
        var i = 0
        while i < tail.count { processBlock(tail[i..<i + 64]); i += 64 }
        var out: [UInt8] = []
        out.reserveCapacity(20)
        for word in [state.0, state.1, state.2, state.3, state.4] {
            out.append(UInt8(truncatingIfNeeded: word >> 24))
            out.append(UInt8(truncatingIfNeeded: word >> 16))
            out.append(UInt8(truncatingIfNeeded: word >> 8))
            out.append(UInt8(truncatingIfNeeded: word))
        }
        return out
    }

    /// One-shot digest.
    public static func hash(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        var h = SHA1()
        h.update(bytes)
        return h.finalize()
    }

    private mutating func processBlock(_ block: ArraySlice<UInt8>) {
        block.withUnsafeBytes { processBlock($0) }
    }

    private mutating func processBlock(_ block: [UInt8]) {
        block.withUnsafeBytes { processBlock($0) }
    }

    /// One 64-byte block. Non-generic, on raw pointers and split into the four round groups,
    /// so even unoptimized (debug) builds hash tens of MB per second.
    private mutating func processBlock(_ block: UnsafeRawBufferPointer) {
        state = withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { buffer in
            let w = buffer.baseAddress.unsafelyUnwrapped
            let bytes = block.baseAddress.unsafelyUnwrapped
            for t in 0..<16 {
                w[t] = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 4 * t, as: UInt32.self))
            }
            for t in 16..<80 {
                let x = w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]
                w[t] = x << 1 | x >> 31
            }
            var (a, b, c, d, e) = state
            var t = 0
            while t < 20 {
                let temp = (a << 5 | a >> 27) &+ ((b & c) | (~b & d)) &+ e &+ 0x5A82_7999 &+ w[t]
                e = d; d = c; c = b << 30 | b >> 2; b = a; a = temp
                t &+= 1
            }
            while t < 40 {
                let temp = (a << 5 | a >> 27) &+ (b ^ c ^ d) &+ e &+ 0x6ED9_EBA1 &+ w[t]
                e = d; d = c; c = b << 30 | b >> 2; b = a; a = temp
                t &+= 1
            }
            while t < 60 {
                let temp = (a << 5 | a >> 27) &+ ((b & c) | (b & d) | (c & d)) &+ e &+ 0x8F1B_BCDC &+ w[t]
                e = d; d = c; c = b << 30 | b >> 2; b = a; a = temp
                t &+= 1
            }
            while t < 80 {
                let temp = (a << 5 | a >> 27) &+ (b ^ c ^ d) &+ e &+ 0xCA62_C1D6 &+ w[t]
                e = d; d = c; c = b << 30 | b >> 2; b = a; a = temp
                t &+= 1
            }
            return (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d, state.4 &+ e)
        }
    }
}

extension Sequence where Element == UInt8 {
    /// Lowercase hexadecimal.
    ///
    /// Inlinable, so that callers in other modules get a version specialized for their
    /// sequence (a revision tree decodes one per stored revision ID; the generic version
    /// went through the sequence's witness table for every byte).
    @inlinable
    public var hexString: String {
        var out: [UInt8] = []
        out.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            out.append(_hexDigit(byte >> 4))
            out.append(_hexDigit(byte & 0xF))
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Collection where Element == UInt8 {
    /// Lowercase hexadecimal, written straight into the string's storage (one allocation;
    /// the `Sequence` version's buffer made two).
    @inlinable
    public var hexString: String {
        let digits = count * 2
        return String(unsafeUninitializedCapacity: digits) { buffer in
            var i = 0
            for byte in self {
                buffer[i] = _hexDigit(byte >> 4)
                buffer[i &+ 1] = _hexDigit(byte & 0xF)
                i &+= 2
            }
            return i
        }
    }
}

/// The lowercase hexadecimal digit of `nibble` (0–15).
@inlinable
func _hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
}
