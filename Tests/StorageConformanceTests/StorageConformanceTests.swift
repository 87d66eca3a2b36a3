import Foundation
import PeerSyncStorage
import PeerSyncStorageTesting
import PeerSyncTestSupport
import Testing
#if SQLite && canImport(PeerSyncSQLite)
import PeerSyncSQLite
#endif
#if LMDB && canImport(PeerSyncLMDB)
import PeerSyncLMDB
#endif

/// One (backend, case) pair of the conformance matrix.
struct ConformanceCombination: Sendable, Hashable, CustomTestStringConvertible {
    let backend: String
    let caseName: String
    var testDescription: String { "\(backend): \(caseName)" }
}

/// The backends this build has: memory always (also without its own ordered key sets, see
/// `WithoutKeySetsBackend`), SQLite and LMDB when their traits are on.
enum ConformanceBackends {
    static var names: [String] {
        var names = ["memory", "memory-without-key-sets"]
        #if SQLite && canImport(PeerSyncSQLite)
        names.append("sqlite")
        #endif
        #if LMDB && canImport(PeerSyncLMDB)
        names.append("lmdb")
        #endif
        return names
    }

    static func suite(for name: String) -> StorageConformanceSuite? {
        switch name {
        case "memory":
            let memory = MemoryStorageBackend()
            return StorageConformanceSuite(backend: memory, capabilities: .init(multiProcess: false, readsWithoutWaiting: true),
                                           removeStore: { memory.removeStore(in: $0) })
        case "memory-without-key-sets":
            let backend = WithoutKeySetsBackend()
            return StorageConformanceSuite(backend: backend, capabilities: .init(multiProcess: false),
                                           removeStore: { backend.removeStore(in: $0) })
        #if SQLite && canImport(PeerSyncSQLite)
        case "sqlite":
            return StorageConformanceSuite(backend: SQLiteStorageBackend(), capabilities: .init(multiProcess: true, readsWithoutWaiting: true),
                                           childLauncher: childLauncher(backend: name))
        #endif
        #if LMDB && canImport(PeerSyncLMDB)
        case "lmdb":
            return StorageConformanceSuite(backend: LMDBStorageBackend(), capabilities: .init(multiProcess: true, readsWithoutWaiting: true),
                                           childLauncher: childLauncher(backend: name))
        #endif
        default:
            return nil
        }
    }

    static var combinations: [ConformanceCombination] {
        names.flatMap { name in
            (suite(for: name).map { suite in StorageConformanceSuite.caseNames(for: suite.capabilities) } ?? [])
                .map { ConformanceCombination(backend: name, caseName: $0) }
        }
    }

    /// The `storage-conformance-child` executable sits next to the test bundle, in the build
    /// products directory.
    static func childLauncher(backend: String) -> ChildProcessLauncher {
        ChildProcessLauncher(executablePath: Products.path("storage-conformance-child"), arguments: [backend])
    }
}

/// Failures of other packages' backends that are reported to their owners and not fixed yet:
/// recorded as known issues (still printed in the test output) so the rest of the matrix stays
/// meaningful. Remove an entry once its backend is fixed.
let knownConformanceIssues: [ConformanceCombination: String] = [:]

@Test("Storage conformance", arguments: ConformanceBackends.combinations)
func storageConformance(_ combination: ConformanceCombination) async throws {
    let suite = try #require(ConformanceBackends.suite(for: combination.backend))
    let run = {
        do {
            try await suite.run(combination.caseName)
        } catch let failure as ConformanceFailure {
            Issue.record("\(failure)")
        }
    }
    if let known = knownConformanceIssues[combination] {
        await withKnownIssue(Comment(rawValue: known), isIntermittent: true) { try await run() }
    } else {
        try await run()
    }
}

@Test func everyBackendRunsEveryApplicableCase() throws {
    let names = ConformanceBackends.names
    #expect(names.contains("memory"))
    for name in names {
        let suite = try #require(ConformanceBackends.suite(for: name))
        let applicable = StorageConformanceSuite.caseNames(for: suite.capabilities)
        #expect(applicable.allSatisfy(suite.isApplicable), "\(name): every listed case must be runnable")
        if suite.capabilities.multiProcess {
            #expect(applicable == StorageConformanceSuite.caseNames)
            let child = try #require(suite.childLauncher)
            #expect(FileManager.default.isExecutableFile(atPath: child.executablePath),
                    "the child executable must be built next to the tests: \(child.executablePath)")
        }
    }
    #expect(Set(StorageConformanceSuite.caseNames).count == StorageConformanceSuite.caseNames.count)
    #expect(StorageConformanceSuite.caseNames.count >= 20)
}
