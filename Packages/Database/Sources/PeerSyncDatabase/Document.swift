import Foundation
import PeerSyncCore

/// How a save or delete treats a document that changed in the database since it was read
/// (Couchbase Lite's `ConcurrencyControl`).
public enum ConcurrencyControl: Sendable, Hashable {
    /// The save wins: the new revision becomes a child of the current one.
    case lastWriteWins
    /// The save fails (returns `false`) when the stored document is no longer the revision
    /// the document was read at.
    case failOnConflict
}

/// Read access to a JSON object's properties with Couchbase Lite's typed getters. Shared by
/// ``Document`` and ``MutableDocument``.
///
/// Getter conventions (as in Couchbase Lite): numbers and booleans return 0 / `false` when the
/// key is missing or holds another type; strings, dates, arrays, dictionaries and blobs return
/// `nil`.
public protocol DocumentProperties: Sendable {
    /// The document's properties.
    var properties: [String: JSONValue] { get }
}

extension DocumentProperties {
    /// The value stored under `key`, if any.
    public func value(forKey key: String) -> JSONValue? { properties[key] }
    /// Whether `key` exists (also when it holds `null`).
    public func contains(key: String) -> Bool { properties[key] != nil }
    /// The top-level keys, sorted.
    public var keys: [String] { properties.keys.sorted() }
    /// The number of top-level properties.
    public var count: Int { properties.count }

    /// The string under `key`, or nil.
    public func string(forKey key: String) -> String? { properties[key]?.stringValue }
    /// The number under `key` as `Int` (fractions truncated, `true` = 1), else 0.
    public func int(forKey key: String) -> Int { Int(truncatingIfNeeded: int64(forKey: key)) }
    /// The number under `key` as `Int64` (fractions truncated, `true` = 1), else 0.
    public func int64(forKey key: String) -> Int64 {
        switch properties[key] {
        case .int(let i)?: return i
        case .double(let d)?:
            guard d.isFinite, d > -9.2e18, d < 9.2e18 else { return 0 }
            return Int64(d)
        case .bool(let b)?: return b ? 1 : 0
        default: return 0
        }
    }
    /// The number under `key` as `Double` (`true` = 1), else 0.
    public func double(forKey key: String) -> Double {
        switch properties[key] {
        case .int(let i)?: return Double(i)
        case .double(let d)?: return d
        case .bool(let b)?: return b ? 1 : 0
        default: return 0
        }
    }
    /// `false` when `key` is missing or holds `null`, `false` or 0; `true` otherwise.
    public func bool(forKey key: String) -> Bool {
        switch properties[key] {
        case nil, .null?: return false
        case .bool(let b)?: return b
        case .int(let i)?: return i != 0
        case .double(let d)?: return d != 0
        default: return true
        }
    }
    /// The ISO-8601 date string under `key` parsed as a `Date`, or nil.
    public func date(forKey key: String) -> Date? {
        guard let text = properties[key]?.stringValue else { return nil }
        return ISO8601.parse(text)
    }
    /// The array under `key`, or nil.
    public func array(forKey key: String) -> [JSONValue]? { properties[key]?.arrayValue }
    /// The dictionary under `key`, or nil.
    public func dictionary(forKey key: String) -> [String: JSONValue]? { properties[key]?.objectValue }

    /// The properties as a JSON object value.
    public var jsonValue: JSONValue { .object(properties) }
    /// The properties as canonical JSON text (sorted keys, no whitespace).
    public func toJSON() -> String { JSONValue.object(properties).canonicalString }

    /// Decodes the properties into a `Decodable` type. Dates are read as ISO-8601 strings.
    /// Throws the decoder's error when the properties do not match `type`.
    public func decode<T: Decodable>(as type: T.Type = T.self) throws -> T {
        try DocumentDecoding.decode(type, from: JSONValue.object(properties).canonicalData)
    }
}

/// How document properties decode into `Decodable` types.
enum DocumentDecoding {
    /// Decodes JSON `bytes` (a document body) into `type`, reading dates as ISO-8601 strings.
    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            guard let date = ISO8601.parse(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath,
                                                        debugDescription: "not an ISO-8601 date: \(text)"))
            }
            return date
        }
        return try decoder.decode(T.self, from: Data(bytes))
    }
}

/// Date formatting as Couchbase Lite stores dates: ISO-8601 in UTC with milliseconds.
enum ISO8601 {
    /// `yyyy-MM-ddTHH:mm:ss.SSSZ`, rounded to the nearest millisecond.
    static func format(_ date: Date) -> String {
        let totalMs = (date.timeIntervalSince1970 * 1000).rounded()
        guard totalMs.isFinite, abs(totalMs) < 1e16 else {
            return date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
        }
        let ms = Int64(totalMs)
        let seconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
        let fraction = ms - seconds * 1000
        let whole = Date(timeIntervalSince1970: Double(seconds)).formatted(Date.ISO8601FormatStyle())
        let digits = String(fraction)
        return String(whole.dropLast()) + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    static func parse(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }
}

/// An immutable snapshot of one revision of a document (Couchbase Lite's `Document`).
///
/// A value type: safe to pass between tasks. Obtain one with ``Collection/document(id:)``;
/// edit it through ``toMutable()``.
///
/// A document read from the database holds its body as the stored canonical JSON and parses
/// it on the first use of ``properties`` (or of a getter built on it), from whichever task
/// gets there first, and keeps the result; ``toJSON()`` and ``decode(as:)`` work from the stored bytes
/// without building ``properties`` at all.
public struct Document: DocumentProperties, Sendable, Equatable, CustomStringConvertible {
    /// The document ID.
    public let id: String
    /// The current revision ID (`<generation>-<digest>`), or nil for a document never saved.
    public let revisionID: String?
    /// The sequence the document was last changed at in its collection (0 if never saved).
    public let sequence: UInt64
    /// Whether this revision is a deletion (tombstone).
    public let isDeleted: Bool
    /// The name of the collection the document belongs to.
    public let collectionName: String
    /// The name of the scope of that collection.
    public let scopeName: String
    /// The properties of this revision. For a document read from the database they are
    /// parsed from the stored bytes on first access (see above); a stored body damaged so
    /// that it does not parse reads as empty and is logged (``Database/checkIntegrity()``
    /// reports it).
    public var properties: [String: JSONValue] {
        switch content {
        case .parsed(let properties): return properties
        case .stored(let body): return body.properties
        }
    }
    private let content: Content
    /// The blob store the document's blobs live in (nil for a document not from a database).
    let blobStore: BlobStore?

    /// The body: properties given by the caller, or the stored bytes parsed when first used.
    private enum Content: Sendable {
        case parsed([String: JSONValue])
        case stored(StoredBody)
    }

    init(id: String, revisionID: String?, sequence: UInt64, isDeleted: Bool, collectionName: String,
         scopeName: String, properties: [String: JSONValue], blobStore: BlobStore?) {
        self.init(id: id, revisionID: revisionID, sequence: sequence, isDeleted: isDeleted, collectionName: collectionName,
                  scopeName: scopeName, content: .parsed(properties), blobStore: blobStore)
    }

    /// A document whose body is `storedBody`, parsed when first used.
    init(id: String, revisionID: String?, sequence: UInt64, isDeleted: Bool, collectionName: String,
         scopeName: String, storedBody: StoredBody, blobStore: BlobStore?) {
        self.init(id: id, revisionID: revisionID, sequence: sequence, isDeleted: isDeleted, collectionName: collectionName,
                  scopeName: scopeName, content: .stored(storedBody), blobStore: blobStore)
    }

    private init(id: String, revisionID: String?, sequence: UInt64, isDeleted: Bool, collectionName: String,
                 scopeName: String, content: Content, blobStore: BlobStore?) {
        self.id = id
        self.revisionID = revisionID
        self.sequence = sequence
        self.isDeleted = isDeleted
        self.collectionName = collectionName
        self.scopeName = scopeName
        self.content = content
        self.blobStore = blobStore
    }

    /// The stored body, when the document was read from the database (parsed or not yet).
    var storedBody: StoredBody? {
        if case .stored(let body) = content { return body }
        return nil
    }

    /// The properties as canonical JSON text (sorted keys, no whitespace): for a document read
    /// from the database, the stored bytes as they are, without parsing them.
    public func toJSON() -> String {
        guard let body = storedBody else { return JSONValue.object(properties).canonicalString }
        return String(decoding: body.data, as: UTF8.self)
    }

    /// Decodes the properties into a `Decodable` type (dates read as ISO-8601 strings), like
    /// ``DocumentProperties/decode(as:)``; for a document read from the database, straight
    /// from the stored bytes, without building ``properties``. Throws the decoder's error
    /// when the properties do not match `type`.
    public func decode<T: Decodable>(as type: T.Type = T.self) throws -> T {
        guard let body = storedBody else { return try DocumentDecoding.decode(type, from: JSONValue.object(properties).canonicalData) }
        return try DocumentDecoding.decode(type, from: body.data)
    }

    /// The collection's full name, `<scope>.<collection>`.
    public var collectionFullName: String { "\(scopeName).\(collectionName)" }

    /// The generation of the current revision (0 if none).
    public var generation: UInt64 {
        revisionID.flatMap { try? RevisionID($0) }?.generation ?? 0
    }

    /// The blob referenced by the dictionary under `key`, or nil if there is none. Its
    /// content is read from the database's blob store when asked for.
    public func blob(forKey key: String) -> Blob? {
        guard let dict = properties[key]?.objectValue else { return nil }
        return Blob(stored: dict, store: blobStore)
    }

    /// A mutable copy based on this revision: saving it creates a child revision.
    public func toMutable() -> MutableDocument {
        MutableDocument(document: self)
    }

    public var description: String {
        "Document(\(collectionFullName)/\(id) rev \(revisionID ?? "-")\(isDeleted ? " deleted" : ""))"
    }

    /// Equal metadata and equal properties. Two documents read from the database compare
    /// their stored bytes first (equal canonical JSON is equal properties), and parse only
    /// when the bytes differ.
    public static func == (lhs: Document, rhs: Document) -> Bool {
        guard lhs.id == rhs.id && lhs.revisionID == rhs.revisionID && lhs.sequence == rhs.sequence
            && lhs.isDeleted == rhs.isDeleted && lhs.collectionName == rhs.collectionName
            && lhs.scopeName == rhs.scopeName else { return false }
        if let left = lhs.storedBody, let right = rhs.storedBody, left === right || left.data == right.data { return true }
        return lhs.properties == rhs.properties
    }
}

/// A document being edited (Couchbase Lite's `MutableDocument`): a value type, so a copy
/// never changes the original. Save it with ``Collection/save(document:concurrencyControl:)->Bool``.
///
/// Validation happens on save: top-level keys starting with `_` are reserved and rejected with
/// `.invalidArgument`; the ID must be non-empty and at most 255 UTF-8 bytes.
public struct MutableDocument: DocumentProperties, Sendable, Equatable, CustomStringConvertible {
    /// The document ID.
    public let id: String
    /// The revision this document was read at (nil for a new document). Updated by a save.
    public internal(set) var revisionID: String?
    /// The sequence of ``revisionID`` (0 for a new document). Updated by a save.
    public internal(set) var sequence: UInt64
    /// The collection the document was read from or saved to (nil for a new document).
    public internal(set) var collectionName: String?
    /// The scope of ``collectionName``.
    public internal(set) var scopeName: String?
    /// The properties; edit them directly or through the setters.
    public var properties: [String: JSONValue]
    /// Blobs set on this document whose content the save must store first, by digest.
    var pendingBlobs: [String: Blob] = [:]
    /// The blob store of the database the document was read from or saved to.
    var blobStore: BlobStore?

    /// A new, empty document. A unique ID is generated when `id` is nil.
    public init(id: String? = nil) {
        self.id = id ?? DocumentID.generate()
        self.revisionID = nil
        self.sequence = 0
        self.properties = [:]
    }

    /// A new document with the given properties.
    public init(id: String? = nil, data: [String: JSONValue]) {
        self.init(id: id)
        self.properties = data
    }

    /// A new document whose properties are parsed from JSON text. Throws `.invalidJSON` for
    /// malformed text — including an object with the same key twice (`{"a":1,"a":2}`), which
    /// would otherwise silently keep the last — and `.invalidArgument` when the JSON is not an
    /// object.
    public init(id: String? = nil, json: String) throws(PeerSyncError) {
        let value = try JSONValue(parsing: json, options: .strict)
        guard let object = value.objectValue else {
            throw PeerSyncError(.invalidArgument, "a document body must be a JSON object",
                                context: id.map { ["docID": $0] } ?? [:])
        }
        self.init(id: id, data: object)
    }

    /// A new document whose properties are `value` encoded as JSON (dates as ISO-8601
    /// strings). Throws the encoder's error, or `.invalidArgument` when `value` does not
    /// encode to a JSON object.
    public init(id: String? = nil, encoding value: some Encodable) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISO8601.format(date))
        }
        let data = try encoder.encode(value)
        try self.init(id: id, json: String(decoding: data, as: UTF8.self))
    }

    init(document: Document) {
        self.id = document.id
        self.revisionID = document.revisionID
        self.sequence = document.sequence
        self.collectionName = document.collectionName
        self.scopeName = document.scopeName
        self.properties = document.properties
        self.blobStore = document.blobStore
    }

    /// The property under `key`; assigning nil removes it.
    public subscript(key: String) -> JSONValue? {
        get { properties[key] }
        set { properties[key] = newValue }
    }

    /// Sets `value` under `key`; nil removes the key.
    public mutating func setValue(_ value: JSONValue?, forKey key: String) { properties[key] = value }

    /// Sets a value at a nested path of dictionary keys, e.g. `["address", "city"]`, creating
    /// intermediate dictionaries (and replacing non-dictionary values on the way); nil removes
    /// the last key. An empty path does nothing.
    public mutating func setValue(_ value: JSONValue?, at path: [String]) {
        guard let first = path.first else { return }
        if path.count == 1 { properties[first] = value; return }
        var child = properties[first]?.objectValue ?? [:]
        MutableDocument.set(value, at: path.dropFirst(), in: &child)
        properties[first] = .object(child)
    }

    private static func set(_ value: JSONValue?, at path: ArraySlice<String>, in dict: inout [String: JSONValue]) {
        guard let first = path.first else { return }
        if path.count == 1 { dict[first] = value; return }
        var child = dict[first]?.objectValue ?? [:]
        set(value, at: path.dropFirst(), in: &child)
        dict[first] = .object(child)
    }

    /// The value at a nested path of dictionary keys, or nil.
    public func value(at path: [String]) -> JSONValue? {
        guard let first = path.first else { return nil }
        var current = properties[first]
        for key in path.dropFirst() { current = current?[key] }
        return current
    }

    /// Sets a string; nil removes the key.
    public mutating func setString(_ value: String?, forKey key: String) { properties[key] = value.map { .string($0) } }
    /// Sets an integer (stored as a 64-bit JSON integer).
    public mutating func setInt(_ value: Int, forKey key: String) { properties[key] = .int(Int64(value)) }
    /// Sets a 64-bit integer.
    public mutating func setInt64(_ value: Int64, forKey key: String) { properties[key] = .int(value) }
    /// Non-finite values are stored as `null` (JSON has no NaN or infinity).
    public mutating func setDouble(_ value: Double, forKey key: String) {
        properties[key] = value.isFinite ? .double(value) : .null
    }
    /// Sets `true` or `false`.
    public mutating func setBool(_ value: Bool, forKey key: String) { properties[key] = .bool(value) }
    /// Stores the date as an ISO-8601 string in UTC with milliseconds; nil removes the key.
    public mutating func setDate(_ value: Date?, forKey key: String) {
        properties[key] = value.map { .string(ISO8601.format($0)) }
    }
    /// Sets an array; nil removes the key.
    public mutating func setArray(_ value: [JSONValue]?, forKey key: String) { properties[key] = value.map { .array($0) } }
    /// Sets a nested object (a dictionary); nil removes the key.
    public mutating func setDictionary(_ value: [String: JSONValue]?, forKey key: String) {
        properties[key] = value.map { .object($0) }
    }
    /// Replaces all properties.
    public mutating func setData(_ data: [String: JSONValue]) { properties = data }

    /// Stores a reference to `blob` under `key` (its ``Blob/properties`` dictionary); saving
    /// the document also stores the blob's content in the database. nil removes the key.
    public mutating func setBlob(_ blob: Blob?, forKey key: String) {
        setBlob(blob, at: [key])
    }

    /// Like ``setBlob(_:forKey:)`` at a nested path of dictionary keys.
    public mutating func setBlob(_ blob: Blob?, at path: [String]) {
        guard let blob else { setValue(nil, at: path); return }
        setValue(.object(blob.properties), at: path)
        pendingBlobs[blob.digest] = blob
    }

    /// The blob referenced under `key`, or nil: one set on this document (not stored yet), or
    /// one already in the database.
    public func blob(forKey key: String) -> Blob? {
        guard let dict = properties[key]?.objectValue, Blob.isBlob(properties: dict),
              let digest = dict["digest"]?.stringValue else { return nil }
        if let pending = pendingBlobs[digest] { return pending }
        return Blob(stored: dict, store: blobStore)
    }

    /// Removes the property under `key`.
    public mutating func removeValue(forKey key: String) { properties[key] = nil }

    public var description: String { "MutableDocument(\(id) based on \(revisionID ?? "-"))" }

    public static func == (lhs: MutableDocument, rhs: MutableDocument) -> Bool {
        lhs.id == rhs.id && lhs.revisionID == rhs.revisionID && lhs.properties == rhs.properties
    }
}
