import Foundation

/// A value guarded by a pthread mutex (`NSLock`).
///
/// Used instead of `Synchronization.Mutex` because ThreadSanitizer on Linux does not see
/// `Mutex`'s futex-based locking and reports false races; with `NSLock` a TSan run of this
/// package is meaningful. The value is only reachable inside ``withLock(_:)``.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value   // protected by `lock`

    init(_ value: Value) { self.value = value }

    func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
