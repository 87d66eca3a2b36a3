import Synchronization

/// A heap buffer for socket reads, lent by a small process-wide pool so that busy connections
/// reuse a few buffers and idle ones hold none. `@unchecked Sendable`: the memory is only
/// touched by the one task that took the buffer from the pool, until it gives it back.
final class ScratchBuffer: @unchecked Sendable {
    static let size = 256 * 1024
    let bytes: UnsafeMutableRawBufferPointer

    private init() {
        bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.size, alignment: 16)
    }

    deinit {
        bytes.deallocate()
    }

    /// At most this many idle buffers are kept.
    private static let poolLimit = 16
    private static let pool = Mutex<[ScratchBuffer]>([])

    static func take() -> ScratchBuffer {
        pool.withLock { $0.popLast() } ?? ScratchBuffer()
    }

    static func giveBack(_ buffer: ScratchBuffer) {
        pool.withLock { pool in
            if pool.count < poolLimit { pool.append(buffer) }
        }
    }
}
