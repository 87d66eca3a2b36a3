import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncDatabaseTestSupport
import PeerSyncStorage
@testable import PeerSyncDatabase

/// A one-shot gate that stops a read inside the storage: the storage thread whose reader gets
/// the gated key announces that it got there and waits until the test opens the gate. Lets a
/// test hold a read transaction open for as long as it likes, with no timing involved.
final class Gate: Sendable {
    private let reachedFlag = LockedValue(false)
    private let opened = DispatchSemaphore(value: 0)
    /// Deadlock guard only: how long a stopped storage thread waits for the test.
    private static let guardTimeout: TimeInterval = 120

    /// On the storage thread: announce, then wait for ``open()``.
    func stopHere() {
        reachedFlag.withLock { $0 = true }
        _ = opened.wait(timeout: .now() + Gate.guardTimeout)
    }

    /// Whether a storage thread reached the gate.
    var isReached: Bool { reachedFlag.withLock { $0 } }

    /// Waits (polling; 30 s deadlock guard) until a storage thread reached the gate; returns
    /// whether one did.
    func waitUntilReached() async -> Bool {
        let deadline = ContinuousClock.now + .seconds(30)
        while !isReached && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(2)) }
        return isReached
    }

    /// Lets the stopped storage thread go on. Idempotent.
    func open() { opened.signal() }
}

/// The gates armed for a store, by document key: a read of that key stops at its gate once.
final class Gates: Sendable {
    private let armed = LockedValue<[String: Gate]>([:])

    /// Arms a gate on `key`: the next read of that key (in any keyspace) stops at it.
    func arm(_ key: String) -> Gate {
        let gate = Gate()
        armed.withLock { $0[key] = gate }
        return gate
    }

    /// The gate armed on `key`, disarmed (each gate stops one read).
    func take(_ key: String) -> Gate? { armed.withLock { $0.removeValue(forKey: key) } }
}

/// A backend that wraps another one and stops reads (not writes) at the gates armed in
/// ``gates``: the test storage that shows which database operations can run while a read
/// transaction is open.
struct GatedBackend: StorageBackend {
    let inner: any StorageBackend
    let gates = Gates()
    let inlineReads = InlineReadCounts()

    var name: String { inner.name }
    func open(directory: String, options: StorageOptions) throws -> any Storage {
        GatedStorage(inner: try inner.open(directory: directory, options: options), gates: gates, inlineReads: inlineReads)
    }
    func hasStore(in directory: String) -> Bool { inner.hasStore(in: directory) }
}

/// What ``GatedStorage/readWithoutWaiting(_:)`` did: reads run on the caller's thread, and
/// declines (the inner storage's, or forced by ``declineAll``).
final class InlineReadCounts: Sendable {
    private let counts = LockedValue((ran: 0, declined: 0))
    private let declining = LockedValue(false)
    /// Reads `readWithoutWaiting` ran.
    var ran: Int { counts.withLock { $0.ran } }
    /// Calls it declined (nil).
    var declined: Int { counts.withLock { $0.declined } }
    /// When true, every call declines, as a storage whose lock is held would.
    var declineAll: Bool {
        get { declining.withLock { $0 } }
        set { declining.withLock { $0 = newValue } }
    }
    func count(ran: Bool) { counts.withLock { ran ? ($0.ran += 1) : ($0.declined += 1) } }
}

final class GatedStorage: Storage {
    let inner: any Storage
    let gates: Gates
    let inlineReads: InlineReadCounts

    init(inner: any Storage, gates: Gates, inlineReads: InlineReadCounts) {
        self.inner = inner
        self.gates = gates
        self.inlineReads = inlineReads
    }

    var backendName: String { inner.backendName }
    var directory: String { inner.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R {
        try inner.read { reader in try body(GatedReader(inner: reader, gates: gates)) }
    }
    /// The inner storage's, counted in ``InlineReadCounts`` (gates stop these reads too: a
    /// test arms them only for reads it runs on reader threads).
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        if inlineReads.declineAll {
            inlineReads.count(ran: false)
            return nil
        }
        let result = try inner.readWithoutWaiting { reader in try body(GatedReader(inner: reader, gates: gates)) }
        inlineReads.count(ran: result != nil)
        return result
    }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R { try inner.write(body) }
    func close() throws { try inner.close() }
}

/// A read transaction's reader that stops at an armed gate before a `get` of its key.
struct GatedReader: StorageReader {
    let inner: any StorageReader
    let gates: Gates

    func keyspaces() throws -> [String] { try inner.keyspaces() }
    func get(_ key: String, in keyspace: String) throws -> Record? {
        gates.take(key)?.stopHere()
        return try inner.get(key, in: keyspace)
    }
    func enumerate(in keyspace: String, range: KeyRange, descending: Bool, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, range: range, descending: descending, body)
    }
    func enumerate(in keyspace: String, since: UInt64, _ body: (Record) throws -> Bool) throws {
        try inner.enumerate(in: keyspace, since: since, body)
    }
    func count(in keyspace: String, includeDeleted: Bool) throws -> Int { try inner.count(in: keyspace, includeDeleted: includeDeleted) }
    func lastSequence(in keyspace: String) throws -> UInt64 { try inner.lastSequence(in: keyspace) }
}

/// Starts a task reading document `id` of `collection` and waits (deadlock guard) until that
/// read is held at a gate armed in `gates`, inside its read transaction. The caller opens the
/// gate; ``Gate/isReached`` says whether the read got there.
func startHeldRead(of id: String, in collection: Collection, gates: Gates) async -> (read: Task<Document?, any Error>, gate: Gate) {
    let gate = gates.arm(id)
    let read = Task { try await collection.document(id: id) }
    _ = await gate.waitUntilReached()
    return (read, gate)
}

/// Opens a fresh database `test` over ``GatedBackend`` wrapping `backend`, runs `body` with it
/// and the gates, then closes and deletes it all (also when `body` throws).
func withGatedDatabase(_ backend: Backend, maximumReaderCount: Int = 4,
                       _ body: (Database, Gates) async throws -> Void) async throws {
    try await withGatedDatabase(backend, maximumReaderCount: maximumReaderCount) { db, gates, _ in try await body(db, gates) }
}

/// ``withGatedDatabase(_:maximumReaderCount:_:)`` that also hands `body` the counts of the
/// storage's reads on the caller's thread.
func withGatedDatabase(_ backend: Backend, maximumReaderCount: Int = 4,
                       _ body: (Database, Gates, InlineReadCounts) async throws -> Void) async throws {
    let dir = try TempDirectory()
    defer { dir.remove() }
    let gated = GatedBackend(inner: backend.make())
    var config = makeConfig(backend, dir)
    config.backend = gated
    config.maximumReaderCount = maximumReaderCount
    let database = try await Database(name: "test", config: config)
    do {
        try await body(database, gated.gates, gated.inlineReads)
    } catch {
        try? await database.close()
        throw error
    }
    try await database.close()
}
