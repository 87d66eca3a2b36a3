import PeerSyncCore
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing
@_spi(Replication) @testable import PeerSyncDatabase

/// Change signals (the replicator's pushers) need no document IDs: while they are a
/// collection's only listeners, the change poll after a commit does not read the changed
/// documents (in a mesh, every commit of a peer woke a poll that enumerated it once more for
/// nobody). A listener that needs the IDs still gets them, also beside signals.
@Suite struct ChangeSignalTests {
    @Test func signalsAloneDoNotEnumerateTheChanges() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let backend = CountingBackend()
        let db = try await Database(name: "signals", config: DatabaseConfiguration(
            directory: dir.path, backend: backend, durable: false))
        let c = try db.defaultCollection()
        let signals = c.changeSignals()
        var iterator = signals.makeAsyncIterator()
        let before = backend.sinceEnumerations
        try await c.save(document: MutableDocument(id: "a", data: ["n": 1]))
        #expect(await iterator.next() != nil)
        #expect(backend.sinceEnumerations == before, "the poll read the changes for a signal")

        // A listener that needs the IDs, beside the signal: it gets them, and so does the signal.
        let seen = Collected<CollectionChange>()
        let token = c.addChangeListener { seen.append($0) }
        try await c.save(document: MutableDocument(id: "b", data: ["n": 2]))
        #expect(await seen.wait { $0.flatMap(\.documentIDs) == ["b"] }, "\(seen.all.map(\.documentIDs))")
        #expect(await iterator.next() != nil)
        #expect(backend.sinceEnumerations > before)
        token.remove()
        try await db.close()
    }
}
