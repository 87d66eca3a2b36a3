import Synchronization
import Testing
@testable import PeerSyncCore

/// A list appended to from many tasks.
private final class Recorder<Element: Sendable>: Sendable {
    private let storage = Mutex<[Element]>([])
    func append(_ element: Element) { storage.withLock { $0.append(element) } }
    var elements: [Element] { storage.withLock { $0 } }
}

@Suite struct AsyncLockTests {
    @Test func tryAcquireFailsWhileHeldAndSucceedsAfterRelease() {
        let lock = AsyncLock()
        #expect(lock.tryAcquire())
        #expect(!lock.tryAcquire())
        lock.release()
        #expect(lock.tryAcquire())
        lock.release()
    }

    @Test func criticalSectionsAcrossSuspensionsDoNotInterleave() async {
        let lock = AsyncLock()
        let log = Recorder<String>()
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<20 {
                group.addTask {
                    await lock.withLock {
                        log.append("enter \(task)")
                        await Task.yield()
                        await Task.yield()
                        log.append("leave \(task)")
                    }
                }
            }
        }
        let entries = log.elements
        #expect(entries.count == 40)
        for pair in stride(from: 0, to: entries.count, by: 2) {
            let task = entries[pair].dropFirst("enter ".count)
            #expect(entries[pair].hasPrefix("enter "))
            #expect(entries[pair + 1] == "leave \(task)")
        }
    }

    @Test func waitersAreServedInArrivalOrder() async {
        let lock = AsyncLock()
        await lock.acquire()
        let order = Recorder<Int>()
        var waiters: [Task<Void, Never>] = []
        for index in 0..<5 {
            waiters.append(Task {
                await lock.acquire()
                order.append(index)
                lock.release()
            })
            // Let this waiter enqueue before the next one starts.
            while lock.waiterCount < index + 1 { await Task.yield() }
        }
        lock.release()
        for waiter in waiters { await waiter.value }
        #expect(order.elements == [0, 1, 2, 3, 4])
    }

    @Test func withLockReleasesWhenTheBodyThrows() async {
        struct Failure: Error {}
        let lock = AsyncLock()
        await #expect(throws: Failure.self) {
            try await lock.withLock { () async throws -> Int in throw Failure() }
        }
        #expect(lock.tryAcquire())
        lock.release()
    }
}
