import Foundation
import PeerSyncCore
import PeerSyncTestSupport
import PeerSyncDatabaseTestSupport
import Testing
@testable import PeerSyncDatabase

extension ChildProcess {
    /// The `database-test-child` executable, built next to the tests.
    static var databaseChildPath: String { Products.path("database-test-child") }

    /// A `database-test-child` process; its standard output is collected line by line, its
    /// standard error is the test's.
    convenience init(databaseChild arguments: [String]) throws {
        try self.init(executable: Self.databaseChildPath, arguments, standardError: .inherited)
    }
}

@Suite(.serialized) struct MultiProcessTests {
    @Test func childExecutableIsBuilt() {
        #expect(FileManager.default.isExecutableFile(atPath: ChildProcess.databaseChildPath),
                "the child must be built next to the tests: \(ChildProcess.databaseChildPath)")
    }

    /// Two processes save 2,000 documents each into one database at the same time; both end
    /// with all 4,000, and each was notified of every document the other saved.
    @Test(arguments: Backend.onDisk)
    func twoProcessesWriteOneDatabase(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path + "/shared.peersync"
        let n = 2_000
        let db = try await Database(path: path, config: makeConfig(backend, dir))
        let c = try db.defaultCollection()
        let fromChild = Collected<String>()
        let token = c.addChangeListener { change in
            for id in change.documentIDs where id.hasPrefix("child-") { fromChild.append(id) }
        }
        _ = try await c.lastSequence

        let child = try ChildProcess(databaseChild: [backend.rawValue, "write", path, "child-", "\(n)", "\(n)"])
        #expect(await child.wait { $0.contains("READY") }, "child did not start: \(child.output)")
        for i in 0..<n {
            var doc = MutableDocument(id: "parent-\(i)", data: ["n": .int(Int64(i)), "writer": "parent"])
            try await c.save(document: &doc)
        }
        #expect(await fromChild.wait(timeout: .seconds(120)) { Set($0).count >= n },
                "the parent saw \(Set(fromChild.all).count) of the child's documents")
        let status = await child.waitForExit()
        #expect(status == 0, "child output: \(child.output.suffix(3))")
        #expect(child.output.contains("SAW \(n)"), "child output: \(child.output.suffix(3))")
        token.remove()

        #expect(try await c.count == 2 * n)
        let ids = Set(try await c.documentIDs())
        #expect((0..<n).allSatisfy { ids.contains("parent-\($0)") && ids.contains("child-\($0)") })
        #expect(try await db.checkIntegrity().isEmpty)
        try await db.close()
    }

    /// While another process holds a write transaction open (an import, say), opening the
    /// database, counting, reading and checking it here do not wait for that writer: all of
    /// it is done before the child is even told to commit (an ordering, not a timing).
    @Test(arguments: Backend.onDisk)
    func openingAndReadingDoNotWaitForAnotherProcessWriting(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path + "/busy.peersync"
        let release = dir.path + "/release"
        let config = makeConfig(backend, dir)
        let setup = try await Database(path: path, config: config)
        for i in 0..<20 {
            var doc = MutableDocument(id: "doc-\(i)", data: ["n": .int(Int64(i))])
            try await setup.defaultCollection().save(document: &doc)
        }
        try await setup.close()

        let child = try ChildProcess(databaseChild: [backend.rawValue, "hold-write", path, release])
        defer { _ = FileManager.default.createFile(atPath: release, contents: nil) }
        #expect(await child.wait { $0.contains("HOLDING") }, "child did not start: \(child.output)")

        let db = try await Database(path: path, config: config)
        let c = try db.defaultCollection()
        #expect(try await c.count == 20)
        #expect(try await c.document(id: "doc-7") != nil)
        #expect(try await c.document(id: "held") == nil)
        #expect(try await c.documentIDs().count == 20)
        #expect(try await db.checkIntegrity() == [])
        try await db.close()
        #expect(child.output == ["HOLDING"], "the child must still hold its transaction: \(child.output)")

        _ = FileManager.default.createFile(atPath: release, contents: nil)
        #expect(await child.waitForExit() == 0, "child output: \(child.output)")
        #expect(child.output == ["HOLDING", "COMMITTED"])
        let reopened = try await Database(path: path, config: config)
        #expect(try await reopened.defaultCollection().count == 21)
        try await reopened.close()
    }

    /// A child saving documents is killed with SIGKILL again and again; after each kill the
    /// database reopens cleanly and holds every document the child reported as saved.
    @Test(arguments: Backend.onDisk)
    func killedWriterLosesNothingItReported(_ backend: Backend) async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path + "/killed.peersync"
        var reported = Set<String>()
        for round in 0..<4 {
            let child = try ChildProcess(databaseChild: [backend.rawValue, "stream", path, "k\(round)-"])
            let target = 15 + 10 * round
            #expect(await child.wait { $0.count >= target }, "round \(round): child output \(child.output.suffix(3))")
            child.signal(SIGKILL)
            let status = await child.waitForExit()
            #expect(status != nil && status != 0)
            for line in child.output where line.hasPrefix("SAVED ") { reported.insert(String(line.dropFirst(6))) }

            var config = makeConfig(backend, dir)
            config.durable = true
            let db = try await Database(path: path, config: config)
            let problems = try await db.checkIntegrity()
            #expect(problems.isEmpty, "round \(round): \(problems)")
            let c = try db.defaultCollection()
            let present = Set(try await c.documentIDs())
            let missing = reported.subtracting(present)
            #expect(missing.isEmpty, "round \(round): reported but missing: \(missing.sorted().prefix(5))")
            // Blobs of reported documents are readable.
            if let withBlob = reported.sorted().first(where: { $0.hasSuffix("-0") }) {
                let blob = try #require(try await c.document(id: withBlob)?.blob(forKey: "file"))
                #expect(try await blob.content == Data("blob \(withBlob)".utf8))
            }
            try await db.close()
        }
        #expect(reported.count >= 15 + 25 + 35 + 45)
    }
}
