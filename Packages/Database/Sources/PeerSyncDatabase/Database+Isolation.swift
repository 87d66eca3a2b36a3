import Dispatch
import PeerSyncCore
import PeerSyncStorage

// Where the database's storage work runs: one writer queue, a pool of readers (see
// "Isolation" on `Database`). Every public method goes through one of `write`,
// `onWriterQueue`, `read` or `onReader`.

extension Database {
    /// The open storage, or `.closed`.
    func openStorage() throws(PeerSyncError) -> any Storage {
        guard let storage = state.withLock({ $0.storage }) else { throw closedError() }
        return storage
    }

    private func closedError() -> PeerSyncError {
        PeerSyncError(.closed, "database is closed", context: ["database": name])
    }

    /// Whether the database is open.
    ///
    /// Isolation: no storage access; returns at once.
    public var isOpen: Bool { state.withLock { $0.storage != nil } }

    // MARK: The writer

    /// Runs `work` on the writer queue with the open storage, after every write submitted
    /// before it; throws `.closed` if the database closed first.
    func onWriterQueue<R: Sendable>(_ work: @escaping @Sendable (any Storage) throws -> R) async throws -> R {
        try await awaitDelivery { deliver in
            writerQueue.async { deliver(Result { try work(try self.openStorage()) }) }
        }.get()
    }

    /// Runs `body` in a write transaction on the writer queue, then hands listeners the
    /// changes committed (by it, or by others since the last poll) before returning.
    func write<R: Sendable>(_ body: @escaping @Sendable (any StorageWriter) throws -> R) async throws -> R {
        try await onWriterQueue { storage in
            let result = try storage.write { writer in try self.indexUpkeep.transaction { try body(writer) } }
            self.notifier.poll(storage, database: self)
            return result
        }
    }

    /// Polls for changes soon (e.g. after a listener was added), on the writer queue.
    func schedulePoll() {
        writerQueue.async { [weak self] in
            guard let self, let storage = try? self.openStorage() else { return }
            self.notifier.poll(storage, database: self)
        }
    }

    // MARK: The readers

    /// Runs `work` on a reader thread with the open storage, concurrently with other reads and
    /// with the writer. The read is counted in flight from this call on, so ``close()`` waits
    /// for it; throws `.closed` at once if the database is closed or closing its storage.
    func onReader<R: Sendable>(_ work: @escaping @Sendable (any Storage) throws -> R) async throws -> R {
        let storage = try beginRead()
        return try await awaitDelivery { deliver in
            readers.submit {
                let result = Result { try work(storage) }
                self.readsInFlight.leave()
                deliver(result)
            }
        }.get()
    }

    /// Runs `body` in a read transaction (a snapshot) on a reader thread; see
    /// ``onReader(_:)``. The snapshot includes every write that returned before this call.
    func read<R: Sendable>(_ body: @escaping @Sendable (any StorageReader) throws -> R) async throws -> R {
        try await onReader { storage in try storage.read(body) }
    }

    /// Runs `body` in a read transaction on the CALLING thread if the storage can start one
    /// without waiting (``Storage/readWithoutWaiting(_:)``); nil, without calling `body`, when
    /// it cannot (the caller then uses ``read(_:)``). Counted in `readsInFlight` as any read,
    /// so ``close()`` waits for it; throws `.closed` at once if the database is closed.
    ///
    /// For short reads called from a task: the storage never sleeps or waits in it, so it is
    /// CPU work on the cooperative pool, not blocking (see "Concurrency" in the README).
    func readWithoutWaiting<R>(_ body: (any StorageReader) throws -> R) throws -> R? {
        let storage = try beginRead()
        defer { readsInFlight.leave() }
        return try storage.readWithoutWaiting(body)
    }

    /// The open storage, with the read counted in `readsInFlight`. Entering the group under
    /// `state`'s lock means no read can start after ``close()`` took the storage away, so
    /// `close()`'s wait on the group covers every read that got the storage.
    private func beginRead() throws(PeerSyncError) -> any Storage {
        let storage = state.withLock { state -> (any Storage)? in
            guard let storage = state.storage else { return nil }
            readsInFlight.enter()
            return storage
        }
        guard let storage else { throw closedError() }
        return storage
    }
}
