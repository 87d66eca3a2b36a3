/// Unsigned LEB128, as BLIP uses for message numbers, flags, property lengths and ACK counts.
enum Varint {
    static func append(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// How many bytes `append` writes for `value`.
    static func size(of value: UInt64) -> Int {
        var v = value, n = 1
        while v >= 0x80 { v >>= 7; n += 1 }
        return n
    }

    static func encode(_ value: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        append(value, to: &out)
        return out
    }

    /// Reads a varint at `index`, advancing it. Returns nil when the bytes end first; throws on
    /// a varint longer than 10 bytes or overflowing 64 bits.
    static func read(_ bytes: ArraySlice<UInt8>, at index: inout Int) throws(PeerSyncError) -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        var i = index
        while i < bytes.endIndex {
            let byte = bytes[i]
            i += 1
            if shift == 63 && byte > 1 {
                throw PeerSyncError(.protocolError, "varint overflows 64 bits")
            }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                index = i
                return result
            }
            shift += 7
            if shift > 63 { throw PeerSyncError(.protocolError, "varint longer than 10 bytes") }
        }
        return nil
    }
}

#if canImport(PeerSyncCore)
import PeerSyncCore
#endif
