import PeerSyncBLIP
import PeerSyncCore

/// `revs`: several revisions in one request — PeerSync's extension of the replication
/// protocol, used only between PeerSync peers. Couchbase Lite peers never see it: a side
/// that takes `revs` says so in its replies to `changes` and `proposeChanges` (the property
/// ``capabilityProperty``, the most revisions it takes per message, which Couchbase Lite does
/// not send and ignores), and a pusher sends `revs` only after such a reply; otherwise each
/// revision goes in a `rev` of its own, as the protocol defines.
///
/// Why: a `rev` carries one revision, so every revision costs a request and a reply, with
/// their frames, the connection's bookkeeping and a handler task on each side. Between
/// PeerSync peers (a mesh, a peer-to-peer pair) small documents travel many to a `revs`
/// message: one request, one reply, one handler (`Packages/Mesh/BENCHMARKS.md` has the
/// figures).
///
/// The request: the `collection` property as a `rev` has (none in legacy mode); the body a
/// JSON array, one object per revision, holding what a `rev` would carry as properties (`id`,
/// `rev`, `sequence`, `history`, `deleted`, `noconflicts` — string values) and its body under
/// `"body"`. Only full bodies without blobs, of at most ``maxEntryBytes``, travel this way; a
/// revision sent as a delta or referencing blobs still goes in a `rev` (the peer fetches blobs
/// while a `rev` waits for its reply, and a delta may be refused and resent). A `revs` message
/// is compressed when its bodies average the size from which a `rev` would be.
///
/// The reply: a JSON array with one element per revision, in order — `null` when it was
/// handled (stored, or deliberately not: already there, filtered), else the error a `rev`
/// would have been answered with, `{"domain": …, "code": …, "message": …}`. An error reply to
/// the whole request applies to each of its revisions.
enum RevisionBatch {
    /// The request's profile.
    static let profile = "revs"
    /// The property of a `changes`/`proposeChanges` reply offering `revs`: the most revisions
    /// the replying side takes in one message.
    static let capabilityProperty = "revsPerMessage"
    /// The most revisions per `revs` message, offered and sent.
    static let maxRevisions = 100
    /// A `revs` message is closed before its body passes this many bytes. Small, so that a
    /// link that breaks often still gets whole messages through between breaks (each `rev`
    /// answered is progress the next connection keeps; a batch is all or nothing on the wire)
    /// and one message does not hold the connection for long.
    static let maxBytes = 16 * 1024
    /// A body larger than this goes alone in a `rev`: batching saves a message's overhead,
    /// which only matters next to small bodies.
    static let maxEntryBytes = 2 * 1024

    /// One revision's entry: `properties` as string members, then `"body":` and `body` (the
    /// stored canonical JSON bytes, spliced in without being parsed).
    static func entry(_ properties: BLIPProperties, body: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(body.count + 160)
        out.append(UInt8(ascii: "{"))
        for (key, value) in properties {
            JSONValue.string(key).write(to: &out)
            out.append(UInt8(ascii: ":"))
            JSONValue.string(value).write(to: &out)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""body":"#.utf8)
        out.append(contentsOf: body)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The body of a `revs` request holding `entries`.
    static func body(_ entries: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(entries.reduce(2) { $0 + $1.count + 1 })
        for (i, entry) in entries.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: entry)
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// The properties and body of each entry of a `revs` request's body. An entry that is not
    /// an object, or lacks a `body`, comes back without properties (or with a `null` body),
    /// which reading it refuses as a malformed revision (`HTTP`/400), as it would a `rev`.
    /// Throws a protocol error when the body is not JSON and `BLIP`/400 when not an array.
    static func entries(_ body: [UInt8]) throws -> [(BLIPProperties, JSONValue)] {
        guard let items = try JSONValue.parse(body, profile).arrayValue else {
            throw PeerSyncError.reply(.blip(400, "revs body must be an array"))
        }
        return items.map { item in
            guard let object = item.objectValue else { return ([], .null) }
            var properties = BLIPProperties()
            for (key, value) in object where key != "body" {
                if let text = value.stringValue { properties[key] = text }
            }
            return (properties, object["body"] ?? .null)
        }
    }

    /// The reply to a `revs` request: per revision, `null` or its error.
    static func reply(_ results: [BLIPError?]) -> BLIPMessage {
        let items: [JSONValue] = results.map { error in
            guard let error else { return .null }
            return .object(["domain": .string(error.domain), "code": .int(Int64(error.code)), "message": .string(error.message)])
        }
        return BLIPMessage(type: .response, body: JSONValue.array(items).json)
    }

    /// Each revision's outcome in the reply to a `revs` request of `count` revisions: nil when
    /// handled, else the error the peer answered it with. An error reply applies to every
    /// revision. Throws a protocol error for a reply that does not answer each revision.
    static func results(of reply: BLIPMessage, count: Int) throws -> [BLIPError?] {
        if let whole = reply.blipError { return Array(repeating: whole, count: count) }
        guard let items = try JSONValue.parse(reply.body, "revs reply").arrayValue, items.count == count else {
            throw PeerSyncError(.protocolError, "the peer's reply to revs does not answer each of its \(count) revisions")
        }
        return try items.map { item in
            if item.isNull { return nil }
            guard let domain = item["domain"]?.stringValue, let code = item["code"]?.intValue else {
                throw PeerSyncError(.protocolError, "the peer's reply to revs holds a malformed error: \(item.canonicalString)")
            }
            return BLIPError(domain: domain, code: Int(code), message: item["message"]?.stringValue ?? "")
        }
    }
}
