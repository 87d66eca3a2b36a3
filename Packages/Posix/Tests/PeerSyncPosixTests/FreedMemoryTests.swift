@testable import PeerSyncPosix
import Testing

@Suite("Freed memory release", .timeLimit(.minutes(1)))
struct FreedMemoryTests {
    @Test("trims are throttled: requests while one is scheduled share it")
    func trimsAreThrottled() async throws {
        let before = FreedMemory.trimCount
        for _ in 0..<100 { FreedMemory.releaseSoon(after: .milliseconds(200)) }
        #expect(FreedMemory.isScheduled)
        // Polls (generous deadline: it only bounds a failure).
        let deadline = ContinuousClock.now + .seconds(60)
        while FreedMemory.trimCount == before, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(FreedMemory.trimCount > before, "the scheduled trim did not run")
        // Other tests of this process may request trims too: at most a few, never 100.
        #expect(FreedMemory.trimCount - before < 10)
    }
}
