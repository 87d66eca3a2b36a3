import Dispatch
import Foundation
import Testing
import PeerSyncCore
import PeerSyncStorage
@testable import PeerSyncSQLite

/// `readWithoutWaiting` on SQLite: only on an idle reader connection (none is opened inline),
/// and the connection keeps its busy timeout for the reads that wait.
@Suite struct ReadWithoutWaitingTests {
    @Test func declinesWithoutAnIdleReaderConnectionAndRunsWithOne() throws {
        let dir = try TempDirectory()
        let store = try backend.open(directory: dir.path, options: StorageOptions(durable: false))
        defer { try? store.close() }
        try store.write { try $0.put(Record(key: "a", body: [1]), in: "ks") }

        // No reader connection was opened yet: declined, `body` not called.
        let calls = LockedValue(0)
        #expect(try store.readWithoutWaiting { _ in calls.withLock { $0 += 1 } } == nil)
        #expect(calls.withLock { $0 } == 0)

        _ = try store.read { try $0.get("a", in: "ks") }   // opens one, left idle
        #expect(try store.readWithoutWaiting { try $0.get("a", in: "ks")?.body } == [1])

        // That connection taken by a read held open on another thread: declined, not waited for.
        let inside = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = Thread {
            _ = try? store.read { reader -> Bool in
                _ = try reader.get("a", in: "ks")
                inside.signal()
                return release.wait(timeout: .now() + 120) == .success
            }
        }
        holder.start()
        #expect(inside.wait(timeout: .now() + 120) == .success)
        #expect(try store.readWithoutWaiting { _ in calls.withLock { $0 += 1 } } == nil)
        #expect(calls.withLock { $0 } == 0)
        release.signal()

        // Back in the pool: runs again, and sees a later commit.
        try store.write { try $0.put(Record(key: "a", body: [2]), in: "ks") }
        var seen: [UInt8]??
        for _ in 0..<6000 where seen == nil {   // the holder returns its connection right after `release`
            seen = try store.readWithoutWaiting { try $0.get("a", in: "ks")?.body }
            if seen == nil { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(seen == [2])
    }
}
