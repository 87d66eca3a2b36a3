import PeerSyncCore

/// Flags of one revision in a document's revision tree.
@_spi(Replication)
public struct RevisionFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// The revision is a deletion (tombstone).
    public static let deleted = RevisionFlags(rawValue: 1 << 0)
    /// The revision has no children.
    public static let leaf = RevisionFlags(rawValue: 1 << 1)
    /// The revision lies on a branch that was pulled while the local branch was current and
    /// has not been resolved yet (LiteCore's `kRevIsConflict`). Such a branch never wins over
    /// a non-conflict leaf.
    public static let conflict = RevisionFlags(rawValue: 1 << 2)
    /// The revision's body references blobs.
    public static let hasAttachments = RevisionFlags(rawValue: 1 << 3)
    /// Keep this revision's body even when it is no longer a leaf or a recent ancestor
    /// (e.g. the last revision known to a remote peer, the base for delta sync).
    public static let keepBody = RevisionFlags(rawValue: 1 << 4)
    /// The revision is the tombstone (or deleted leaf) that closed the losing branch of a
    /// resolved conflict (LiteCore's `kRevClosed`). It stays local: it is never the current
    /// revision while another leaf exists, so it is never pushed or sent in a pull.
    public static let closed = RevisionFlags(rawValue: 1 << 5)
}

/// A document's revision tree (LiteCore's `RevTree`): every known revision with its parent,
/// flags and, for leaves and recent ancestors, its body as canonical JSON.
///
/// Parents always precede their children in `nodes`, which makes cycles impossible.
/// Not thread-safe; a value type used inside one storage transaction.
struct RevTree: Sendable, Equatable {
    struct Node: Sendable, Equatable {
        var revID: RevisionID
        var parent: Int?
        var flags: RevisionFlags
        /// Canonical JSON of the body, if kept.
        var body: [UInt8]?

        var isLeaf: Bool { flags.contains(.leaf) }
        var isDeleted: Bool { flags.contains(.deleted) }
        var isConflict: Bool { flags.contains(.conflict) }
        var isClosed: Bool { flags.contains(.closed) }
        /// A live leaf (LiteCore's `isActive`).
        var isActive: Bool { isLeaf && !isDeleted }
    }

    private(set) var nodes: [Node] = []

    init() {}

    var isEmpty: Bool { nodes.isEmpty }

    func index(of revID: RevisionID) -> Int? {
        nodes.firstIndex { $0.revID == revID }
    }

    subscript(index: Int) -> Node { nodes[index] }

    /// Whether `a` sorts before `b` in LiteCore's `compareRevs` order: leaves first,
    /// non-conflict before conflict, live before deleted, open before closed (the tombstone
    /// that closed a resolved conflict's losing branch), then the higher revision ID.
    static func sortsBefore(_ a: Node, _ b: Node) -> Bool {
        if a.isLeaf != b.isLeaf { return a.isLeaf }
        if a.isConflict != b.isConflict { return !a.isConflict }
        if a.isDeleted != b.isDeleted { return !a.isDeleted }
        if a.isClosed != b.isClosed { return !a.isClosed }
        return a.revID > b.revID
    }

    /// The current (winning) revision: the first one in `compareRevs` order. Deterministic:
    /// it depends only on the set of nodes and their flags, never on insertion order.
    var winnerIndex: Int? {
        guard !nodes.isEmpty else { return nil }
        var best = 0
        for i in 1..<nodes.count where RevTree.sortsBefore(nodes[i], nodes[best]) { best = i }
        return best
    }

    var winner: Node? { winnerIndex.map { nodes[$0] } }

    /// Whether a live leaf other than the winner exists: the document is in conflict.
    var hasConflict: Bool {
        guard let w = winnerIndex else { return false }
        return nodes.indices.contains { $0 != w && nodes[$0].isActive }
    }

    /// Indices of all leaves, best first.
    var leafIndices: [Int] {
        nodes.indices.filter { nodes[$0].isLeaf }.sorted { RevTree.sortsBefore(nodes[$0], nodes[$1]) }
    }

    /// The revision IDs from `index` back to its oldest known ancestor (newest first,
    /// `index` itself included).
    func ancestry(of index: Int) -> [Int] {
        var out: [Int] = []
        var current: Int? = index
        while let i = current, out.count <= nodes.count {
            out.append(i)
            current = nodes[i].parent
        }
        return out
    }

    private func hasChildren(_ index: Int) -> Bool {
        nodes.contains { $0.parent == index }
    }

    // MARK: Mutations

    /// Appends a revision as a child of `parent` (a root when nil). The parent stops being a
    /// leaf. Returns the new node's index.
    @discardableResult
    mutating func add(revID: RevisionID, parent: Int?, body: [UInt8]?, flags: RevisionFlags) -> Int {
        var flags = flags
        flags.insert(.leaf)
        if let parent { nodes[parent].flags.remove(.leaf) }
        nodes.append(Node(revID: revID, parent: parent, flags: flags, body: body))
        return nodes.count - 1
    }

    /// Adds a new local revision (a save or delete) as a child of `parent`, computing its ID
    /// with ``RevisionID/next(parent:deleted:canonicalBody:)``. A local revision is never a
    /// conflict; extending a conflict-flagged branch clears the flag on that branch. If an
    /// identical revision already exists (same parent, body and deletion, e.g. made by a peer
    /// earlier, or by an earlier resolution of the same conflict), no node is added: it is
    /// reopened (``reopen(_:)``: the local-only tombstone that closed it goes, so it is a leaf
    /// again and can be current) and its branch is marked as not in conflict.
    /// Returns the index of the revision (indices may shift).
    @discardableResult
    mutating func addLocal(parent: Int?, body: [UInt8], deleted: Bool, hasAttachments: Bool) -> Int {
        let revID = RevisionID.next(parent: parent.map { nodes[$0].revID }, deleted: deleted, canonicalBody: body)
        if let existing = reopen(revID) {
            markBranchNotConflict(existing)
            // The same ID means the same content: restore a body dropped from an old ancestor.
            if nodes[existing].body == nil { nodes[existing].body = body }
            return existing
        }
        var flags: RevisionFlags = []
        if deleted { flags.insert(.deleted) }
        if hasAttachments { flags.insert(.hasAttachments) }
        let i = add(revID: revID, parent: parent, body: body, flags: flags)
        markBranchNotConflict(i)
        return i
    }

    /// The outcome of ``insertHistory(revID:history:body:deleted:hasAttachments:allowConflict:markConflict:)``.
    struct HistoryInsertion: Equatable {
        /// Index of the inserted (or already present) revision.
        var index: Int
        /// How many nodes were added (0: the revision was already known).
        var added: Int
        /// Position in `[revID] + history` of the first revision that was already in the tree,
        /// or nil if none was.
        var commonAncestor: Int?
    }

    /// Inserts an existing revision with its history (CouchDB `new_edits=false`, LiteCore
    /// `insertHistory`). `history` lists the ancestors newest first (parent first), each one
    /// generation older than the previous. Ancestors not in the tree are added without
    /// bodies. With `markConflict`, a revision that starts a branch (its parent is not a leaf,
    /// or is a conflict, or it is a second root) is flagged ``RevisionFlags/conflict`` so the
    /// current revision stays current. Without `allowConflict` (a push received by a passive
    /// peer), the revision must extend the current revision — or the document must be new —
    /// otherwise `.conflict` is thrown and nothing changes: a passive peer never lets a push
    /// create a conflict, not even beside a deleted current revision (Couchbase Lite's rule).
    mutating func insertHistory(revID: RevisionID, history: [RevisionID], body: [UInt8], deleted: Bool,
                                hasAttachments: Bool, allowConflict: Bool,
                                markConflict: Bool) throws(PeerSyncError) -> HistoryInsertion {
        let chain = [revID] + history
        for (i, id) in chain.enumerated() where i > 0 {
            guard id.generation + UInt64(i) == revID.generation else {
                throw PeerSyncError(.invalidArgument,
                                    "revision history must list consecutive generations, parent first",
                                    context: ["revID": revID.description, "history": history.map(\.description).joined(separator: ",")])
            }
        }
        var common: (position: Int, index: Int)?
        for (position, id) in chain.enumerated() {
            if let i = index(of: id) { common = (position, i); break }
        }
        if let common, common.position == 0 {
            return HistoryInsertion(index: common.index, added: 0, commonAncestor: 0)
        }
        var parent = common?.index
        // A branch started while the document is deleted replaces the tombstone: it is not
        // a conflict (the CouchDB/LiteCore rule for recreating a deleted document).
        let winnerDeleted = winner?.isDeleted ?? true
        if !allowConflict, let w = winnerIndex, parent != w {
            throw PeerSyncError(.conflict, "the revision's parent is not the current revision",
                                context: ["revID": revID.description, "current": nodes[w].revID.description])
        }
        let top = common?.position ?? chain.count
        var added = 0
        for position in stride(from: top - 1, through: 0, by: -1) {
            let isNew = position == 0
            var flags: RevisionFlags = []
            if isNew && deleted { flags.insert(.deleted) }
            if isNew && hasAttachments { flags.insert(.hasAttachments) }
            if markConflict && !winnerDeleted {
                if let p = parent {
                    if !nodes[p].isLeaf || nodes[p].isConflict || nodes[p].isClosed { flags.insert(.conflict) }
                } else if !nodes.isEmpty {
                    flags.insert(.conflict)
                }
            }
            parent = add(revID: chain[position], parent: parent, body: isNew ? body : nil, flags: flags)
            added += 1
        }
        // `parent` now holds the index of the new revision.
        return HistoryInsertion(index: parent ?? 0, added: added, commonAncestor: common?.position)
    }

    /// Whether `revID` (not in the tree) would replace the current revision without changing
    /// the document: same deletion state and, for a live revision, the same canonical body, and
    /// a higher revision ID (generation, then digest).
    func supersedesWithSameContent(_ revID: RevisionID, body: [UInt8], deleted: Bool) -> Bool {
        guard let w = winnerIndex, index(of: revID) == nil, revID > nodes[w].revID,
              nodes[w].isDeleted == deleted else { return false }
        return deleted || nodes[w].body == body
    }

    /// Takes a pushed revision whose parent is not the current revision, when it has the
    /// current revision's content under a higher ID (``supersedesWithSameContent(_:body:deleted:)``,
    /// checked by the caller): the branch is inserted and the current revision's branch is
    /// closed (a closing tombstone with `closingBody`, or the closed flag on a tombstone), so
    /// the pushed revision is current. Nothing is lost — the content is the same — and no
    /// conflict is left: a passive peer still never lets a push create one. This is how two
    /// peers holding one resolution under two revision IDs (equal bodies on two branches:
    /// "local wins" copies a body onto another branch) agree without a new revision: both
    /// take the higher ID, so around a cycle of peers IDs only ever grow towards one.
    mutating func acceptSameContent(revID: RevisionID, history: [RevisionID], body: [UInt8], deleted: Bool,
                                    hasAttachments: Bool, closingBody: [UInt8]) throws(PeerSyncError) -> HistoryInsertion {
        guard let w = winnerIndex else {
            throw PeerSyncError(.internalError, "no current revision to supersede")
        }
        let previous = nodes[w].revID
        let insertion = try insertHistory(revID: revID, history: history, body: body, deleted: deleted,
                                          hasAttachments: hasAttachments, allowConflict: true, markConflict: false)
        guard let old = index(of: previous) else {
            throw PeerSyncError(.internalError, "the superseded revision vanished")
        }
        if nodes[old].isDeleted {
            markClosed(old)
        } else {
            markClosed(addLocal(parent: old, body: closingBody, deleted: true, hasAttachments: false))
        }
        guard let inserted = index(of: revID) else {
            throw PeerSyncError(.internalError, "the accepted revision vanished")
        }
        markBranchNotConflict(inserted)
        return HistoryInsertion(index: inserted, added: insertion.added, commonAncestor: insertion.commonAncestor)
    }

    /// Marks the leaf at `index` as the closed end of a resolved conflict's losing branch.
    mutating func markClosed(_ index: Int) {
        nodes[index].flags.insert(.closed)
        nodes[index].flags.remove(.conflict)
    }

    /// Reopens the revision with this ID for a new resolution: every branch under it that
    /// ends only in closed leaves (the local-only record of a resolution that went another
    /// way: a closing tombstone, or a whole continuation — e.g. an earlier merge — that was
    /// closed later) is removed, so it becomes a leaf again unless an open branch continues
    /// it; its own closed flag is cleared. Returns its index afterwards (indices shift).
    mutating func reopen(_ revID: RevisionID) -> Int? {
        guard let index = index(of: revID) else { return nil }
        // Parents always come before their children (see `validate()`), so one backward
        // pass settles, for every node, whether all the leaves under it are closed.
        var closedOnly = nodes.map { $0.isClosed }
        var hasChild = [Bool](repeating: false, count: nodes.count)
        for i in nodes.indices.reversed() {
            if let p = nodes[i].parent {
                closedOnly[p] = (hasChild[p] ? closedOnly[p] : true) && closedOnly[i]
                hasChild[p] = true
            }
        }
        var remove = Set<Int>()
        for i in nodes.indices where i > index {
            guard let p = nodes[i].parent else { continue }
            if (p == index && closedOnly[i]) || remove.contains(p) { remove.insert(i) }
        }
        if !remove.isEmpty { removeNodes(remove) }
        guard let reopened = self.index(of: revID) else { return nil }
        nodes[reopened].flags.remove(.closed)
        return reopened
    }

    /// Clears ``RevisionFlags/conflict`` on `index` and all its ancestors.
    mutating func markBranchNotConflict(_ index: Int) {
        for i in ancestry(of: index) { nodes[i].flags.remove(.conflict) }
    }

    /// Removes the leaf at `index` and every ancestor that no other revision descends from
    /// (the losing branch of a resolved conflict, up to the common ancestor).
    mutating func purgeBranch(leaf index: Int) {
        var remove = Set<Int>()
        var current: Int? = index
        while let i = current {
            let children = nodes.indices.filter { nodes[$0].parent == i && !remove.contains($0) }
            guard children.isEmpty else { break }
            remove.insert(i)
            current = nodes[i].parent
        }
        removeNodes(remove)
    }

    /// Removes every revision more than `maxDepth` generations away from every leaf. Leaves
    /// are always kept (`maxDepth` < 1 is treated as 1).
    mutating func prune(maxDepth: Int) {
        let depth = max(1, maxDepth)
        guard nodes.count > depth else { return }
        var keep = Set<Int>()
        for leaf in nodes.indices where nodes[leaf].isLeaf {
            var current: Int? = leaf
            var d = 0
            while let i = current, d < depth {
                keep.insert(i)
                current = nodes[i].parent
                d += 1
            }
        }
        let remove = Set(nodes.indices).subtracting(keep)
        if !remove.isEmpty { removeNodes(remove) }
    }

    /// Drops the bodies of revisions that are neither leaves, nor within `ancestorDepth`
    /// generations of a leaf, nor flagged ``RevisionFlags/keepBody``.
    mutating func dropOldBodies(ancestorDepth: Int) {
        var keep = Set<Int>()
        for leaf in nodes.indices where nodes[leaf].isLeaf {
            var current: Int? = leaf
            var d = 0
            while let i = current, d <= ancestorDepth {
                keep.insert(i)
                current = nodes[i].parent
                d += 1
            }
        }
        for i in nodes.indices where nodes[i].body != nil && !keep.contains(i) && !nodes[i].flags.contains(.keepBody) {
            nodes[i].body = nil
        }
    }

    /// Sets or clears ``RevisionFlags/keepBody`` on a revision.
    mutating func setKeepBody(_ index: Int, _ keep: Bool) {
        if keep { nodes[index].flags.insert(.keepBody) } else { nodes[index].flags.remove(.keepBody) }
    }

    private mutating func removeNodes(_ remove: Set<Int>) {
        var newIndex = [Int?](repeating: nil, count: nodes.count)
        var kept: [Node] = []
        kept.reserveCapacity(nodes.count - remove.count)
        for (i, node) in nodes.enumerated() where !remove.contains(i) {
            newIndex[i] = kept.count
            kept.append(node)
        }
        for i in kept.indices {
            if let p = kept[i].parent { kept[i].parent = newIndex[p] }
        }
        nodes = kept
        // Recompute leaf flags: a node is a leaf exactly when nothing descends from it.
        var hasChild = [Bool](repeating: false, count: nodes.count)
        for node in nodes { if let p = node.parent { hasChild[p] = true } }
        for i in nodes.indices {
            if hasChild[i] { nodes[i].flags.remove(.leaf) } else { nodes[i].flags.insert(.leaf) }
        }
    }

    /// Structural problems (empty when the tree is consistent).
    func validate() -> [String] {
        var problems: [String] = []
        var hasChild = [Bool](repeating: false, count: nodes.count)
        var seen = Set<RevisionID>()
        for (i, node) in nodes.enumerated() {
            if !seen.insert(node.revID).inserted { problems.append("duplicate revision \(node.revID)") }
            if let p = node.parent {
                if p < 0 || p >= i {
                    problems.append("revision \(node.revID) has an invalid parent index")
                    continue
                }
                hasChild[p] = true
                if nodes[p].revID.generation + 1 != node.revID.generation {
                    problems.append("revision \(node.revID) has parent \(nodes[p].revID) of a wrong generation")
                }
            }
        }
        for (i, node) in nodes.enumerated() where node.isLeaf == hasChild[i] {
            problems.append("revision \(node.revID) has a wrong leaf flag")
        }
        for node in nodes where node.isLeaf && node.body == nil {
            problems.append("leaf revision \(node.revID) has no body")
        }
        return problems
    }
}

// MARK: - Binary encoding

extension RevTree {
    private static let formatVersion: UInt8 = 1
    private static let hasBodyBit: UInt8 = 1 << 7

    /// Encodes the tree for a record's `extra`. The winner's body is left out (it lives in the
    /// record's `body`); ``decode(_:winnerBody:)`` puts it back.
    func encode() -> [UInt8] {
        var out: [UInt8] = [RevTree.formatVersion]
        let winner = winnerIndex
        out.appendVarint(UInt64(nodes.count))
        out.appendVarint(UInt64(winner.map { $0 + 1 } ?? 0))
        for (i, node) in nodes.enumerated() {
            out.appendVarint(node.revID.generation)
            let digest = RevTree.hexDecode(node.revID.digest)
            out.appendVarint(UInt64(digest.count))
            out.append(contentsOf: digest)
            out.appendVarint(UInt64(node.parent.map { $0 + 1 } ?? 0))
            var flagByte = node.flags.rawValue & 0x7F
            if node.body != nil { flagByte |= RevTree.hasBodyBit }
            out.append(flagByte)
            if let body = node.body, i != winner {
                out.appendVarint(UInt64(body.count))
                out.append(contentsOf: body)
            }
        }
        return out
    }

    /// Decodes a tree written by ``encode()``; throws `.corrupt` on malformed data.
    static func decode(_ bytes: [UInt8], winnerBody: [UInt8]) throws(PeerSyncError) -> RevTree {
        var reader = ByteReader(bytes: bytes)
        guard try reader.byte() == formatVersion else {
            throw PeerSyncError(.corrupt, "unknown revision tree format")
        }
        let count = try reader.varint()
        guard count <= UInt64(bytes.count) else { throw PeerSyncError(.corrupt, "revision tree node count is too large") }
        let winnerPlusOne = try reader.varint()
        guard winnerPlusOne <= count else { throw PeerSyncError(.corrupt, "revision tree winner index out of range") }
        let storedWinner: Int? = winnerPlusOne == 0 ? nil : Int(winnerPlusOne - 1)
        var tree = RevTree()
        tree.nodes.reserveCapacity(Int(count))
        for i in 0..<Int(count) {
            let generation = try reader.varint()
            let digestLength = try reader.varint()
            // Generations beyond 19 decimal digits cannot be written as revision IDs.
            guard generation >= 1, generation < 10_000_000_000_000_000_000, digestLength >= 1, digestLength <= 64 else {
                throw PeerSyncError(.corrupt, "invalid revision ID in revision tree")
            }
            let digest = try reader.bytes(Int(digestLength))
            let parentPlusOne = try reader.varint()
            guard parentPlusOne <= UInt64(i) else { throw PeerSyncError(.corrupt, "revision tree parent index out of range") }
            let flagByte = try reader.byte()
            var body: [UInt8]?
            if flagByte & hasBodyBit != 0 {
                if i == storedWinner {
                    body = winnerBody
                } else {
                    let length = try reader.varint()
                    guard length <= UInt64(bytes.count) else { throw PeerSyncError(.corrupt, "revision body length out of range") }
                    body = try reader.bytes(Int(length))
                }
            }
            tree.nodes.append(Node(revID: RevisionID(generation: generation, digest: digest.hexString),
                                   parent: parentPlusOne == 0 ? nil : Int(parentPlusOne - 1),
                                   flags: RevisionFlags(rawValue: flagByte & 0x7F), body: body))
        }
        guard reader.isAtEnd else { throw PeerSyncError(.corrupt, "trailing bytes after revision tree") }
        guard tree.winnerIndex == storedWinner else {
            throw PeerSyncError(.corrupt, "revision tree's stored winner does not match its flags")
        }
        return tree
    }

    static func hexDecode(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for c in hex.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c - UInt8(ascii: "A") + 10
            default: v = 0
            }
            if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
        }
        return out
    }
}

extension [UInt8] {
    mutating func appendVarint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        append(UInt8(v))
    }
}

/// Bounds-checked reading of stored bytes; every failure is `.corrupt`.
struct ByteReader {
    let bytes: [UInt8]
    var offset = 0

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() throws(PeerSyncError) -> UInt8 {
        guard offset < bytes.count else { throw PeerSyncError(.corrupt, "stored data is truncated") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws(PeerSyncError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let b = try byte()
            guard shift < 64 else { throw PeerSyncError(.corrupt, "stored varint is too long") }
            result |= UInt64(b & 0x7F) << shift
            if b & 0x80 == 0 { return result }
            shift += 7
        }
    }

    mutating func bytes(_ count: Int) throws(PeerSyncError) -> [UInt8] {
        guard count >= 0, count <= bytes.count - offset else { throw PeerSyncError(.corrupt, "stored data is truncated") }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }
}
