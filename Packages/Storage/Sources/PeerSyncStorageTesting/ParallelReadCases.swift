import Dispatch
import Foundation
import PeerSyncCore
import PeerSyncStorage

/// `read` called from several threads at once: `PeerSyncDatabase` runs its reads on a pool
/// of threads, so a backend must let read transactions run in parallel on one handle (none
/// waits for another) and keep each one's snapshot its own.
enum ParallelReadCases {
    /// Four threads each hold a read transaction on ONE handle at the same moment (a barrier
    /// that every reader must reach from inside `read` — a backend that serialized readers
    /// would never let the second one in), then keep reading while a writer commits: each
    /// reader sees its own snapshot whole.
    static func readersInParallel(_ t: CaseContext) throws {
        let store = try t.open()
        let records = 50
        try store.write { w in
            for i in 0..<records { try w.put(Record(key: String(format: "k%03d", i), body: "0".bytes), in: "ks") }
            try w.put(Record(key: "round", body: "0".bytes), in: "ks")
        }
        let readerCount = 4
        let inside = DispatchGroup()
        for _ in 0..<readerCount { inside.enter() }
        let writerDone = DispatchSemaphore(value: 0)
        let hang = CaseContext.hangTimeout.timeInterval
        let readers = (0..<readerCount).map { n in
            CaseThread(name: "parallel-reader-\(n)") { () throws -> String? in
                try store.read { r -> String? in
                    let round = try r.get("round", in: "ks")?.body
                    inside.leave()
                    // Every reader is inside its transaction before any goes on.
                    guard inside.wait(timeout: .now() + hang) == .success else {
                        return "reader \(n): the other readers never got into a read transaction alongside it"
                    }
                    _ = writerDone.wait(timeout: .now() + hang)
                    // After the writer's commits: still this transaction's snapshot, whole.
                    var bodies: [[UInt8]] = []
                    try r.enumerate(in: "ks", range: .prefix("k"), descending: false) { bodies.append($0.body); return true }
                    guard try r.get("round", in: "ks")?.body == round, bodies.count == records,
                          bodies.allSatisfy({ $0 == round }) else {
                        return "reader \(n): its snapshot changed under it or is torn"
                    }
                    return nil
                }
            }
        }
        guard inside.wait(timeout: .now() + hang) == .success else {
            throw t.failure("read transactions on one handle do not run in parallel", file: #fileID, line: #line)
        }
        let writer = CaseThread(name: "writer-beside-readers") {
            for round in 1...5 {
                try store.write { w in
                    for i in 0..<records { try w.put(Record(key: String(format: "k%03d", i), body: "\(round)".bytes), in: "ks") }
                    try w.put(Record(key: "round", body: "\(round)".bytes), in: "ks")
                }
            }
        }
        try t.join(writer, "a writer committing while four readers hold transactions open")
        for _ in 0..<readerCount { writerDone.signal() }
        for (n, reader) in readers.enumerated() {
            if let problem = try t.join(reader, "parallel reader \(n)") {
                throw t.failure(problem, file: #fileID, line: #line)
            }
        }
        try t.checkEqual(try store.read { try $0.get("round", in: "ks")?.body }, "5".bytes, "a new reader sees the last commit")
    }
}
