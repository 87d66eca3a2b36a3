// Reproduces the ThreadSanitizer false race that `awaitDelivery` (PeerSyncCore) avoids: an
// object built on another thread and handed to a task through a continuation is reported as a
// data race when the thread resumes the continuation before the task has suspended (the
// runtime then synchronizes through an atomic in the uninstrumented libswift_Concurrency).
// Rare per hand-over, so it loops; on Swift 6.3.1 (2026-12-01) it reported races in 3 of 6 runs
// of 20,000 hand-overs, and in 0 of 6 with `--hand-over-through-lock` (what `awaitDelivery`
// does). Run it with the Mutex shim preloaded, as `Tools/test --sanitize thread` does (its job
// queue is a contended `Mutex`):
//
//   swiftc -parse-as-library -swift-version 6 -sanitize=thread -O \
//       Tools/sanitizers/continuation-tsan-repro.swift -o /tmp/continuation-repro
//   export LD_PRELOAD=.build-tsan/libtsan-mutex-shim.so
//   /tmp/continuation-repro                          # WARNING: ThreadSanitizer: data race …
//   /tmp/continuation-repro --hand-over-through-lock # no report
import Glibc
import Synchronization

final class Payload: Sendable {
    let bytes: [UInt8]
    let text: String
    init(_ i: Int) { bytes = [UInt8(i & 0xff)]; text = "payload \(i)" }
}

/// One thread that spins on a queue of jobs, as the database's reader lanes do.
final class SpinningLane: Sendable {
    private let jobs = Mutex<[@Sendable () -> Void]>([])

    init() {
        final class Body: @unchecked Sendable {
            let run: @Sendable () -> Void
            init(_ run: @escaping @Sendable () -> Void) { self.run = run }
        }
        let body = Body { [self] in
            while true {
                if let job = self.jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { job() } else { sched_yield() }
            }
        }
        var thread = pthread_t()
        pthread_create(&thread, nil, { Unmanaged<Body>.fromOpaque($0!).takeRetainedValue().run(); return nil },
                       Unmanaged.passRetained(body).toOpaque())
    }

    func submit(_ job: @escaping @Sendable () -> Void) { jobs.withLock { $0.append(job) } }
}

@main
struct ContinuationReproduction {
    static func main() async {
        let throughLock = CommandLine.arguments.contains("--hand-over-through-lock")
        let lane = SpinningLane()
        var total = 0
        for i in 0..<20_000 {
            let payload: Payload
            if throughLock {
                let slot = Mutex<Payload?>(nil)
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    lane.submit { let p = Payload(i); slot.withLock { $0 = p }; c.resume() }
                }
                payload = slot.withLock { $0! }
            } else {
                payload = await withCheckedContinuation { c in lane.submit { c.resume(returning: Payload(i)) } }
            }
            total += payload.bytes.count + payload.text.utf8.count
        }
        print("done", total)
    }
}
