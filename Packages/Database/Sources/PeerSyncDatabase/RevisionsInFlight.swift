import PeerSyncCore

/// The revisions the replication sessions of one database have asked their peers for and not
/// received yet, so that a revision offered by several peers at once (a mesh: each neighbour
/// forwards what it received) is fetched over one link, not over every link that offers it.
///
/// A session *claims* a revision when it answers a `changes`/`proposeChanges` entry asking
/// for it, and releases the claim once the revision has been handled (stored or not) or the
/// session ends. Another session offered the same revision meanwhile waits for the release
/// (bounded by the caller), then looks at the database again: stored → not wanted; not stored
/// (the first link failed) → it asks for it itself. A claim is never a promise, only a hint:
/// nothing is ever skipped because of one without the database being read afterwards.
///
/// A session must not hold claims after it ended: its end releases them all, and nothing
/// would release a later one (every other link offered it would wait its quiet limit).
///
/// Threading: every method from any task or thread; waiting suspends, never blocks.
@_spi(Replication)
public final class RevisionsInFlight: Sendable {
    /// Identifies a claimant (a session).
    public typealias Owner = ObjectIdentifier

    private struct Claim {
        var owner: Owner
        /// Waiters (keys of `State.waiting`) woken when this claim is released. A waiter may
        /// wait for several claims; the first release wakes it, its ID left in the others is
        /// ignored.
        var waiters: Set<Int> = []
    }

    private struct State {
        var claims: [String: Claim] = [:]
        var nextWaiter = 0
        /// Suspended waiters, each resumed once: by the first release of a claim it waits for,
        /// or by its timeout.
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waiters between the start and the end of one wait, and those of them whose timeout
        /// fired before they were registered.
        var pending: Set<Int> = []
        var expired: Set<Int> = []
        /// Each waiter's timer: it fires at `until` unless progress moves it.
        var timers: [Int: WaitTimer] = [:]
    }

    /// The timer of one wait: the quiet limit, capped by the total limit's deadline.
    private struct WaitTimer {
        let quiet: Duration
        let deadline: ContinuousClock.Instant
        /// When it fires.
        var until: ContinuousClock.Instant

        init(quiet: Duration, deadline: ContinuousClock.Instant, from now: ContinuousClock.Instant) {
            self.quiet = quiet
            self.deadline = deadline
            until = min(now + quiet, deadline)
        }

        /// Progress at `now`: the quiet limit starts again.
        mutating func restart(at now: ContinuousClock.Instant) { until = min(now + quiet, deadline) }
    }

    private let state = LockedValue(State())

    public init() {}

    /// The key of one revision of one document of one collection.
    public static func key(collection: String, docID: String, revID: RevisionID) -> String {
        // Appended into one reserved string: one allocation per key (interpolation took
        // several), and keys are made for every offered and every received revision.
        var key = ""
        // 20: the most digits of a generation; then the revision ID's own reserve is a no-op.
        key.reserveCapacity(collection.utf8.count + docID.utf8.count + 2 + 20 + 1 + revID.digest.utf8.count)
        key.append(collection)
        key.append("\u{0}")
        key.append(docID)
        key.append("\u{0}")
        revID.append(to: &key)
        return key
    }

    /// Claims each of `keys` that nobody (else) has claimed; returns the keys claimed by
    /// another owner (to wait for with ``waitForRelease(of:quietLimit:totalLimit:)``).
    public func claim(_ keys: [String], owner: Owner) -> Set<String> {
        state.withLock { s in
            var others = Set<String>()
            for key in keys {
                if let claim = s.claims[key] {
                    if claim.owner != owner { others.insert(key) }
                } else {
                    s.claims[key] = Claim(owner: owner)
                }
            }
            return others
        }
    }

    /// Claims `key` for `owner` even if another owner holds it (the caller fetches it anyway);
    /// whoever waited for the old claim now waits for this one.
    public func take(_ key: String, owner: Owner) {
        state.withLock { s in
            let waiters = s.claims[key]?.waiters ?? []
            s.claims[key] = Claim(owner: owner, waiters: waiters)
            // Progress for whoever waits: the revision arrived and is being stored (or another
            // session fetches it now); their quiet limit starts again.
            let now = ContinuousClock.now
            for id in waiters { s.timers[id]?.restart(at: now) }
        }
    }

    /// Releases `key` if `owner` holds it, waking whoever waits for it.
    public func release(_ key: String, owner: Owner) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard let claim = s.claims[key], claim.owner == owner else { return [] }
            s.claims[key] = nil
            return claim.waiters.compactMap { s.waiting.removeValue(forKey: $0) }
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Releases every claim of `owner` (its session ended).
    public func releaseAll(owner: Owner) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            var woken: [CheckedContinuation<Void, Never>] = []
            for (key, claim) in s.claims where claim.owner == owner {
                woken += claim.waiters.compactMap { s.waiting.removeValue(forKey: $0) }
                s.claims[key] = nil
            }
            return woken
        }
        for waiter in waiters { waiter.resume() }
    }

    /// How many revisions are claimed (for tests).
    public var count: Int { state.withLock { $0.claims.count } }

    /// How many waits are under way (for tests).
    public var waiterCount: Int { state.withLock { $0.pending.count } }

    /// Suspends until every one of `keys` is released, or until none of them was released for
    /// `quietLimit` (their claimant stalled), or `totalLimit` passes; then returns anyway (the
    /// caller reads the database and decides). A claimant that keeps delivering is waited for
    /// however slow the machine, up to `totalLimit`. Not cancellable.
    ///
    /// One waiter and one timer for the whole wait: each release moves the timer's deadline
    /// instead of starting a new timer task (a batch of claimed revisions arrives one by one,
    /// and a timer task per arrival was a task, a sleep and a cancellation per revision).
    public func waitForRelease(of keys: Set<String>, quietLimit: Duration, totalLimit: Duration) async {
        let start = ContinuousClock.now
        let deadline = start + totalLimit
        var claimed = state.withLock { s in keys.filter { s.claims[$0] != nil } }
        guard !claimed.isEmpty, totalLimit > .zero else { return }
        let id = state.withLock { s -> Int in
            defer { s.nextWaiter += 1 }
            s.pending.insert(s.nextWaiter)
            s.timers[s.nextWaiter] = WaitTimer(quiet: quietLimit, deadline: deadline, from: start)
            return s.nextWaiter
        }
        let timer = Task { [weak self] in
            while let until = self?.state.withLock({ $0.timers[id]?.until }) {
                if ContinuousClock.now >= until {
                    self?.wake(waiter: id)
                    return
                }
                do { try await Task.sleep(until: until, clock: .continuous) } catch { return }
            }
        }
        while true {
            await waitForFirstRelease(of: claimed, waiter: id)
            let (held, expired) = state.withLock { s in (claimed.filter { s.claims[$0] != nil }, s.expired.contains(id)) }
            // Done, or the quiet (or total) limit passed.
            if held.isEmpty || expired || held.count == claimed.count { break }
            // Progress is the release of any of them (they arrive in any order): it restarts
            // the quiet limit.
            let now = ContinuousClock.now
            state.withLock { s in s.timers[id]?.restart(at: now) }
            claimed = held
        }
        timer.cancel()
        state.withLock { s in
            s.pending.remove(id)
            s.expired.remove(id)
            s.timers[id] = nil
            s.waiting[id] = nil
            for key in keys { s.claims[key]?.waiters.remove(id) }
        }
    }

    /// Suspends until every one of `keys` is released, or `timeout` passes (then returns
    /// anyway: the caller reads the database and decides). Not cancellable beyond `timeout`.
    public func waitForRelease(of keys: Set<String>, timeout: Duration) async {
        await waitForRelease(of: keys, quietLimit: timeout, totalLimit: timeout)
    }

    /// Suspends waiter `id` until one of `keys` is released or its timer fires; returns at once
    /// if one is already released or the timer already fired.
    private func waitForFirstRelease(of keys: Set<String>, waiter id: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let waiting = state.withLock { s -> Bool in
                guard !s.expired.contains(id) else { return false }
                guard keys.allSatisfy({ s.claims[$0] != nil }) else { return false }
                for key in keys { s.claims[key]?.waiters.insert(id) }
                s.waiting[id] = continuation
                return true
            }
            if !waiting { continuation.resume() }
        }
    }

    /// The timeout of waiter `id`: resumes it, or marks it expired if it is not registered yet.
    private func wake(waiter id: Int) {
        let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.pending.contains(id) { s.expired.insert(id) }
            return s.waiting.removeValue(forKey: id)
        }
        continuation?.resume()
    }
}
