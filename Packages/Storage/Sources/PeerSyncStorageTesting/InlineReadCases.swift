import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// `readWithoutWaiting`: the read a caller may run on Swift's cooperative pool. A backend may
/// decline (nil) whenever it likes — the default always does — but when it runs `body` it must
/// be a read transaction like `read`'s, and it must never wait.
enum InlineReadCases {
    /// What `readWithoutWaiting` sees and that it never waits: uncontended (after one `read`,
    /// so a backend that opens resources on demand has one idle), beside a write transaction
    /// held open on another thread (run on a thread of its own, so a wait for the writer would
    /// hang the case, not pass it), beside read transactions held open on other threads, with
    /// errors, and after `close()`. Declines are checked to call no `body`; a backend that
    /// declares ``StorageConformanceSuite/Capabilities/readsWithoutWaiting`` must not decline
    /// when nothing is in its way.
    static func readWithoutWaiting(_ t: CaseContext) throws {
        let capable = t.suite.capabilities.readsWithoutWaiting
        let store = try t.open()
        try store.write { w in try w.put(Record(key: "a", body: "1".bytes), in: "ks") }
        _ = try store.read { try $0.get("a", in: "ks") }

        /// `readWithoutWaiting` of key `key`, on a thread of its own: nil when declined, else
        /// the body (nil for a missing record); fails if `body` ran but no value came back, or
        /// the call hung.
        func inlineRead(_ key: String, _ what: String) throws -> [UInt8]?? {
            let thread = CaseThread(name: "inline-read") { () throws -> [UInt8]?? in
                let calls = LockedValue(0)
                let value = try store.readWithoutWaiting { r -> [UInt8]? in
                    calls.withLock { $0 += 1 }
                    return try r.get(key, in: "ks")?.body
                }
                let ran = calls.withLock { $0 }
                if value == nil && ran != 0 { throw InlineReadProblem(message: "declined (nil) after calling body \(ran) time(s)") }
                if value != nil && ran != 1 { throw InlineReadProblem(message: "body ran \(ran) times") }
                return value
            }
            return try t.join(thread, "\(what) (readWithoutWaiting must never wait)")
        }

        // 1. Uncontended: the committed data, as `read` sees it.
        let first = try inlineRead("a", "an uncontended readWithoutWaiting")
        if capable { try t.check(first != nil, "an uncontended readWithoutWaiting declined") }
        if let first { try t.checkEqual(first, "1".bytes, "an uncontended readWithoutWaiting") }

        // 2. A write transaction held open on another thread: not waited for, not seen.
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let writer = CaseThread(name: "open-writer") {
            try store.write { w in
                try w.put(Record(key: "a", body: "2".bytes), in: "ks")
                try w.put(Record(key: "b", body: "b".bytes), in: "ks")
                holding.signal()
                _ = release.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval)
            }
        }
        guard holding.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success else {
            release.signal()
            throw t.failure("the writer never got into its transaction", file: #fileID, line: #line)
        }
        let besideWriter = Result { (try inlineRead("a", "readWithoutWaiting beside an open write"),
                                     try inlineRead("b", "readWithoutWaiting beside an open write")) }
        release.signal()
        try t.join(writer, "the writer")
        let (a, b) = try besideWriter.get()
        if capable { try t.check(a != nil && b != nil, "readWithoutWaiting declined beside an open write transaction") }
        if let a { try t.checkEqual(a, "1".bytes, "readWithoutWaiting beside an open write sees the committed value") }
        if let b { try t.checkEqual(b, nil, "readWithoutWaiting beside an open write does not see its put") }

        // 3. After the commit returned: seen.
        if let after = try inlineRead("a", "readWithoutWaiting after a commit") {
            try t.checkEqual(after, "2".bytes, "readWithoutWaiting after a commit sees it")
        } else if capable {
            throw t.failure("readWithoutWaiting declined after a commit, uncontended", file: #fileID, line: #line)
        }

        // 4. Read transactions held open on other threads (every idle resource may be taken):
        //    declining is allowed, waiting is not; what runs sees the last commit.
        let readersIn = DispatchGroup()
        let readersRelease = DispatchSemaphore(value: 0)
        let readers = (0..<4).map { n in
            readersIn.enter()
            return CaseThread(name: "held-reader-\(n)") {
                try store.read { r in
                    _ = try r.get("a", in: "ks")
                    readersIn.leave()
                    _ = readersRelease.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval)
                }
            }
        }
        let heldIn = readersIn.wait(timeout: .now() + CaseContext.hangTimeout.timeInterval) == .success
        let besideReaders = Result { try inlineRead("a", "readWithoutWaiting beside four open reads") }
        for _ in readers { readersRelease.signal() }
        for (n, reader) in readers.enumerated() { try t.join(reader, "held reader \(n)") }
        try t.check(heldIn, "four read transactions did not run at once")
        if let value = try besideReaders.get() { try t.checkEqual(value, "2".bytes, "readWithoutWaiting beside four open reads") }

        // 5. Errors of `body` are rethrown unchanged.
        struct Marker: Error {}
        do {
            if try store.readWithoutWaiting({ _ -> Int in throw Marker() }) != nil {
                throw t.failure("readWithoutWaiting returned a value from a body that threw", file: #fileID, line: #line)
            }
            if capable { throw t.failure("readWithoutWaiting declined with the store idle", file: #fileID, line: #line) }
        } catch is Marker {}

        // 6. After close: `.closed` or a decline, never a body run.
        try store.close()
        do {
            let ran = try store.readWithoutWaiting { _ in true }
            try t.check(ran == nil, "readWithoutWaiting ran a read on a closed store")
        } catch let error as PeerSyncError {
            try t.checkEqual(error.code, .closed, "readWithoutWaiting on a closed store")
        }
    }
}

/// A broken rule found on a case's thread (reported by `CaseContext.join` with what was checked).
private struct InlineReadProblem: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
