import Foundation
import PeerSyncCore

/// Runs blocking `body` on a new thread (not the cooperative pool) and awaits its result.
func runOnNewThread<T: Sendable>(name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let thread = Thread {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }
}

/// A thread started by a case, whose result the case collects with ``join(timeout:)``.
final class CaseThread<T: Sendable>: Sendable {
    private final class Box: Sendable {
        let result = LockedValue<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
    }

    private let box = Box()

    init(name: String, _ body: @escaping @Sendable () throws -> T) {
        let box = self.box
        let thread = Thread {
            let outcome = Result { try body() }
            box.result.withLock { $0 = outcome }
            box.done.signal()
        }
        thread.name = name
        thread.stackSize = 8 << 20
        thread.start()
    }

    /// Waits for the thread; nil if it did not finish within `timeout` (a hang: the suite
    /// only uses timeouts as deadlock guards, never to measure speed).
    func join(timeout: Duration = CaseContext.hangTimeout) -> Result<T, any Error>? {
        if box.done.wait(timeout: .now() + timeout.timeInterval) == .timedOut { return nil }
        box.done.signal()  // later joins return at once
        return box.result.withLock { $0 }
    }
}

extension Duration {
    var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) * 1e-18
    }
}
