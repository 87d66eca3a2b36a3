import Dispatch
import Synchronization
import Testing
@testable import PeerSyncCore

@Suite struct SerialDeliveryTests {
    /// Closures submitted from many threads at once, and from inside a running closure, all
    /// run, one at a time, each thread's in its order.
    @Test func runsEverythingInOrderOneAtATime() async throws {
        let delivery = SerialDelivery(label: "test.serial-delivery")
        let log = Mutex<[Int: [Int]]>([:])
        let running = Atomic<Int>(0)
        let overlapped = Atomic<Bool>(false)
        let done = Atomic<Int>(0)
        let senders = 4, perSender = 2_000
        DispatchQueue.concurrentPerform(iterations: senders) { sender in
            for i in 0..<perSender {
                delivery.async {
                    if running.add(1, ordering: .sequentiallyConsistent).newValue > 1 { overlapped.store(true, ordering: .relaxed) }
                    log.withLock { $0[sender, default: []].append(i) }
                    if i == perSender - 1 {
                        // Submitted from inside a drain: runs after everything queued so far.
                        delivery.async { done.add(1, ordering: .relaxed) }
                    }
                    running.subtract(1, ordering: .sequentiallyConsistent)
                }
            }
        }
        let clock = ContinuousClock(), start = clock.now
        while done.load(ordering: .relaxed) < senders, clock.now - start < .seconds(60) {
            try await Task.sleep(for: .milliseconds(10))
        }
        let finished = done.load(ordering: .relaxed), overlap = overlapped.load(ordering: .relaxed)
        #expect(finished == senders)
        #expect(!overlap)
        let final = log.withLock { $0 }
        for sender in 0..<senders { #expect(final[sender] == Array(0..<perSender)) }
    }
}
