import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncQuery
import PeerSyncStorage
import PeerSyncDatabaseTestSupport
import Testing

/// A short run of `execute()` reads on the calling task's thread (no hop to a reader thread)
/// and then yields: a task looping over `execute()` must not keep the other tasks of its
/// executor from running.
@Suite struct InlineRunTests {
    /// One serial dispatch queue as a task executor: the tasks that prefer it share one thread
    /// at a time, so one that never lets go of it starves the others.
    final class SerialTaskExecutor: TaskExecutor, @unchecked Sendable {
        // @unchecked: `queue` is immutable and thread-safe.
        private let queue = DispatchQueue(label: "peersync.test.serial-task-executor")
        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    @Test(arguments: Backend.available)
    func aLoopOfShortRunsLetsTheOtherTasksOfItsExecutorRun(_ backend: Backend) async throws {
        let counting = InlineCountingBackend(inner: backend.make())
        try await withDatabase(on: counting) { db in
            let c = try await db.createCollection(name: "items")
            try await db.inBatch { txn in
                for i in 0..<50 {
                    var doc = MutableDocument(id: "d\(i)", data: ["n": .int(Int64(i))])
                    try txn.save(document: &doc, in: c)
                }
            }
            try await c.createIndex(withName: "byN", config: ValueIndexConfiguration(["n"]))
            let query = try db.createQuery("SELECT n FROM items WHERE n >= 10 ORDER BY n LIMIT 5")
            #expect(try await query.execute().allResults().count == 5)   // the first run hops

            let executor = SerialTaskExecutor()
            // A trial: another task is enqueued on the loop's executor, behind the loop's task,
            // and the loop runs `execute()` until that task has run (bounded: 500 runs). It can
            // only run when the loop lets go of the executor's thread: a run that hopped to a
            // reader thread does (it suspends), so a trial counts only when every run in it read
            // inline (counted by the storage); one whose run hopped (it read for longer than
            // the inline limit, e.g. under load) is tried again. Without the yield after an
            // inline read, no trial can count: the other task never runs before a hop.
            let loop = Task(executorPreference: executor) { () async throws -> (trials: Int, conclusive: Bool) in
                for trial in 1...50 {
                    let progressed = LockedValue(false)
                    _ = Task(executorPreference: executor) { progressed.withLock { $0 = true } }
                    var allInline = true
                    for _ in 0..<500 {
                        let before = counting.ran
                        _ = try await query.execute()
                        if counting.ran == before { allInline = false }
                        if progressed.withLock({ $0 }) { break }
                    }
                    guard progressed.withLock({ $0 }) else { return (trial, false) }   // 500 inline runs, never let go
                    if allInline { return (trial, true) }
                }
                return (50, false)
            }
            let (trials, conclusive) = try await loop.value
            #expect(conclusive, "after \(trials) trial(s): inline runs of execute() did not let another task of their executor run")
        }
    }
}


/// A backend that forwards to another and counts the reads its stores ran on the caller's
/// thread (`readWithoutWaiting`).
final class InlineCountingBackend: StorageBackend {
    let inner: any StorageBackend
    private let count = LockedValue(0)
    init(inner: any StorageBackend) { self.inner = inner }
    /// Reads run by `readWithoutWaiting` so far.
    var ran: Int { count.withLock { $0 } }
    var name: String { inner.name }
    func open(directory: String, options: StorageOptions) throws -> any Storage {
        InlineCountingStorage(inner: try inner.open(directory: directory, options: options), backend: self)
    }
    func hasStore(in directory: String) -> Bool { inner.hasStore(in: directory) }
    fileprivate func counted() { count.withLock { $0 += 1 } }
}

private final class InlineCountingStorage: Storage {
    let inner: any Storage
    let backend: InlineCountingBackend
    init(inner: any Storage, backend: InlineCountingBackend) {
        self.inner = inner
        self.backend = backend
    }
    var backendName: String { inner.backendName }
    var directory: String { inner.directory }
    func read<R>(_ body: (any StorageReader) throws -> R) throws -> R { try inner.read(body) }
    func write<R>(_ body: (any StorageWriter) throws -> R) throws -> R { try inner.write(body) }
    func close() throws { try inner.close() }
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        let result = try inner.readWithoutWaiting(body)
        if result != nil { backend.counted() }
        return result
    }
}
