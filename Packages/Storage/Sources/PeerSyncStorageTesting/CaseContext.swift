import Foundation
import PeerSyncCore
import PeerSyncStorage

/// What one running case uses: a private temporary directory, the stores it opened (closed at
/// the end), and the checks that throw ``ConformanceFailure``.
///
/// Used only on the case's own thread; threads a case starts get `Sendable` values (stores),
/// not the context.
final class CaseContext {
    /// How long a case waits for something that should happen promptly before it reports a
    /// hang (a deadlock guard, not a speed requirement).
    static let hangTimeout: Duration = .seconds(120)

    let suite: StorageConformanceSuite
    let caseName: String
    let root: URL
    private var openedStores: [any Storage] = []
    private var storeDirectories: [String] = []

    var backend: any StorageBackend { suite.backend }

    init(suite: StorageConformanceSuite, caseName: String) throws {
        self.suite = suite
        self.caseName = caseName
        let safeName = "\(suite.backend.name)-\(caseName)".map { $0.isLetter || $0.isNumber || $0 == "-" ? $0 : "_" }
        root = FileManager.default.temporaryDirectory
            .appendingPathComponent("peersync-conformance-\(String(safeName))-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    /// A store directory inside the case's temporary directory (not created: opening a store
    /// must create it). Removed, with ``StorageConformanceSuite/removeStore``, at the end.
    func directory(_ name: String = "store") -> String {
        let path = root.appendingPathComponent(name).path
        if !storeDirectories.contains(path) { storeDirectories.append(path) }
        return path
    }

    /// Opens a store (default: the case's main directory) and remembers it for closing.
    func open(_ directory: String? = nil, options: StorageOptions = StorageOptions(),
              file: StaticString = #fileID, line: UInt = #line) throws -> any Storage {
        let dir = directory ?? self.directory()
        let store: any Storage
        do {
            store = try backend.open(directory: dir, options: options)
        } catch {
            throw failure("opening the store failed: \(error)", file: file, line: line, underlying: error)
        }
        try checkEqual(store.backendName, backend.name, "Storage.backendName", file: file, line: line)
        openedStores.append(store)
        return store
    }

    /// Closes every store the case opened and removes its directories. Errors are ignored:
    /// the case already passed or failed.
    func cleanUp() {
        for store in openedStores { try? store.close() }
        openedStores.removeAll()
        if let removeStore = suite.removeStore {
            for dir in storeDirectories { removeStore(dir) }
        }
        try? FileManager.default.removeItem(at: root)
    }

    // MARK: Checks

    func failure(_ message: String, file: StaticString, line: UInt, underlying: (any Error)? = nil) -> ConformanceFailure {
        ConformanceFailure(suite: "storage", caseName: caseName, message: message, file: "\(file)", line: Int(line),
                           underlying: underlying)
    }

    func check(_ condition: Bool, _ message: @autoclosure () -> String,
               file: StaticString = #fileID, line: UInt = #line) throws {
        if !condition { throw failure(message(), file: file, line: line) }
    }

    func checkEqual<T: Equatable>(_ actual: T, _ expected: T, _ what: @autoclosure () -> String,
                                  file: StaticString = #fileID, line: UInt = #line) throws {
        if actual != expected {
            throw failure("\(what()): expected \(brief(expected)), got \(brief(actual))", file: file, line: line)
        }
    }

    /// Strings compare by their UTF-8 bytes here: Swift's `==` treats canonically equivalent
    /// strings (`"\u{E9}"`, `"e\u{301}"`) as equal, a byte-ordered store does not.
    func checkEqual(_ actual: String?, _ expected: String?, _ what: @autoclosure () -> String,
                    file: StaticString = #fileID, line: UInt = #line) throws {
        if actual.map({ Array($0.utf8) }) != expected.map({ Array($0.utf8) }) {
            throw failure("\(what()): expected \(brief(expected)), got \(brief(actual))", file: file, line: line)
        }
    }

    /// Like the `String?` overload, for lists of strings.
    func checkEqual(_ actual: [String], _ expected: [String], _ what: @autoclosure () -> String,
                    file: StaticString = #fileID, line: UInt = #line) throws {
        let actualBytes = actual.map { Array($0.utf8) }, expectedBytes = expected.map { Array($0.utf8) }
        if actualBytes == expectedBytes { return }
        var facts: [String] = []
        let missing = expected.filter { !actualBytes.contains(Array($0.utf8)) }
        let unexpected = actual.filter { !expectedBytes.contains(Array($0.utf8)) }
        if !missing.isEmpty { facts.append("missing \(brief(missing.map(brief)))") }
        if !unexpected.isEmpty { facts.append("unexpected \(brief(unexpected.map(brief)))") }
        if actual.count != expected.count { facts.append("\(actual.count) items instead of \(expected.count)") }
        if missing.isEmpty && unexpected.isEmpty,
           let index = zip(actualBytes, expectedBytes).enumerated().first(where: { $0.element.0 != $0.element.1 })?.offset {
            facts.append("order differs first at index \(index): \(brief(actual[index])) where \(brief(expected[index])) was expected")
        }
        throw failure("\(what()): \(facts.joined(separator: "; "))", file: file, line: line)
    }

    /// Compares byte arrays without printing megabytes: reports lengths and the first difference.
    func checkBytes(_ actual: [UInt8]?, _ expected: [UInt8], _ what: @autoclosure () -> String,
                    file: StaticString = #fileID, line: UInt = #line) throws {
        guard let actual else { throw failure("\(what()): record missing", file: file, line: line) }
        if actual == expected { return }
        let firstDifference = zip(actual, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            ?? min(actual.count, expected.count)
        throw failure("\(what()): \(actual.count) bytes differ from the \(expected.count) expected, first at offset \(firstDifference)",
                      file: file, line: line)
    }

    /// Checks every field of a record.
    func checkRecord(_ actual: Record?, _ expected: Record, sequence: UInt64? = nil, _ what: @autoclosure () -> String,
                     file: StaticString = #fileID, line: UInt = #line) throws {
        guard let actual else { throw failure("\(what()): record \(brief(expected.key)) missing", file: file, line: line) }
        try checkEqual(actual.key, expected.key, "\(what()): key", file: file, line: line)
        if let sequence { try checkEqual(actual.sequence, sequence, "\(what()): sequence", file: file, line: line) }
        try checkEqual(actual.flags.rawValue, expected.flags.rawValue, "\(what()): flags", file: file, line: line)
        try checkBytes(actual.version, expected.version, "\(what()): version", file: file, line: line)
        try checkBytes(actual.body, expected.body, "\(what()): body", file: file, line: line)
        try checkBytes(actual.extra, expected.extra, "\(what()): extra", file: file, line: line)
    }

    /// Checks that `body` throws a ``PeerSyncError`` (with `code`, if given).
    func checkThrows(_ code: PeerSyncError.Code?, _ what: @autoclosure () -> String,
                     file: StaticString = #fileID, line: UInt = #line, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as PeerSyncError {
            if let code, error.code != code {
                throw failure("\(what()): expected error code \(code), got \(error)", file: file, line: line)
            }
            return
        } catch {
            throw failure("\(what()): expected a PeerSyncError, got \(type(of: error)): \(error)", file: file, line: line)
        }
        throw failure("\(what()): expected an error, none was thrown", file: file, line: line)
    }

    /// Waits for a thread the case started and returns its value; fails on a hang or an error.
    func join<T>(_ thread: CaseThread<T>, _ what: @autoclosure () -> String,
                 timeout: Duration = CaseContext.hangTimeout,
                 file: StaticString = #fileID, line: UInt = #line) throws -> T {
        guard let result = thread.join(timeout: timeout) else {
            throw failure("\(what()): did not finish within \(timeout) (deadlock?)", file: file, line: line)
        }
        switch result {
        case .success(let value): return value
        case .failure(let error as ConformanceFailure): throw error
        case .failure(let error): throw failure("\(what()): \(error)", file: file, line: line, underlying: error)
        }
    }

    // MARK: Reading helpers

    /// `(key, sequence)` of every record in sequence order, since `since`.
    func changes(_ reader: any StorageReader, _ keyspace: String, since: UInt64 = 0) throws -> [KeySeq] {
        var result: [KeySeq] = []
        try reader.enumerate(in: keyspace, since: since) { result.append(KeySeq($0.key, $0.sequence)); return true }
        return result
    }

    /// Keys in key order over a range.
    func keys(_ reader: any StorageReader, _ keyspace: String, range: KeyRange = .all, descending: Bool = false) throws -> [String] {
        var result: [String] = []
        try reader.enumerate(in: keyspace, range: range, descending: descending) { result.append($0.key); return true }
        return result
    }
}

/// A (key, sequence) pair, for readable comparisons.
struct KeySeq: Equatable, CustomStringConvertible {
    let key: String
    let sequence: UInt64
    init(_ key: String, _ sequence: UInt64) {
        self.key = key
        self.sequence = sequence
    }
    var description: String { "\(brief(key))@\(sequence)" }
    static func == (a: KeySeq, b: KeySeq) -> Bool {
        a.sequence == b.sequence && a.key.utf8.elementsEqual(b.key.utf8)
    }
}

/// A short description of a value for failure messages.
func brief<T>(_ value: T) -> String {
    let text: String
    if let string = value as? String {
        text = "\"" + string.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined() + "\""
    } else {
        text = String(describing: value)
    }
    return text.count > 600 ? String(text.prefix(600)) + "…" : text
}

/// UTF-8 byte order, the storage layer's key order.
func byteOrder(_ a: String, _ b: String) -> Bool {
    a.utf8.lexicographicallyPrecedes(b.utf8)
}

/// Deterministic pseudo-random bytes (xorshift), so large bodies are not trivially compressible
/// or repetitive.
func patternBytes(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: count)
    var i = 0
    while i < count {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        var word = state
        for _ in 0..<8 where i < count {
            bytes[i] = UInt8(truncatingIfNeeded: word)
            word >>= 8
            i += 1
        }
    }
    return bytes
}

extension String {
    var bytes: [UInt8] { Array(utf8) }
}

/// An error a case throws from inside a transaction to force a rollback.
struct IntentionalRollback: Error, Equatable {
    let tag: Int
}
