internal import CZlib
#if canImport(PeerSyncCore)
import PeerSyncCore
#endif

/// The one place zlib return codes become errors.
@inline(__always)
func checkZlib(_ code: Int32, _ operation: String, stream: UnsafeMutablePointer<z_stream>? = nil) throws(PeerSyncError) -> Int32 {
    switch code {
    case Z_OK, Z_STREAM_END, Z_BUF_ERROR:
        // Z_BUF_ERROR only means "no progress possible": not an error with sync flushing.
        return code
    default:
        var detail = "zlib error \(code)"
        if let msg = stream?.pointee.msg { detail += ": " + String(cString: msg) }
        let errorCode: PeerSyncError.Code = code == Z_DATA_ERROR ? .protocolError : .internalError
        throw PeerSyncError(errorCode, "\(operation) failed (\(detail))")
    }
}

/// CRC-32 (IEEE, zlib's `crc32`), continued from `crc`.
func crc32Update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
    guard let base = bytes.baseAddress, bytes.count > 0 else { return crc }
    return UInt32(truncatingIfNeeded: CZlib.crc32(UInt(crc), base.assumingMemoryBound(to: Bytef.self), UInt32(bytes.count)))
}

func crc32Update(_ crc: UInt32, _ bytes: [UInt8]) -> UInt32 {
    bytes.withUnsafeBytes { crc32Update(crc, $0) }
}

/// The trailer a sync flush ends with; BLIP strips it on send and re-adds it on receive.
let syncFlushTrailer: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

/// A persistent raw-DEFLATE compressor for one direction of one connection.
/// Not thread-safe: owned by the connection's outbound path, which serializes use.
final class Deflater {
    private let stream: UnsafeMutablePointer<z_stream>
    /// Output buffer reused by every frame (grown when a frame needs more).
    private var scratch: UnsafeMutableBufferPointer<UInt8>

    init(level: Int32 = 6) throws(PeerSyncError) {
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        scratch = .allocate(capacity: 16 * 1024)
        do {
            _ = try checkZlib(peersync_deflateInit2(stream, level, -15, 9), "deflateInit2", stream: stream)
        } catch {
            stream.deallocate()
            scratch.deallocate()
            throw error
        }
    }

    deinit {
        deflateEnd(stream)
        stream.deallocate()
        scratch.deallocate()
    }

    /// Compresses `input` with a sync flush and returns the output without the 00 00 FF FF
    /// trailer.
    func compress(_ input: ArraySlice<UInt8>) throws(PeerSyncError) -> [UInt8] {
        var out: [UInt8] = []
        try compress(input, appendingTo: &out)
        return out
    }

    /// Compresses `input` with a sync flush and appends the output, without the 00 00 FF FF
    /// trailer, to `out` (no intermediate array).
    func compress(_ input: ArraySlice<UInt8>, appendingTo out: inout [UInt8]) throws(PeerSyncError) {
        let bound = input.count + input.count / 100 + 64
        if scratch.count < bound { grow(to: bound, keeping: 0) }
        var produced = 0
        try input.withUnsafeBufferPointer { (inBuf) throws(PeerSyncError) in
            stream.pointee.next_in = inBuf.baseAddress.map { UnsafeMutablePointer(mutating: $0) }
            stream.pointee.avail_in = UInt32(inBuf.count)
            defer { stream.pointee.next_in = nil }
            while true {
                if produced == scratch.count { grow(to: scratch.count * 2, keeping: produced) }
                guard let base = scratch.baseAddress else { throw PeerSyncError(.internalError, "deflate has no buffer") }
                stream.pointee.next_out = base + produced
                stream.pointee.avail_out = UInt32(scratch.count - produced)
                let result = deflate(stream, Z_SYNC_FLUSH)
                produced = scratch.count - Int(stream.pointee.avail_out)
                _ = try checkZlib(result, "deflate", stream: stream)
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 { break }
            }
        }
        guard produced >= 4, scratch[produced - 4] == 0x00, scratch[produced - 3] == 0x00,
              scratch[produced - 2] == 0xFF, scratch[produced - 1] == 0xFF else {
            throw PeerSyncError(.internalError, "deflate output did not end with a sync-flush marker")
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[0..<(produced - 4)]))
    }

    private func grow(to count: Int, keeping: Int) {
        scratch = scratch.grown(to: count, keeping: keeping)
    }
}

/// A persistent raw-DEFLATE decompressor for one direction of one connection.
/// Not thread-safe: owned by the connection's inbound path, which serializes use.
final class Inflater {
    private let stream: UnsafeMutablePointer<z_stream>
    /// Upper bound on the bytes one frame may inflate to (guards against deflate bombs).
    let maxOutput: Int
    /// Input (payload + trailer) and output buffers reused by every frame.
    private var input: [UInt8] = []
    private var scratch: UnsafeMutableBufferPointer<UInt8>

    init(maxOutput: Int) throws(PeerSyncError) {
        self.maxOutput = maxOutput
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        scratch = .allocate(capacity: min(maxOutput, 16 * 1024))
        do {
            _ = try checkZlib(peersync_inflateInit2(stream, -15), "inflateInit2", stream: stream)
        } catch {
            stream.deallocate()
            scratch.deallocate()
            throw error
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deallocate()
        scratch.deallocate()
    }

    /// Inflates one frame's payload (the trailer is added here).
    func decompress(_ payload: ArraySlice<UInt8>) throws(PeerSyncError) -> [UInt8] {
        input.removeAll(keepingCapacity: true)
        input.append(contentsOf: payload)
        input.append(contentsOf: syncFlushTrailer)
        var produced = 0
        try input.withUnsafeMutableBufferPointer { (inBuf) throws(PeerSyncError) in
            stream.pointee.next_in = inBuf.baseAddress
            stream.pointee.avail_in = UInt32(inBuf.count)
            defer { stream.pointee.next_in = nil }
            while true {
                if produced == scratch.count {
                    guard scratch.count < maxOutput else {
                        throw PeerSyncError(.protocolError, "compressed frame inflates beyond \(maxOutput) bytes")
                    }
                    grow(to: min(scratch.count * 2, maxOutput), keeping: produced)
                }
                guard let base = scratch.baseAddress else { throw PeerSyncError(.internalError, "inflate has no buffer") }
                stream.pointee.next_out = base + produced
                stream.pointee.avail_out = UInt32(scratch.count - produced)
                let result = inflate(stream, Z_SYNC_FLUSH)
                produced = scratch.count - Int(stream.pointee.avail_out)
                let checked = try checkZlib(result, "inflate", stream: stream)
                if checked == Z_STREAM_END {
                    throw PeerSyncError(.protocolError, "deflate stream ended (BLIP streams never finish)")
                }
                if stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0 { break }
                if checked == Z_BUF_ERROR && stream.pointee.avail_out > 0 {
                    throw PeerSyncError(.protocolError, "truncated compressed frame")
                }
            }
        }
        return Array(UnsafeBufferPointer(rebasing: scratch[0..<produced]))
    }

    private func grow(to count: Int, keeping: Int) {
        scratch = scratch.grown(to: count, keeping: keeping)
    }
}

extension UnsafeMutableBufferPointer<UInt8> {
    /// A buffer of at least `count` bytes holding the first `keeping` bytes of this one, which
    /// is deallocated (the scratch buffers of ``Deflater`` and ``Inflater``).
    fileprivate func grown(to count: Int, keeping: Int) -> UnsafeMutableBufferPointer<UInt8> {
        let bigger = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: Swift.max(count, self.count))
        if keeping > 0, let from = baseAddress, let to = bigger.baseAddress {
            to.update(from: from, count: keeping)
        }
        deallocate()
        return bigger
    }
}
