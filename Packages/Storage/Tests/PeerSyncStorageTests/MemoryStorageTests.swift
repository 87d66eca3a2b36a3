import Foundation
import PeerSyncCore
@testable import PeerSyncStorage
import Testing

/// A directory name unique to one test; the in-memory backend never touches it on disk.
private func uniqueDirectory(_ tag: String = #function) -> String {
    "/nonexistent/peersync-memory-tests/\(tag)-\(UUID().uuidString)"
}

@Suite("In-memory backend specifics")
struct MemoryStorageTests {
    let backend = MemoryStorageBackend()

    @Test func nameAndCreation() throws {
        let dir = uniqueDirectory()
        defer { backend.removeStore(in: dir) }
        #expect(backend.name == "memory")
        #expect(!backend.hasStore(in: dir))
        #expect(throws: PeerSyncError.self) { try backend.open(directory: dir, options: StorageOptions(create: false)) }
        #expect(!backend.hasStore(in: dir))
        let store = try backend.open(directory: dir, options: StorageOptions())
        #expect(store.backendName == "memory")
        #expect(store.directory == dir)
        #expect(backend.hasStore(in: dir))
        #expect(!FileManager.default.fileExists(atPath: dir), "the memory backend must not create directories")
        try store.close()
    }

    @Test func emptyDirectoryIsRejected() {
        do {
            _ = try backend.open(directory: "", options: StorageOptions())
            Issue.record("opening an empty directory string should throw")
        } catch let error as PeerSyncError {
            #expect(error.code == .invalidArgument)
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test func sameDirectorySharesDataAndRemoveStoreForgetsIt() throws {
        let dir = uniqueDirectory()
        defer { backend.removeStore(in: dir) }
        let a = try backend.open(directory: dir, options: StorageOptions())
        // A different spelling of the same path reaches the same store.
        let b = try backend.open(directory: dir + "/./", options: StorageOptions())
        _ = try a.write { try $0.put(Record(key: "k", body: [1, 2, 3]), in: "ks") }
        #expect(try b.read { try $0.get("k", in: "ks")?.body } == [1, 2, 3])
        try a.close()
        try b.close()
        let c = try backend.open(directory: dir, options: StorageOptions())
        #expect(try c.read { try $0.count(in: "ks", includeDeleted: true) } == 1)
        backend.removeStore(in: dir)
        #expect(!backend.hasStore(in: dir))
        // The open handle keeps its (now private) data; a new open starts empty.
        #expect(try c.read { try $0.count(in: "ks", includeDeleted: true) } == 1)
        let d = try backend.open(directory: dir, options: StorageOptions())
        #expect(try d.read { try $0.keyspaces() } == [])
        try c.close()
        try d.close()
    }

    @Test func nestedWriteOnOneThreadThrowsInsteadOfDeadlocking() throws {
        let dir = uniqueDirectory()
        defer { backend.removeStore(in: dir) }
        let store = try backend.open(directory: dir, options: StorageOptions())
        defer { try? store.close() }
        do {
            _ = try store.write { _ in try store.write { try $0.put(Record(key: "x"), in: "ks") } }
            Issue.record("a nested write should throw")
        } catch let error as PeerSyncError {
            #expect(error.code == .storage)
        }
        #expect(try store.read { try $0.get("x", in: "ks") } == nil)
        // The lock was released: a later write works.
        #expect(try store.write { try $0.put(Record(key: "x"), in: "ks") } == 1)
    }

    @Test func writerThatEscapesItsClosureThrows() throws {
        let dir = uniqueDirectory()
        defer { backend.removeStore(in: dir) }
        let store = try backend.open(directory: dir, options: StorageOptions())
        defer { try? store.close() }
        let escaped = try store.write { $0 }
        #expect(throws: PeerSyncError.self) { try escaped.put(Record(key: "late"), in: "ks") }
        #expect(try store.read { try $0.get("late", in: "ks") } == nil)
    }

    /// Blocking waits run on a thread of the test's own, not on the cooperative pool.
    @Test func busyTimeoutWhileAnotherThreadWrites() async throws {
        let dir = uniqueDirectory()
        defer { backend.removeStore(in: dir) }
        let store = try backend.open(directory: dir, options: StorageOptions(busyTimeout: .milliseconds(50)))
        defer { try? store.close() }
        let code: PeerSyncError.Code? = try await onThread {
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let done = DispatchSemaphore(value: 0)
            Thread {
                _ = try? store.write { _ in
                    entered.signal()
                    release.wait()
                }
                done.signal()
            }.start()
            entered.wait()
            defer {
                release.signal()
                done.wait()
            }
            do {
                try store.write { try $0.put(Record(key: "x"), in: "ks") }
                return nil
            } catch let error as PeerSyncError {
                return error.code
            }
        }
        #expect(code == .busy, "the second writer should time out with .busy")
        #expect(try store.write { try $0.put(Record(key: "x"), in: "ks") } == 1, "the lock is free again")
    }

    /// The example of Packages/Storage/README.md, kept compiling and correct here.
    @Test func readmeExample() async throws {
        let lines = try await onThread { () throws -> [String] in
            var lines: [String] = []
            // --- README example ---
            let backend = MemoryStorageBackend()
            let store = try backend.open(directory: "/tmp/peersync-readme-demo", options: StorageOptions())
            defer { backend.removeStore(in: "/tmp/peersync-readme-demo") }

            try store.write { w in
                try w.put(Record(key: "doc1", version: Array("1-a".utf8), body: Array(#"{"title":"milk"}"#.utf8)), in: "tasks")
                try w.put(Record(key: "doc2", version: Array("1-b".utf8), body: Array(#"{"title":"eggs"}"#.utf8)), in: "tasks")
                try w.delete("doc1", in: "tasks")                     // a tombstone at sequence 3
            }
            try store.read { r in
                try r.enumerate(in: "tasks", since: 0) { record in    // the changes feed
                    lines.append("\(record.sequence) \(record.key) deleted=\(record.flags.contains(.deleted))")
                    return true
                }
                lines.append("live: \(try r.count(in: "tasks", includeDeleted: false))")
            }
            try store.close()
            // --- end ---
            return lines
        }
        #expect(lines == ["2 doc2 deleted=false", "3 doc1 deleted=true", "live: 1"])
    }

    /// The persistent tree against a plain dictionary, with random inserts and removes,
    /// checking order, counts, balance and that old snapshots are unaffected.
    @Test func persistentMapMatchesReference() {
        var rng = SplitMix64(seed: 42)
        var map = PersistentSortedMap<Int, Int>()
        var reference: [Int: Int] = [:]
        var snapshots: [(PersistentSortedMap<Int, Int>, [Int: Int])] = []
        for step in 0..<5000 {
            let key = Int(rng.next() % 700)
            if rng.next() % 3 == 0 {
                #expect(map.remove(key) == reference.removeValue(forKey: key))
            } else {
                let value = Int(rng.next() % 1000)
                #expect(map.set(value, for: key) == reference.updateValue(value, forKey: key))
            }
            if step % 500 == 0 { snapshots.append((map, reference)) }
        }
        for (snapshot, ref) in snapshots + [(map, reference)] {
            var keys: [Int] = []
            snapshot.forEach(from: nil, to: nil, upperInclusive: false, descending: false) { k, v in
                #expect(ref[k] == v)
                keys.append(k)
                return true
            }
            #expect(keys == ref.keys.sorted())
            #expect(snapshot.count == ref.count)
            // AVL height bound: 1.45 log2(n + 2).
            let n = Double(ref.count + 2)
            #expect(Double(snapshot.root?.height ?? 0) <= 1.45 * log2(n) + 1)
        }
        // Ranges, both directions, early stop.
        let sortedKeys = reference.keys.sorted()
        for (lower, upper, inclusive) in [(100, 200, false), (100, 200, true), (650, 9999, false), (5, 5, true), (300, 200, true)] {
            var asc: [Int] = []
            map.forEach(from: lower, to: upper, upperInclusive: inclusive, descending: false) { k, _ in asc.append(k); return true }
            let expected = sortedKeys.filter { $0 >= lower && (inclusive ? $0 <= upper : $0 < upper) }
            #expect(asc == expected)
            var desc: [Int] = []
            map.forEach(from: lower, to: upper, upperInclusive: inclusive, descending: true) { k, _ in desc.append(k); return true }
            #expect(desc == expected.reversed())
        }
        var firstThree: [Int] = []
        let finished = map.forEach(from: nil, to: nil, upperInclusive: false, descending: false) { k, _ in
            firstThree.append(k)
            return firstThree.count < 3
        }
        #expect(!finished)
        #expect(firstThree == Array(sortedKeys.prefix(3)))
    }

    /// The look-up by a string's bytes (no `ByteKey` built) finds exactly what the subscript
    /// finds, returning the stored key.
    @Test func entryByStringMatchesTheSubscript() {
        var map = PersistentSortedMap<ByteKey, Int>()
        let keys = ["", "a", "ab", "b", "é", "e\u{301}", "doc-10", "doc-9", "\u{0}x", String(repeating: "k", count: 40)]
        for (i, key) in keys.enumerated() { map.set(i, for: ByteKey(key)) }
        for (i, key) in keys.enumerated() {
            let found = map.entry(key)
            #expect(found?.value == i && found?.key == ByteKey(key), "\(key)")
            #expect(map.entry(String(("<" + key + ">").dropFirst().dropLast()))?.value == i)
        }
        for missing in ["aa", "c", "doc-1", "e", "\u{0}"] {
            #expect(map.entry(missing) == nil && map[ByteKey(missing)] == nil, "\(missing)")
        }
        #expect(PersistentSortedMap<ByteKey, Int>().entry("a") == nil)
    }

    @Test func byteKeyOrderIsUTF8ByteOrder() {
        // Canonically equivalent strings are different keys, and U+FF61 sorts before U+1D11E
        // in UTF-8 (but after it in UTF-16).
        #expect(ByteKey("\u{E9}") != ByteKey("e\u{301}"))
        #expect(ByteKey("\u{FF61}") < ByteKey("\u{1D11E}"))
        #expect(ByteKey("a") < ByteKey("ab"))
        #expect(ByteKey("Z") < ByteKey("a"))
    }

    @Test func byteKeyOrderMatchesLexicographicByteOrder() {
        // The memcmp comparison against the definition, over prefixes, empty keys, equal
        // keys, and bytes above 0x7F (compared unsigned).
        let keys = ["", "a", "ab", "abc", "abd", "b", "\u{7F}", "\u{80}", "\u{FF}", "\u{E9}", "e\u{301}",
                    "doc-10", "doc-9", "doc-100", "\u{1D11E}", "\u{FF61}", "a\u{0}", "a\u{0}b"]
        for a in keys {
            for b in keys {
                #expect((ByteKey(a) < ByteKey(b)) == Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8)), "\(a) < \(b)")
            }
        }
    }
}

/// Runs blocking work on a new thread and awaits it.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

