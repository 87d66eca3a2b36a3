// What the conformance suites of the plug-in protocols share (the transport suite in
// PeerSyncTransportTesting, the discovery suite in PeerSyncDiscoveryTesting, the storage suite
// in PeerSyncStorageTesting): the failure a case
// throws, the checks inside a case, and running every case without a test framework. The
// testing products re-export this module, so their users never import it themselves.

/// A conformance case failed: the implementation broke its protocol's contract. `message` says
/// what was expected and what happened. The one failure type of every suite (transport,
/// discovery, storage).
public struct ConformanceFailure: Error, Sendable, CustomStringConvertible {
    /// Which suite: `"transport"`, `"discovery"`, `"storage"`.
    public let suite: String
    /// The case that failed (one of the suite's `caseNames`).
    public let caseName: String
    /// What went wrong.
    public let message: String
    /// Where the failed check is in the suite's source; empty (and `line` 0) when the suite
    /// does not record it or the failure is an unexpected error.
    public let file: String
    public let line: Int
    /// The unexpected error the implementation threw, if that is the failure.
    public let underlying: (any Error)?

    public init(suite: String, caseName: String, message: String, file: String = "", line: Int = 0,
                underlying: (any Error)? = nil) {
        self.suite = suite
        self.caseName = caseName
        self.message = message
        self.file = file
        self.line = line
        self.underlying = underlying
    }

    public var description: String {
        "\(suite) conformance case '\(caseName)' failed: " + (file.isEmpty ? "" : "\(file):\(line): ") + message
    }
}

/// The outcome of one case when a suite runs them all (`runAll()`).
public struct ConformanceCaseResult: Sendable {
    public let name: String
    /// `nil` if the case passed.
    public let failure: ConformanceFailure?
}

/// A failure inside a case, before the case name is attached.
package struct CheckFailure: Error, CustomStringConvertible {
    package let message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

/// Throws ``CheckFailure`` with `message` unless `condition` holds.
package func check(_ condition: Bool, _ message: @autoclosure () -> String) throws {
    if !condition { throw CheckFailure(message()) }
}

/// Runs the cases `names` one after the other with `run`, collecting a result per case (a
/// non-``ConformanceFailure`` error becomes one, with the error's description).
package func runConformanceCases(_ names: [String], suite: String,
                                 _ run: (String) async throws -> Void) async -> [ConformanceCaseResult] {
    var results: [ConformanceCaseResult] = []
    for name in names {
        do {
            try await run(name)
            results.append(ConformanceCaseResult(name: name, failure: nil))
        } catch let failure as ConformanceFailure {
            results.append(ConformanceCaseResult(name: name, failure: failure))
        } catch {
            results.append(ConformanceCaseResult(name: name, failure: ConformanceFailure(suite: suite, caseName: name, message: "\(error)")))
        }
    }
    return results
}
