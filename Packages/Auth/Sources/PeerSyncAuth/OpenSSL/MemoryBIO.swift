internal import COpenSSL
import PeerSyncCore

/// An owned memory `BIO*`, freed in `deinit`; used only within one synchronous call.
final class MemoryBIO {
    let pointer: OpaquePointer

    init() throws(PeerSyncError) {
        pointer = try OpenSSL.check(BIO_new(BIO_s_mem()), "BIO_new")
    }

    /// A BIO holding `bytes`; throws ``PeerSyncError/Code/tooLarge`` beyond 2 GiB.
    convenience init(bytes: [UInt8]) throws(PeerSyncError) {
        try self.init()
        if !bytes.isEmpty {
            guard bytes.count < Int(Int32.max) else { throw PeerSyncError(.tooLarge, "input too large") }
            let written = bytes.withUnsafeBytes { BIO_write(pointer, $0.baseAddress, Int32($0.count)) }
            try OpenSSL.check(written, "BIO_write", succeeded: { $0 == Int32(bytes.count) })
        }
    }

    deinit { BIO_free(pointer) }

    /// Reads everything pending.
    func readAll() -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { BIO_read(pointer, $0.baseAddress, Int32($0.count)) }
            if n <= 0 { break }
            out.append(contentsOf: chunk[0..<Int(n)])
        }
        return out
    }
}
