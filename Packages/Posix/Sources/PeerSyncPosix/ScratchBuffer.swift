import PeerSyncCore

/// A heap buffer for socket reads, lent by a small process-wide pool so that busy connections
/// reuse a few buffers and idle ones hold none. `@unchecked Sendable`: the memory is only
/// touched by the one task that took the buffer from the pool, until it gives it back.
package final class ScratchBuffer: @unchecked Sendable {
    /// The size of every buffer: 256 KiB.
    package static let size = 256 * 1024
    /// The buffer's memory (``size`` bytes), valid until the buffer is given back.
    package let bytes: UnsafeMutableRawBufferPointer

    private init() {
        bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.size, alignment: 16)
    }

    deinit {
        bytes.deallocate()
    }

    /// At most this many idle buffers are kept.
    private static let poolLimit = 16
    private static let pool = LockedValue<[ScratchBuffer]>([])

    /// A buffer for the caller alone: a pooled one, or a new one when the pool is empty.
    /// Thread-safe.
    package static func take() -> ScratchBuffer {
        pool.withLock { $0.popLast() } ?? ScratchBuffer()
    }

    /// Returns a buffer taken with ``take()``; the caller must not touch it afterwards.
    /// Thread-safe.
    package static func giveBack(_ buffer: ScratchBuffer) {
        pool.withLock { pool in
            if pool.count < poolLimit { pool.append(buffer) }
        }
    }
}
