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

    /// Items submitted one after another under one key reach their delivery together, in
    /// order; a closure or another key between them starts a new batch, so nothing is
    /// delivered out of the order of submission. Submitted while the queue is held busy, so
    /// that everything is pending at once.
    @Test func coalescesConsecutiveItemsOfOneKeyWithoutReordering() async throws {
        final class Key: Sendable {}
        let delivery = SerialDelivery(label: "test.coalescing")
        // Both kept alive to the end: a freed object's identifier can be the next one's.
        let keyA = Key(), keyB = Key()
        defer { withExtendedLifetime((keyA, keyB)) {} }
        let a = ObjectIdentifier(keyA), b = ObjectIdentifier(keyB)
        let log = Mutex<[String]>([])
        let release = DispatchSemaphore(value: 0)
        let finished = Atomic<Bool>(false)
        // Holds the queue's drain until everything below is submitted.
        delivery.async { release.wait() }
        func item(_ value: Int, _ key: ObjectIdentifier, _ name: String) {
            delivery.async(coalescing: value, key: key) { values in
                log.withLock { $0.append("\(name)\(values)") }
            }
        }
        item(1, a, "a"); item(2, a, "a"); item(3, a, "a")
        delivery.async { log.withLock { $0.append("closure") } }
        item(4, a, "a"); item(5, b, "b"); item(6, b, "b"); item(7, a, "a")
        delivery.async { finished.store(true, ordering: .sequentiallyConsistent) }
        release.signal()
        let clock = ContinuousClock(), start = clock.now
        while !finished.load(ordering: .sequentiallyConsistent), clock.now - start < .seconds(60) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(log.withLock { $0 } == ["a[1, 2, 3]", "closure", "a[4]", "b[5, 6]", "a[7]"])
        // The drain took those: the next item starts a batch of its own.
        let again = Atomic<Int>(0)
        delivery.async(coalescing: 8, key: a) { values in again.store(values.reduce(0, +), ordering: .sequentiallyConsistent) }
        while again.load(ordering: .sequentiallyConsistent) == 0, clock.now - start < .seconds(60) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(again.load(ordering: .sequentiallyConsistent) == 8)
    }
}
