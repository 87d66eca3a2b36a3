import PeerSyncCore
import Synchronization

/// A document body exactly as the storage holds it — canonical JSON (sorted keys, no
/// whitespace: ``JSONValue/canonicalData``) — parsed into properties only when they are first
/// asked for, then kept. Reading a document therefore costs no JSON parse unless its
/// properties are used.
///
/// Thread-safe: a ``Document`` holding it may be shared between tasks. The parsed properties
/// are published once through an atomic reference (no lock, no allocation until parsed); two
/// threads touching them at the very same moment may both parse, and one result is kept.
final class StoredBody: Sendable {
    /// The stored canonical JSON; `{}` for an empty stored body (a tombstone).
    let data: [UInt8]
    /// For the log line of a damaged body.
    private let docID: String
    private let collection: String
    /// nil until the first ``properties`` access.
    private let parsed = AtomicLazyReference<ParsedProperties>()

    private final class ParsedProperties: Sendable {
        let value: [String: JSONValue]
        init(_ value: [String: JSONValue]) { self.value = value }
    }

    private static let emptyObject: [UInt8] = Array("{}".utf8)

    /// `data` must look like a stored JSON object (see ``looksLikeObject(_:)``); the caller
    /// checks it and throws `.corrupt` otherwise.
    init(data: [UInt8], docID: String, collection: String) {
        self.data = data.isEmpty ? StoredBody.emptyObject : data
        self.docID = docID
        self.collection = collection
    }

    /// Whether the properties have been parsed (for tests).
    var isParsed: Bool { parsed.load() != nil }

    /// The parsed body. Bytes that do not parse as a JSON object — a record damaged behind
    /// the database's back, which ``Database/checkIntegrity()`` reports — read as no
    /// properties, logged as an error when parsed.
    var properties: [String: JSONValue] {
        if let parsed = parsed.load() { return parsed.value }
        let properties = Self.properties(of: data, readingOnly: nil, docID: docID, collection: collection)
        return parsed.storeIfNil(ParsedProperties(properties)).value
    }

    /// The properties of stored bytes read once, without keeping them: those named in `keys`
    /// (others may or may not be there; all when nil). Bytes that do not parse as a JSON object
    /// read as empty, logged as an error (`collection`: its full name, for the log line).
    static func properties(of data: [UInt8], readingOnly keys: Set<String>?, docID: String,
                           collection: String) -> [String: JSONValue] {
        properties(of: data, selecting: keys.map(JSONValue.PropertySelection.init), docID: docID, collection: collection)
    }

    /// ``properties(of:selecting:docID:collection:)`` into `properties` (see
    /// ``JSONValue/objectProperties(parsing:selecting:into:)``: a scan reusing one dictionary
    /// allocates none per document when it keeps no other reference to it).
    static func properties(of data: [UInt8], selecting selection: JSONValue.PropertySelection?,
                           into properties: inout [String: JSONValue], docID: String, collection: String) {
        if let selection, !data.isEmpty,
           // A stored body is canonical JSON: each key once.
           (try? JSONValue.objectProperties(parsing: data, selecting: selection, into: &properties, uniqueKeys: true)) != nil {
            return
        }
        properties = Self.properties(of: data, selecting: nil, docID: docID, collection: collection)
    }

    /// ``properties(of:readingOnly:docID:collection:)`` with the keys prepared once.
    static func properties(of data: [UInt8], selecting selection: JSONValue.PropertySelection?, docID: String,
                           collection: String) -> [String: JSONValue] {
        if data.isEmpty { return [:] }
        if let selection, let object = try? JSONValue.objectProperties(parsing: data, selecting: selection) { return object }
        if let object = (try? JSONValue(parsing: data))?.objectValue { return object }
        Database.log.error("document \(docID) of \(collection): the stored body is not a JSON object; it reads as empty")
        return [:]
    }

    /// The properties named in `keys` only (``JSONValue/objectProperties(parsing:keys:)``),
    /// or all of them once they are parsed; not kept. A body that does not parse reads as
    /// empty, as in ``properties``.
    func properties(readingOnly keys: Set<String>) -> [String: JSONValue] {
        if let parsed = parsed.load() { return parsed.value }
        if let object = try? JSONValue.objectProperties(parsing: data, keys: keys) { return object }
        return properties
    }

    /// The cheap check made when a record is read, instead of a parse: the stored bytes are
    /// empty (a tombstone) or start with `{` and end with `}` as every stored body does. A
    /// truncated or overwritten body fails it; damage inside the braces shows at the parse.
    static func looksLikeObject(_ bytes: [UInt8]) -> Bool {
        bytes.isEmpty || (bytes.first == UInt8(ascii: "{") && bytes.last == UInt8(ascii: "}"))
    }
}
