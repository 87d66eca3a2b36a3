// libFuzzer target: how the replicator reads a peer's replication messages — the pure
// pieces that the replicator workers' handlers (actors over a database, not built here) apply
// to a request's properties and body, called in the handlers' order and with their checks:
//
// (JSONValue.parse in Support.swift is JSONValue(parsing:) with another error code: called directly.)
//
//   changes / proposeChanges   body: JSON array of entries [seq, docID, revID, …] /
//                              [docID, revID, serverRev?]; docID and RevisionID checks,
//                              the revocation flag (entry[3]) and the sequence key
//   rev                        properties id / rev / history / deleted / deltaSrc /
//                              sequence; body JSON; JSONDelta.apply against a base
//                              body (LegacyAttachments.encode'd when the delta touches
//                              _attachments); LegacyAttachments.decode and
//                              attachmentReferences; then RevTree.insertHistory (what
//                              Database.insertRevision does with the history) into a
//                              small existing tree, both as passive (no conflict allowed)
//                              and active peer
//   setCheckpoint / getCheckpoint / getCollections / subChanges / noRev, and the replies
//   an active peer reads (changes reply, proposeChanges reply, getCollections reply)
//
// Input: byte 0 picks the message; the rest is BLIP message content, varint(properties
// length) ‖ properties ‖ body, decoded with the library's BLIPProperties.decode.
// Properties checked (a violation traps):
// - nothing traps, whatever the bytes;
// - every accepted revision ID re-parses from its description to the same ID, and a history
//   the handler accepts is also accepted by RevisionHistory(parsing:) when written back;
// - docIDs are checked with DocumentID.validate, as the handlers do;
// - a revision tree stays consistent after insertHistory (RevTree.validate() is empty), the
//   inserted revision is in it and the winner is a leaf, and its binary encoding decodes back
//   to the same tree.
//
// Not covered (needs the actor and a database): the database reads and writes, conflict
// resolution, blob fetching, the replies' effects on replication state, validatedBody.

import Foundation
import PeerSyncCore

// Stand-ins for the handlers' private helpers that are not standalone-compilable; each is a
// copy of a one-line rule in Responder.swift / Revocation.swift (see there).
enum Mirror {
    /// Puller.isRevocation (Revocation.swift).
    static func isRevocation(_ flags: JSONValue?) -> Bool {
        let value: Int64
        switch flags {
        case nil, .null?: value = 0
        case .bool(let b)?: value = b ? 1 : 0
        case .int(let i)?: value = i
        case .double(let d)?: value = Int64(exactly: d) ?? 0
        default: value = 0
        }
        return value != 0 && value != 1 && value != 5
    }
    /// Responder.checkpointKey.
    static func checkpointKey(_ client: String) -> String {
        "checkpoint/" + String(decoding: client.utf8.prefix(200), as: UTF8.self)
    }
    /// DocumentEngine.maxGeneration.
    static let maxGeneration: UInt64 = 1 << 53
}

func checkRevID(_ text: String) -> RevisionID? {
    guard let id = try? RevisionID(text) else { return nil }
    guard let again = try? RevisionID(id.description), again == id, again.description == id.description else {
        fatalError("revision ID \(text) does not round-trip through \(id.description)")
    }
    if id.generation < 1 || id.digest.isEmpty { fatalError("accepted invalid revision ID \(text)") }
    return id
}

/// The handlers' docID check: DocumentID.validate (non-empty, ≤ 255 UTF-8 bytes, no control
/// characters), whose refusals are per-document errors.
func acceptsDocID(_ id: String) -> Bool {
    (try? DocumentID.validate(id)) != nil
}

let baseBody = try! JSONValue(parsing: #"""
    {"type": "note", "title": "hello", "n": 3, "tags": ["a", "b"],
     "photo": {"@type": "blob", "digest": "sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA=", "length": 3, "content_type": "text/plain"},
     "nested": {"list": [1, 2, {"x": "y"}]}}
    """#).objectValue!

/// An existing document: 1-aa ← 2-bb ← 3-cc (current) and a conflicting 3-dd branch from 2-bb.
func baseTree() -> RevTree {
    var tree = RevTree()
    let r1 = tree.add(revID: RevisionID(generation: 1, digest: "aa"), parent: nil, body: nil, flags: [])
    let r2 = tree.add(revID: RevisionID(generation: 2, digest: "bb"), parent: r1, body: nil, flags: [])
    tree.add(revID: RevisionID(generation: 3, digest: "cc"), parent: r2, body: Array(#"{"a":1}"#.utf8), flags: [])
    tree.add(revID: RevisionID(generation: 3, digest: "dd"), parent: r2, body: Array(#"{"a":2}"#.utf8), flags: [.conflict])
    return tree
}

func insert(_ revID: RevisionID, history: [RevisionID], body: [UInt8], deleted: Bool, allowConflict: Bool, into start: RevTree) {
    var tree = start
    guard revID.generation <= Mirror.maxGeneration else { return }
    let before = tree
    let insertion: RevTree.HistoryInsertion
    do {
        insertion = try tree.insertHistory(revID: revID, history: history, body: body, deleted: deleted,
                                           hasAttachments: false, allowConflict: allowConflict, markConflict: true)
    } catch {
        if tree != before { fatalError("a refused insertHistory changed the tree") }
        return
    }
    let problems = tree.validate()
    if !problems.isEmpty { fatalError("revision tree inconsistent after insertHistory: \(problems)") }
    guard tree.index(of: revID) == insertion.index else { fatalError("inserted revision not at the reported index") }
    if insertion.added == 0 && tree != before { fatalError("nothing added but the tree changed") }
    if tree.nodes.count != before.nodes.count + insertion.added { fatalError("node count does not match 'added'") }
    guard let winner = tree.winnerIndex, tree[winner].isLeaf else { fatalError("winner is not a leaf") }
    let encoded = tree.encode()
    guard let decoded = try? RevTree.decode(encoded, winnerBody: tree[winner].body ?? []), decoded == tree else {
        fatalError("revision tree does not survive its binary encoding")
    }
}

func changes(_ body: [UInt8], proposed: Bool) {
    guard let entries = (try? JSONValue(parsing: body))?.arrayValue, !entries.isEmpty else { return }
    let offset = proposed ? 0 : 1
    _ = entries.compactMap { $0.arrayValue.flatMap { $0.count > offset ? $0[offset].stringValue : nil } }
    var answers: [JSONValue] = []
    for entry in entries {
        guard let e = entry.arrayValue else { return }
        guard e.count > offset + 1, let docID = e[offset].stringValue, acceptsDocID(docID),
              let revText = e[offset + 1].stringValue, let revID = checkRevID(revText) else { return }
        if proposed {
            let serverRev = e.count > 2 ? e[2].stringValue.flatMap { $0.isEmpty ? nil : checkRevID($0) } : nil
            answers.append(serverRev == revID ? .int(304) : .int(0))
        } else {
            _ = Mirror.isRevocation(e.count > 3 ? e[3] : nil)
            let key = e[0].canonicalString
            // noRev / rev carry the sequence back as a property; it must find the same key.
            if (try? JSONValue(parsing: key))?.canonicalString != key { fatalError("sequence key \(key) is not stable") }
            answers.append(.array([.string(revID.description)]))
        }
    }
    _ = JSONValue.array(answers).canonicalData
}

func rev(_ props: BLIPProperties, _ body: [UInt8], allowConflict: Bool) {
    if let seq = props["sequence"] { _ = (try? JSONValue(parsing: seq))?.canonicalString ?? seq }
    guard let docID = props["id"], acceptsDocID(docID), let revText = props["rev"], let revID = checkRevID(revText) else { return }
    var history: [RevisionID] = []
    if let text = props["history"], !text.isEmpty {
        for part in text.split(separator: ",") {
            guard let r = checkRevID(part.trimmingCharacters(in: .whitespaces)) else { return }
            history.append(r)
        }
        // Consecutive histories written back in the canonical form parse alike.
        let consecutive = zip(history, history.dropFirst()).allSatisfy { $0.generation == $1.generation + 1 }
        if consecutive {
            let canonical = RevisionHistory(history).description
            guard let reparsed = try? RevisionHistory(parsing: canonical), reparsed.revisions == history else {
                fatalError("history \(canonical) does not re-parse")
            }
        }
    }
    let deleted = props.bool("deleted")
    guard let parsed = try? JSONValue(parsing: body) else { return }
    var newBody = parsed
    if let src = props["deltaSrc"] {
        guard let base = checkRevID(src) else { return }
        var old = baseBody
        if parsed[LegacyAttachments.key] != nil { old = LegacyAttachments.encode(old, revpos: base.generation) }
        guard let applied = try? JSONDelta.apply(parsed, to: .object(old)) else { return }
        newBody = applied
    }
    guard var object = newBody.objectValue else { return }
    if object["_removed"] == .bool(true) { return }
    guard let decoded = try? LegacyAttachments.decode(object) else { return }
    object = decoded
    if object.keys.contains(where: { $0.hasPrefix("_") && $0 != LegacyAttachments.key }) {
        fatalError("LegacyAttachments.decode kept a special property")
    }
    _ = LegacyAttachments.attachmentReferences(in: object)
    _ = LegacyAttachments.blobsWithPointers(in: object)
    let canonical = JSONValue.object(object).canonicalData
    insert(revID, history: history, body: canonical, deleted: deleted, allowConflict: allowConflict, into: baseTree())
    insert(revID, history: history, body: canonical, deleted: deleted, allowConflict: allowConflict, into: RevTree())
    _ = RevisionID.next(parent: revID, deleted: deleted, canonicalBody: canonical)
}

func checkpoint(_ props: BLIPProperties, _ body: [UInt8]) {
    guard let client = props["client"], !client.isEmpty else { return }
    let key = Mirror.checkpointKey(client)
    if key.utf8.count > "checkpoint/".utf8.count + 200 + 2 { fatalError("checkpoint key too long") }
    guard let value = try? JSONValue(parsing: body) else { return }
    _ = value.objectValue?["rev"]
    _ = props["rev"] ?? ""
}

func getCollections(_ body: [UInt8]) {
    guard let object = (try? JSONValue(parsing: body))?.objectValue,
          let names = object["collections"]?.arrayValue, let ids = object["checkpoint_ids"]?.arrayValue,
          names.count == ids.count, !names.isEmpty else { return }
    let paths = names.compactMap(\.stringValue)
    guard paths.count == names.count, Set(paths).count == paths.count else { return }
    for id in ids { if let client = id.stringValue { _ = Mirror.checkpointKey(client) } }
}

func subChanges(_ props: BLIPProperties, _ body: [UInt8]) {
    _ = props["since"].flatMap { UInt64($0) } ?? 0
    _ = props.bool("continuous")
    _ = props.bool("activeOnly")
    if !body.isEmpty, let ids = (try? JSONValue(parsing: body))?.objectValue?["docIDs"]?.arrayValue {
        for id in ids { if let s = id.stringValue { _ = acceptsDocID(s) } }
    }
}

/// What an active peer reads from a `proposeChanges` / `changes` / `getCollections` reply.
func replies(_ props: BLIPProperties, _ body: [UInt8]) {
    _ = props.int("maxHistory")
    _ = props.bool("deltas")
    _ = props.bool("blobs")
    guard let value = try? JSONValue(parsing: body) else { return }
    for answer in value.arrayValue ?? [] {
        _ = answer.intValue ?? answer["status"]?.intValue ?? (answer.isNull ? 0 : 500)
        _ = (answer["rev"]?.stringValue).flatMap { checkRevID($0) }
        if let known = answer.arrayValue { _ = known.compactMap { $0.stringValue.flatMap { checkRevID($0) } } }
        if let object = answer.objectValue { _ = object["rev"]?.stringValue }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReplicationMessages(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let kind = input[0]
    let content = input[1...]
    var index = content.startIndex
    guard let length = try? Varint.read(content, at: &index), length <= UInt64(content.endIndex - index) else { return 0 }
    let propsEnd = index + Int(length)
    guard let props = try? BLIPProperties.decode(content[index..<propsEnd]) else { return 0 }
    let body = Array(content[propsEnd...])
    switch kind % 10 {
    case 0: changes(body, proposed: false)
    case 1: changes(body, proposed: true)
    case 2: rev(props, body, allowConflict: false)
    case 3: rev(props, body, allowConflict: true)
    case 4: checkpoint(props, body)
    case 5: getCollections(body)
    case 6: subChanges(props, body)
    case 7: if let seq = props["sequence"] { _ = (try? JSONValue(parsing: seq))?.canonicalString ?? seq }
    default: replies(props, body)
    }
    return 0
}
