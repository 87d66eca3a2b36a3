import Foundation
// The failure type users catch is the shared one of every suite; re-exported so they need no second import.
@_exported import PeerSyncConformance
import PeerSyncCore
import PeerSyncStorage

/// The one conformance suite every `StorageBackend` must pass: the in-memory, SQLite and
/// LMDB backends, and any backend a user writes.
///
/// It has no dependency on a test framework: ``run(_:)`` throws a `ConformanceFailure` on
/// the first failed check, so any harness (Swift Testing, XCTest, a plain executable) can
/// drive it. Parameterize a test over ``caseNames(for:)``:
///
/// ```swift
/// @Test(arguments: StorageConformanceSuite.caseNames(for: .init(multiProcess: false)))
/// func conformance(_ name: String) async throws {
///     try await StorageConformanceSuite(backend: MyBackend(), capabilities: .init(multiProcess: false))
///         .run(name)
/// }
/// ```
///
/// Every case opens stores in a fresh temporary directory and removes it afterwards (plus
/// ``removeStore`` for backends that keep data elsewhere). The blocking `Storage` calls run on
/// threads the suite creates, never on Swift's cooperative pool.
///
/// Semantics the suite pins down where the `Storage` doc comments leave a choice:
/// - a rolled-back transaction consumes no sequence numbers (the next commit gets
///   `lastSequence + 1` of the last *committed* state);
/// - deleting a tombstone is allowed: it stays a tombstone and gets a new sequence;
/// - `delete` keeps the record's other flags;
/// - dropping a keyspace that does not exist does nothing;
/// - a keyspace whose records were all purged still exists and keeps its sequence counter;
/// - keyspace names are arbitrary non-empty strings, compared by bytes (case-sensitive);
/// - readers never block writers, and an open write transaction never blocks readers —
///   not even one of another process while this one opens the store;
/// - read transactions on one handle run in parallel on several threads, each on its own
///   snapshot.
public struct StorageConformanceSuite: Sendable {
    /// What the backend under test supports.
    public struct Capabilities: Sendable, Hashable {
        /// Two processes can open the same directory at once and see each other's commits,
        /// with writers serialized across them. Required for the multi-process cases.
        public var multiProcess: Bool
        /// The backend implements `Storage.readWithoutWaiting(_:)` (the default declines every
        /// time): the case `readWithoutWaiting` then also requires it to run when nothing is in
        /// its way (no other transaction open, after one `read` on the handle). Default false.
        public var readsWithoutWaiting: Bool

        /// `multiProcess`: the backend supports two processes on one store (the multi-process
        /// cases run); `readsWithoutWaiting`: see ``readsWithoutWaiting``.
        public init(multiProcess: Bool, readsWithoutWaiting: Bool = false) {
            self.multiProcess = multiProcess
            self.readsWithoutWaiting = readsWithoutWaiting
        }
    }

    /// The backend under test.
    public let backend: any StorageBackend
    /// What the backend supports, deciding which cases apply.
    public let capabilities: Capabilities
    /// How to start the child process of the multi-process cases (nil: those cases do not apply).
    public let childLauncher: ChildProcessLauncher?
    /// Called with every store directory a case used, after the case, to delete data a backend
    /// keeps outside the directory (e.g. `MemoryStorageBackend/removeStore(in:)`).
    public let removeStore: (@Sendable (String) -> Void)?

    /// - Parameters:
    ///   - backend: the backend under test.
    ///   - capabilities: what it supports; cases it cannot support are not applicable.
    ///   - childLauncher: how to start a child process running ``StorageConformanceChild``
    ///     with the same backend; the multi-process cases need it.
    ///   - removeStore: see ``removeStore``.
    public init(backend: any StorageBackend, capabilities: Capabilities,
                childLauncher: ChildProcessLauncher? = nil,
                removeStore: (@Sendable (String) -> Void)? = nil) {
        self.backend = backend
        self.capabilities = capabilities
        self.childLauncher = childLauncher
        self.removeStore = removeStore
    }

    /// Every case, in a stable order.
    public static var caseNames: [String] { allCases.map(\.name) }

    /// The cases that apply to a backend with these capabilities.
    public static func caseNames(for capabilities: Capabilities) -> [String] {
        allCases.filter { !$0.needsMultiProcess || capabilities.multiProcess }.map(\.name)
    }

    /// Whether `caseName` applies to this backend (and, for the multi-process cases, whether a
    /// ``childLauncher`` was given).
    public func isApplicable(_ caseName: String) -> Bool {
        guard let conformanceCase = Self.allCases.first(where: { $0.name == caseName }) else { return false }
        return !conformanceCase.needsMultiProcess || (capabilities.multiProcess && childLauncher != nil)
    }

    /// Runs one case on a thread of its own.
    ///
    /// - Throws: `ConformanceFailure` when a check fails or the backend throws an
    ///   unexpected error; ``ConformanceCaseNotApplicable`` for an unknown case name or one
    ///   that does not apply (see ``isApplicable(_:)``).
    public func run(_ caseName: String) async throws {
        guard let conformanceCase = Self.allCases.first(where: { $0.name == caseName }) else {
            throw ConformanceCaseNotApplicable(caseName: caseName, reason: "no such case")
        }
        if conformanceCase.needsMultiProcess {
            guard capabilities.multiProcess else {
                throw ConformanceCaseNotApplicable(caseName: caseName, reason: "the backend is not multi-process")
            }
            guard childLauncher != nil else {
                throw ConformanceCaseNotApplicable(caseName: caseName, reason: "no childLauncher was given")
            }
        }
        let suite = self
        try await runOnNewThread(name: "conformance-\(caseName)") {
            let context = try CaseContext(suite: suite, caseName: caseName)
            defer { context.cleanUp() }
            do {
                try conformanceCase.body(context)
            } catch let failure as ConformanceFailure {
                throw failure
            } catch {
                throw ConformanceFailure(suite: "storage", caseName: caseName, message: "unexpected error: \(error)",
                                         underlying: error)
            }
        }
    }
}

/// How the suite starts a child process for the multi-process cases: an executable that
/// calls ``StorageConformanceChild/main(arguments:backend:)`` with the backend under test.
/// The suite runs `executablePath` with `arguments` followed by its own arguments.
public struct ChildProcessLauncher: Sendable, Hashable {
    /// The executable that runs `StorageConformanceChild`.
    public var executablePath: String
    /// Arguments before the suite's own.
    public var arguments: [String]
    /// Extra environment variables for the child (added to this process's environment).
    public var environment: [String: String]

    /// A launcher of `executablePath` with `arguments` and extra `environment` variables.
    public init(executablePath: String, arguments: [String] = [], environment: [String: String] = [:]) {
        self.executablePath = executablePath
        self.arguments = arguments
        self.environment = environment
    }
}

/// Thrown by ``StorageConformanceSuite/run(_:)`` for a case that does not exist or does not
/// apply to the backend under test. Harnesses should not run such cases (use
/// ``StorageConformanceSuite/caseNames(for:)``), so seeing this error is a harness bug.
public struct ConformanceCaseNotApplicable: Error, CustomStringConvertible {
    /// The case that was asked for.
    public let caseName: String
    /// Why it does not apply.
    public let reason: String
    public var description: String { "conformance case \(caseName) not applicable: \(reason)" }
}

/// One case of the suite.
struct ConformanceCase: Sendable {
    let name: String
    let needsMultiProcess: Bool
    let body: @Sendable (CaseContext) throws -> Void
}

extension StorageConformanceSuite {
    static let allCases: [ConformanceCase] = [
        ConformanceCase(name: "putGetReplace", needsMultiProcess: false, body: BasicCases.putGetReplace),
        ConformanceCase(name: "deleteMakesTombstone", needsMultiProcess: false, body: BasicCases.deleteMakesTombstone),
        ConformanceCase(name: "purge", needsMultiProcess: false, body: BasicCases.purge),
        ConformanceCase(name: "sequenceAssignment", needsMultiProcess: false, body: BasicCases.sequenceAssignment),
        ConformanceCase(name: "enumerateByKeyRange", needsMultiProcess: false, body: EnumerationCases.byKeyRange),
        ConformanceCase(name: "enumerateBySequence", needsMultiProcess: false, body: EnumerationCases.bySequence),
        ConformanceCase(name: "counts", needsMultiProcess: false, body: BasicCases.counts),
        ConformanceCase(name: "rollbackOnThrow", needsMultiProcess: false, body: TransactionCases.rollbackOnThrow),
        ConformanceCase(name: "writerSeesOwnChanges", needsMultiProcess: false, body: TransactionCases.writerSeesOwnChanges),
        ConformanceCase(name: "snapshotIsolation", needsMultiProcess: false, body: TransactionCases.snapshotIsolation),
        ConformanceCase(name: "readersInParallel", needsMultiProcess: false, body: ParallelReadCases.readersInParallel),
        ConformanceCase(name: "largeBodies", needsMultiProcess: false, body: DataCases.largeBodies),
        ConformanceCase(name: "manyKeyspacesAndDrop", needsMultiProcess: false, body: DataCases.manyKeyspacesAndDrop),
        ConformanceCase(name: "keyspaceNames", needsMultiProcess: false, body: DataCases.keyspaceNames),
        ConformanceCase(name: "utf8KeyOrdering", needsMultiProcess: false, body: DataCases.utf8KeyOrdering),
        ConformanceCase(name: "controlCharacterKeys", needsMultiProcess: false, body: DataCases.controlCharacterKeys),
        ConformanceCase(name: "emptyAndBinaryFields", needsMultiProcess: false, body: DataCases.emptyAndBinaryFields),
        ConformanceCase(name: "reopenAfterClose", needsMultiProcess: false, body: LifecycleCases.reopenAfterClose),
        ConformanceCase(name: "twoHandlesOneProcess", needsMultiProcess: false, body: LifecycleCases.twoHandlesOneProcess),
        ConformanceCase(name: "busyTimeout", needsMultiProcess: false, body: TransactionCases.busyTimeout),
        ConformanceCase(name: "concurrentWriters", needsMultiProcess: false, body: TransactionCases.concurrentWriters),
        ConformanceCase(name: "orderedKeySets", needsMultiProcess: false, body: KeySetCases.orderedKeySets),
        ConformanceCase(name: "manyKeySetPutsInOneTransaction", needsMultiProcess: false,
                        body: KeySetCases.manyKeySetPutsInOneTransaction),
        ConformanceCase(name: "readWithoutWaiting", needsMultiProcess: false, body: InlineReadCases.readWithoutWaiting),
        ConformanceCase(name: "readsWithoutExtra", needsMultiProcess: false, body: WithoutExtraCases.readsWithoutExtra),
        ConformanceCase(name: "twoProcesses", needsMultiProcess: true, body: MultiProcessCases.twoProcesses),
        ConformanceCase(name: "childKilledMidWrite", needsMultiProcess: true, body: MultiProcessCases.childKilledMidWrite),
        ConformanceCase(name: "readersDoNotWaitForAnotherProcessWriting", needsMultiProcess: true,
                        body: MultiProcessCases.readersDoNotWaitForAnotherProcessWriting),
    ]
}
