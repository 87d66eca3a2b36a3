import Dispatch
import PeerSyncCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs the blocking read work of one ``Database`` on at most ``width`` threads at once: the
/// "many readers" half of the database's one-writer/many-readers model (GRDB's
/// `DatabasePool`).
///
/// Jobs run on `width` serial dispatch queues — "lanes" — the database owns, never on
/// Swift's cooperative pool. Serial queues, not one concurrent queue: libdispatch runs a
/// serial queue on an overcommitting thread, so a job that blocks (as storage calls do)
/// never keeps another lane from getting a thread, whereas the threads of a concurrent
/// queue are added about once a second while others block. At most `width` jobs run at
/// once; the others wait first in, first out. ``submit(_:)`` never blocks: it takes a lock
/// for a few instructions and returns. A lane that finishes a job takes the next waiting one
/// itself, without another dispatch.
///
/// Waking a parked thread costs more than a point read (a futex wake, about 10 µs of CPU on a
/// virtual machine, and the wait for a CPU): so the first lane that runs out of jobs stays
/// awake for up to ``spinWindow``, yielding its CPU between looks, and a job submitted
/// meanwhile goes to it instead of waking another lane. Only one lane spins at a time: more
/// would take the CPUs the tasks submitting the reads need. A task that awaits reads one after
/// another (a loop of `document(id:)`) submits its next read well within that window and
/// costs no wake-up of a lane.
///
/// Thread-safe.
final class ReaderPool: Sendable {
    typealias Job = @Sendable () -> Void

    /// The most jobs that run at once.
    let width: Int
    private let lanes: [DispatchQueue]
    private let state: LockedValue<State>

    private struct State {
        /// Lanes parked with no job, by index into `lanes`.
        var idle: [Int]
        /// Lanes that ran out of jobs and look for one for a little longer before parking.
        var spinning = 0
        var waiting = JobQueue()
    }

    /// How long a lane that ran out of jobs keeps looking before it parks.
    static let spinWindow: Duration = .microseconds(50)

    /// - Parameters:
    ///   - label: the lanes' label prefix (shows in thread names and crash logs).
    ///   - width: the most jobs that run at once; at least 1.
    init(label: String, width: Int) {
        self.width = max(1, width)
        self.lanes = (0..<self.width).map { DispatchQueue(label: "\(label).\($0)") }
        self.state = LockedValue(State(idle: Array((0..<self.width).reversed())))
    }

    /// Runs `job` on one of the pool's lanes: at once by a lane still looking for work or a
    /// parked one, else after the jobs submitted before it have started.
    func submit(_ job: @escaping Job) {
        let lane = state.withLock { state -> Int? in
            // A spinning lane that no other waiting job is promised to takes it.
            if state.waiting.count < state.spinning {
                state.waiting.append(job)
                return nil
            }
            guard let lane = state.idle.popLast() else {
                state.waiting.append(job)
                return nil
            }
            return lane
        }
        if let lane { lanes[lane].async { self.runJobs(on: lane, startingWith: job) } }
    }

    /// Runs `job`, then every job submitted before the lane parks, until none comes within
    /// ``spinWindow``; then the lane is parked (idle) again.
    private func runJobs(on lane: Int, startingWith job: @escaping Job) {
        var next: Job? = job
        while let job = next {
            job()
            next = nextJob(for: lane)
        }
    }

    /// The next job for a lane that finished one: a waiting job, or one submitted within
    /// ``spinWindow``; nil once the lane has parked.
    private func nextJob(for lane: Int) -> Job? {
        let (waiting, spins) = state.withLock { state -> (Job?, Bool) in
            if let job = state.waiting.popFirst() { return (job, false) }
            // One lane at a time: more would take the CPUs the awaiting tasks need.
            guard state.spinning == 0 else {
                state.idle.append(lane)
                return (nil, false)
            }
            state.spinning += 1
            return (nil, true)
        }
        guard spins else { return waiting }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: ReaderPool.spinWindow)
        while true {
            let expired = clock.now >= deadline
            let job = state.withLock { state -> Job? in
                if let job = state.waiting.popFirst() {
                    state.spinning -= 1
                    return job
                }
                if expired {
                    state.spinning -= 1
                    state.idle.append(lane)
                }
                return nil
            }
            if job != nil || expired { return job }
            sched_yield()
        }
    }
}

/// A first-in, first-out queue of jobs: an array and the index of its head, compacted when
/// the consumed prefix is the larger half (amortized O(1) per job).
struct JobQueue {
    private var jobs: [ReaderPool.Job] = []
    private var head = 0

    var isEmpty: Bool { head == jobs.count }
    var count: Int { jobs.count - head }

    mutating func append(_ job: @escaping ReaderPool.Job) { jobs.append(job) }

    mutating func popFirst() -> ReaderPool.Job? {
        guard head < jobs.count else { return nil }
        let job = jobs[head]
        head += 1
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 64 && head * 2 > jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }
}
