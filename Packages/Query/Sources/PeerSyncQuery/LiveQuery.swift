import Dispatch
import PeerSyncCore
import PeerSyncDatabase

// Live queries: a query with a change listener (or a `changes()` stream) re-runs when a commit
// touches one of its collections and reports the new result only when it differs from the
// last one reported.

/// One report of a live query (Couchbase Lite's `QueryChange`): the whole new result set, or
/// the error the query run ended with.
public struct QueryChange: Sendable {
    /// The query that was run.
    public let query: Query
    /// Every row of the new result (not only the rows that changed); nil when ``error`` is set.
    public let results: ResultSet?
    /// Why the query could not run (a collection that does not exist, a non-numeric
    /// `LIMIT` parameter, a closed database, …); nil when ``results`` is set.
    public let error: (any Error)?
}

/// Returned by ``Query/addChangeListener(withQueue:_:)`` (Couchbase Lite's `ListenerToken` for a
/// query); ``remove()`` or ``Query/removeChangeListener(withToken:)`` stops the live query.
public final class QueryListenerToken: Sendable {
    private let onRemove: @Sendable () -> Void
    init(_ onRemove: @escaping @Sendable () -> Void) { self.onRemove = onRemove }

    /// Stops the live query of this listener: no callback starts after this call returns (one
    /// already running finishes). Idempotent; callable from any task or thread, also from the
    /// listener itself.
    public func remove() { onRemove() }
}

extension Query {
    /// Turns the query into a live query (Couchbase Lite's `addChangeListener`): `listener` is
    /// called first with the current result, then each time a commit changes the result.
    ///
    /// - What triggers a re-run: a commit that touches a collection the query reads (its `FROM`
    ///   collection and the collections it joins) — made by this `Database`, by another
    ///   `Database` instance or another process with the same database open (noticed within its
    ///   `changePollInterval`), or a revision written by a replicator. Commits to other
    ///   collections never re-run it. Setting ``parameters`` re-runs it too.
    /// - Coalescing: after a change the query waits 50 ms before it
    ///   re-runs, so a burst of commits costs one run; it never runs more often than once per
    ///   interval. Each run reads one snapshot, taken after every commit that triggered it.
    /// - Never for an unchanged result: a run whose rows equal the last ones reported (or that
    ///   fails with the same error) reports nothing.
    /// - Errors: a run that throws is reported as a ``QueryChange`` with ``QueryChange/error``
    ///   set; the live query keeps running and reports the next successful result. When a
    ///   collection cannot be found at the start, the error is reported and the live query
    ///   waits for a change of ``parameters`` to try again.
    /// - Delivery: in order, on `queue` (default: a serial queue of this listener). The first
    ///   call comes after this method returned. After `Database.close()` nothing is reported.
    ///
    /// Each listener is its own live query (its own first report and re-runs). Keep the token:
    /// the live query runs until ``QueryListenerToken/remove()`` or the database closes.
    @discardableResult
    public func addChangeListener(withQueue queue: DispatchQueue? = nil,
                                  _ listener: @escaping @Sendable (QueryChange) -> Void) -> QueryListenerToken {
        let target = queue ?? DispatchQueue(label: "peersync.query.listener")
        let removed = LockedValue(false)
        let observer = LiveQueryObserver(query: self, deliver: { change in
            target.async {
                // Checked on the queue: nothing starts after remove() returned.
                if !removed.withLock({ $0 }) { listener(change) }
            }
        }, finish: {})
        live.add(observer)
        observer.start()
        return QueryListenerToken { [live] in
            removed.withLock { $0 = true }
            live.remove(observer)
        }
    }

    /// Removes a listener added with ``addChangeListener(withQueue:_:)`` (Couchbase Lite's
    /// name; the same as `token.remove()`). Idempotent.
    public func removeChangeListener(withToken token: QueryListenerToken) {
        token.remove()
    }

    /// The live query as an `AsyncSequence` (the async form of ``addChangeListener(withQueue:_:)``,
    /// where Couchbase Lite on Apple platforms has a Combine `changePublisher`): the first
    /// element is the current result, then one element per changed result, with the same
    /// triggers, coalescing and error reporting.
    ///
    /// Buffering: a consumer slower than the changes gets the newest result
    /// (`bufferingNewest(1)`), never a backlog of stale ones. The stream ends when the consuming
    /// task is cancelled or stops iterating (the live query stops with it), or when the
    /// database closes.
    public func changes() -> AsyncStream<QueryChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: QueryChange.self, bufferingPolicy: .bufferingNewest(1))
        let observer = LiveQueryObserver(query: self, deliver: { continuation.yield($0) },
                                         finish: { continuation.finish() })
        live.add(observer)
        continuation.onTermination = { [live] _ in live.remove(observer) }
        observer.start()
        return stream
    }
}

/// The live queries of one ``Query`` (its listeners and streams), so that setting
/// parameters re-runs them.
final class LiveQueries: Sendable {
    private let observers = LockedValue<[ObjectIdentifier: LiveQueryObserver]>([:])
    /// Wait after a change before a re-run.
    let interval: Duration
    /// Test hook: awaited before every re-run (not before the first run), after the wait.
    let beforeRerun = LockedValue<(@Sendable () async -> Void)?>(nil)

    init(interval: Duration = .milliseconds(50)) { self.interval = interval }

    func add(_ observer: LiveQueryObserver) {
        observers.withLock { $0[ObjectIdentifier(observer)] = observer }
    }

    /// Stops `observer` (idempotent).
    func remove(_ observer: LiveQueryObserver) {
        let removed = observers.withLock { $0.removeValue(forKey: ObjectIdentifier(observer)) }
        removed?.stop()
    }

    /// How many live queries run, for tests.
    var count: Int { observers.withLock { $0.count } }

    /// The parameters changed: every live query re-runs.
    func parametersChanged() {
        for observer in observers.withLock({ Array($0.values) }) { observer.signal.fire() }
    }

    /// Forgets `observer` once it ended by itself (its database closed).
    fileprivate func ended(_ observer: LiveQueryObserver) {
        _ = observers.withLock { $0.removeValue(forKey: ObjectIdentifier(observer)) }
    }
}

/// One live query: watches the query's collections, re-runs the query after changes
/// (coalesced), and reports results that differ from the last one reported.
///
/// Runs as one task: register the collection listeners, run, report; then wait for a change
/// signal, wait the interval, clear the signal, run, report if different; until stopped or
/// the database closes. Clearing the signal *before* the run's snapshot is taken means a commit
/// noticed after the clear triggers another run, and one noticed before it is in the snapshot
/// (a commit is noticed only after it committed): no change is ever missed.
final class LiveQueryObserver: Sendable {
    let query: Query
    let signal = CoalescingSignal()
    private let deliver: @Sendable (QueryChange) -> Void
    private let finish: @Sendable () -> Void
    private let task = LockedValue<Task<Void, Never>?>(nil)
    private let stopped = LockedValue(false)

    init(query: Query, deliver: @escaping @Sendable (QueryChange) -> Void, finish: @escaping @Sendable () -> Void) {
        self.query = query
        self.deliver = deliver
        self.finish = finish
    }

    func start() {
        let started = Task { await self.run() }
        let alreadyStopped = task.withLock { t -> Bool in
            t = started
            return stopped.withLock { $0 }
        }
        if alreadyStopped { started.cancel() }
    }

    func stop() {
        stopped.withLock { $0 = true }
        signal.close()
        task.withLock { $0 }?.cancel()
    }

    /// A run's outcome, compared with the last one reported.
    private enum Outcome: Equatable {
        case rows([[JSONValue?]])
        case error(String)
    }

    private func run() async {
        defer {
            query.live.ended(self)
            finish()
        }
        var watchers: [Task<Void, Never>] = []
        defer { for w in watchers { w.cancel() } }
        var last: Outcome?
        var first = true
        while !Task.isCancelled {
            if !first {
                guard await signal.wait() else { return }
                try? await Task.sleep(for: query.live.interval)
                if let hook = query.live.beforeRerun.withLock({ $0 }) { await hook() }
                if Task.isCancelled { return }
            }
            first = false
            signal.clear()
            if watchers.isEmpty {
                // Register before the first run reads: a commit after the registration re-runs
                // the query; one before it is in the run's snapshot.
                do {
                    for collection in try await query.resolveCollections() {
                        let changes = collection.changeStream()
                        let signal = self.signal
                        watchers.append(Task {
                            for await _ in changes { signal.fire() }
                            // The stream ended without a cancel: the database closed.
                            if !Task.isCancelled { signal.close() }
                        })
                    }
                } catch {
                    if (error as? PeerSyncError)?.code == .closed { return }
                    report(.error(String(describing: error)), QueryChange(query: query, results: nil, error: error), &last)
                    continue
                }
            }
            let change: QueryChange
            let outcome: Outcome
            do {
                let results = try await query.execute()
                outcome = .rows(results.rows)
                change = QueryChange(query: query, results: results, error: nil)
            } catch {
                if (error as? PeerSyncError)?.code == .closed { return }
                outcome = .error(String(describing: error))
                change = QueryChange(query: query, results: nil, error: error)
            }
            if Task.isCancelled { return }
            report(outcome, change, &last)
        }
    }

    private func report(_ outcome: Outcome, _ change: QueryChange, _ last: inout Outcome?) {
        guard outcome != last else { return }
        last = outcome
        deliver(change)
    }
}

/// A level-triggered signal with one waiter: ``fire()`` any number of times, ``wait()`` returns
/// once per burst. ``close()`` (or cancelling the waiting task) makes ``wait()`` return false.
final class CoalescingSignal: Sendable {
    private struct State {
        var pending = false
        var closed = false
        var waiter: CheckedContinuation<Bool, Never>?
    }
    private let state = LockedValue(State())

    /// Marks a change; wakes the waiter.
    func fire() {
        let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            guard !s.closed else { return nil }
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.pending = true
            return nil
        }
        waiter?.resume(returning: true)
    }

    /// Forgets the changes marked so far (call right before reading them).
    func clear() { state.withLock { $0.pending = false } }

    /// Ends the signal: the waiter (and every later wait) returns false.
    func close() {
        let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            s.closed = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: false)
    }

    /// Returns true when a change is marked (at once if one is pending), false once closed or
    /// when the task is cancelled.
    func wait() async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                let result = state.withLock { s -> Bool? in
                    if s.closed { return false }
                    if s.pending { return true }
                    s.waiter = c
                    return nil
                }
                if let result { c.resume(returning: result) }
            }
        } onCancel: {
            close()
        }
    }
}
