@_exported import PeerSyncConformance
import PeerSyncCore
import PeerSyncDiscovery

/// Runs `operation` in its own task and returns its result, or throws a ``CheckFailure``
/// naming `what` once `timeout` has passed. The task is cancelled then but not waited for, so
/// a discovery that ignores cancellation cannot hang the suite.
func within<T: Sendable>(_ timeout: Duration, _ what: String,
                         _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = LockedValue<Result<T, any Error>?>(nil)
    let work = Task {
        let result: Result<T, any Error>
        do { result = .success(try await operation()) } catch { result = .failure(error) }
        outcome.withLock { $0 = result }
    }
    let deadline = ContinuousClock.now + timeout
    while true {
        if let result = outcome.withLock({ $0 }) { return try result.get() }
        guard ContinuousClock.now < deadline else {
            work.cancel()
            throw CheckFailure("timed out after \(timeout): \(what)")
        }
        try await Task.sleep(for: .milliseconds(5))
    }
}

func describe(_ error: any Error) -> String {
    if let error = error as? PeerSyncError { return "PeerSyncError(\(error))" }
    return "\(type(of: error)): \(error)"
}

/// Runs `operation`, expecting it to throw a ``PeerSyncError`` with `code`.
func expectError(_ code: PeerSyncError.Code, _ what: String, timeout: Duration,
                 _ operation: @escaping @Sendable () async throws -> Void) async throws {
    let outcome: (any Error)? = try await within(timeout, what) {
        do {
            try await operation()
            return nil
        } catch {
            return error
        }
    }
    guard let outcome else { throw CheckFailure("\(what) succeeded; expected PeerSyncError \(code)") }
    guard let error = outcome as? PeerSyncError, error.code == code else {
        throw CheckFailure("\(what) threw \(describe(outcome)); expected PeerSyncError \(code)")
    }
}
