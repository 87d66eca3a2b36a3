import Foundation
import PeerSyncCore

/// Legacy attachments (protocol notes §7, §9): the top-level `_attachments` dictionary of
/// CouchDB / CBL 1.x / Sync Gateway bodies, whose entries are
/// `{"digest", "length", "content_type", "stub": true, "revpos": N, …}`.
///
/// Pure functions over document bodies, as LiteCore does them (`LegacyAttachments.cc`,
/// `DBAccess::encodeRevWithLegacyAttachments`):
/// - ``encode(_:revpos:)``: the body sent to a peer whose `changes`/`proposeChanges` reply
///   lacked `blobs: true`;
/// - ``decode(_:)``: the body of a received revision as it is stored.
enum LegacyAttachments {
    /// The legacy attachments property.
    static let key = "_attachments"
    /// Prefix of the `_attachments` entry that mirrors a blob: `"blob_" + JSON pointer`.
    static let blobPrefix = "blob_"

    // MARK: Sending

    /// The legacy form of `body`: unchanged when it references no blob outside `_attachments`;
    /// else `_attachments` holds the body's legacy entries not named `blob_…`, plus one entry
    /// per blob named `"blob_" + JSON pointer` (e.g. `blob_/photo`, `blob_/list/0`) with the
    /// blob's keys except `@type` (and any `stub`), `stub: true` and `revpos` = `revpos`.
    static func encode(_ body: [String: JSONValue], revpos: UInt64) -> [String: JSONValue] {
        let blobs = blobsWithPointers(in: body)
        guard !blobs.isEmpty else { return body }
        var attachments: [String: JSONValue] = [:]
        for (name, entry) in body[key]?.objectValue ?? [:] where !name.hasPrefix(blobPrefix) {
            attachments[name] = entry
        }
        for (pointer, blob) in blobs {
            var entry = blob
            entry["@type"] = nil
            entry["stub"] = .bool(true)
            entry["revpos"] = .int(Int64(clamping: revpos))
            attachments[blobPrefix + pointer] = .object(entry)
        }
        var out = body
        out[key] = .object(attachments)
        return out
    }

    /// Whether `body` is sent in legacy form: when the peer lacks `blobs: true` — and also
    /// when the body already has an `_attachments` dictionary (legacy attachments kept from a
    /// Sync Gateway revision) besides blobs, since a receiver fails a revision whose blob's
    /// digest is absent from a present `_attachments` (see ``decode(_:)``); the `blob_`
    /// entries added then are dropped again by the receiver. A body without `_attachments`
    /// never gets one for a peer that said `blobs: true`.
    static func sendsLegacyForm(_ body: [String: JSONValue], peerSupportsBlobs: Bool) -> Bool {
        !peerSupportsBlobs || body[key]?.objectValue != nil
    }

    /// Every blob (`@type: blob` dictionary with a string `digest`) outside the top-level
    /// `_attachments`, with its JSON pointer (RFC 6901: `~` → `~0`, `/` → `~1`), sorted by pointer.
    static func blobsWithPointers(in body: [String: JSONValue]) -> [(pointer: String, blob: [String: JSONValue])] {
        var out: [(String, [String: JSONValue])] = []
        func walk(_ value: JSONValue, _ pointer: String) {
            switch value {
            case .object(let dict):
                if isBlob(dict) { out.append((pointer, dict)); return }
                for (k, v) in dict { walk(v, pointer + "/" + escape(k)) }
            case .array(let items):
                for (i, v) in items.enumerated() { walk(v, pointer + "/" + String(i)) }
            default:
                break
            }
        }
        for (k, v) in body where k != key { walk(v, "/" + escape(k)) }
        return out.sorted { $0.0 < $1.0 }
    }

    // MARK: Receiving

    /// The body of a received revision as stored: every top-level key starting with `_` is
    /// removed, except that `_attachments` entries survive when they are not `blob_<pointer>`
    /// entries pointing at a blob of the body (those are dropped; a digest differing from the
    /// blob's is copied into the blob); `_attachments` is kept only if entries remain.
    ///
    /// Throws `.notFound` (LiteCore: error `LiteCore`/NotFound) when the body has an
    /// `_attachments` dictionary and a blob's digest is in none of its entries. `_removed`
    /// must be looked at before (revocations).
    static func decode(_ body: [String: JSONValue]) throws(PeerSyncError) -> [String: JSONValue] {
        var out = body
        for k in body.keys where k.hasPrefix("_") { out[k] = nil }
        guard let attachments = body[key]?.objectValue else { return out }
        var kept = attachments
        var digests = Set<String>()
        for (name, entry) in attachments {
            if let digest = entry["digest"]?.stringValue { digests.insert(digest) }
            guard name.hasPrefix(blobPrefix), let tokens = parsePointer(String(name.dropFirst(blobPrefix.count))),
                  case .object(let blob)? = value(at: tokens[...], in: .object(out)), isBlob(blob) else { continue }
            kept[name] = nil
            if let digest = entry["digest"]?.stringValue, digest != blob["digest"]?.stringValue {
                var fixed = blob
                fixed["digest"] = .string(digest)
                if case .object(let updated) = replacing(at: tokens[...], in: .object(out), with: .object(fixed)) {
                    out = updated
                }
            }
        }
        for (pointer, blob) in blobsWithPointers(in: out) {
            guard let digest = blob["digest"]?.stringValue, digests.contains(digest) else {
                throw PeerSyncError(.notFound, "blob \(pointer) has a digest absent from _attachments",
                                    context: ["pointer": pointer])
            }
        }
        if !kept.isEmpty { out[key] = .object(kept) }
        return out
    }

    /// The legacy `_attachments` entries of a stored or received body whose content lives in
    /// the blob store (a `sha1-` digest, an integer `length`, no inline `data`), as blob
    /// references (`@type`, `digest`, `length`, `content_type` and `encoding` when present),
    /// sorted by entry name.
    static func attachmentReferences(in body: [String: JSONValue]) -> [[String: JSONValue]] {
        guard let attachments = body[key]?.objectValue else { return [] }
        var out: [[String: JSONValue]] = []
        for name in attachments.keys.sorted() {
            guard let entry = attachments[name]?.objectValue, entry["data"] == nil,
                  let digest = entry["digest"]?.stringValue, digest.hasPrefix("sha1-"),
                  entry["length"]?.intValue != nil else { continue }
            var ref: [String: JSONValue] = ["@type": "blob", "digest": .string(digest)]
            for field in ["length", "content_type", "encoding"] where entry[field] != nil { ref[field] = entry[field] }
            out.append(ref)
        }
        return out
    }

    // MARK: JSON pointers

    static func isBlob(_ dict: [String: JSONValue]) -> Bool {
        dict["@type"]?.stringValue == "blob" && dict["digest"]?.stringValue != nil
    }

    static func escape(_ token: String) -> String {
        guard token.contains("~") || token.contains("/") else { return token }
        return token.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }

    /// The unescaped tokens of a JSON pointer (`/a/b~1c` → `["a", "b/c"]`); nil unless it
    /// starts with `/`.
    static func parsePointer(_ pointer: String) -> [String]? {
        guard pointer.hasPrefix("/") else { return nil }
        return pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
    }

    static func value(at tokens: ArraySlice<String>, in value: JSONValue) -> JSONValue? {
        guard let first = tokens.first else { return value }
        switch value {
        case .object(let dict):
            return dict[first].flatMap { Self.value(at: tokens.dropFirst(), in: $0) }
        case .array(let items):
            guard let i = arrayIndex(first), i < items.count else { return nil }
            return Self.value(at: tokens.dropFirst(), in: items[i])
        default:
            return nil
        }
    }

    /// `value` with the element at `tokens` (which must exist) replaced by `new`.
    static func replacing(at tokens: ArraySlice<String>, in value: JSONValue, with new: JSONValue) -> JSONValue {
        guard let first = tokens.first else { return new }
        switch value {
        case .object(var dict):
            guard let child = dict[first] else { return value }
            dict[first] = replacing(at: tokens.dropFirst(), in: child, with: new)
            return .object(dict)
        case .array(var items):
            guard let i = arrayIndex(first), i < items.count else { return value }
            items[i] = replacing(at: tokens.dropFirst(), in: items[i], with: new)
            return .array(items)
        default:
            return value
        }
    }

    /// A JSON-pointer array index: decimal digits without a leading zero.
    private static func arrayIndex(_ token: String) -> Int? {
        guard !token.isEmpty, token.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
              token == "0" || !token.hasPrefix("0") else { return nil }
        return Int(token)
    }
}
