/// A revision ID of a revision tree: `<generation>-<digest>`, the generation a decimal
/// integer ≥ 1 and the digest an even number of lowercase hex digits (the rules LiteCore's
/// parser applies, see `reference/replication-protocol.md` §7).
public struct RevisionID: Sendable, Hashable, Comparable, CustomStringConvertible, Codable {
    /// How many revisions deep in the tree this one is, from 1 (a new document's first revision).
    public let generation: UInt64
    /// Lowercase hexadecimal digest.
    public let digest: String

    /// Parses `<generation>-<hex>`; throws ``PeerSyncError/Code/invalidRevisionID``.
    public init(_ text: String) throws(PeerSyncError) {
        // Read in place (a native string's UTF-8 is contiguous): the digest is the only
        // allocation — revision IDs are parsed several times per replicated revision.
        let parsed = text.utf8.withContiguousStorageIfAvailable(Self.parse)
            ?? Array(text.utf8).withUnsafeBufferPointer(Self.parse)
        switch parsed {
        case .valid(let generation, let digest):
            self.generation = generation
            self.digest = digest
        case .noGeneration:
            throw PeerSyncError(.invalidRevisionID, "revision ID must be <generation>-<digest>",
                                context: ["revID": String(text.prefix(80))])
        case .generationNotANumber:
            throw PeerSyncError(.invalidRevisionID, "revision generation is not a number",
                                context: ["revID": String(text.prefix(80))])
        case .invalidDigest:
            throw PeerSyncError(.invalidRevisionID,
                                "revision ID needs generation ≥ 1 and an even number of lowercase hex digits",
                                context: ["revID": String(text.prefix(80))])
        }
    }

    private enum Parsed {
        case valid(UInt64, String)
        case noGeneration, generationNotANumber, invalidDigest
    }

    private static func parse(_ utf8: UnsafeBufferPointer<UInt8>) -> Parsed {
        guard let dash = utf8.firstIndex(of: UInt8(ascii: "-")), dash > 0, dash <= 19 else { return .noGeneration }
        var generation: UInt64 = 0
        for c in utf8[..<dash] {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c) else { return .generationNotANumber }
            generation = generation * 10 + UInt64(c - UInt8(ascii: "0"))
        }
        let hex = UnsafeBufferPointer(rebasing: utf8[(dash + 1)...])
        guard generation >= 1, !hex.isEmpty, hex.count % 2 == 0, hex.count <= 128,
              hex.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) })
        else { return .invalidDigest }
        return .valid(generation, String(decoding: hex, as: UTF8.self))
    }

    /// Builds an ID from parts already known to be valid.
    public init(generation: UInt64, digest: String) {
        self.generation = generation
        self.digest = digest
    }

    /// The ID of a new revision whose parent is `parent` (nil for the first revision):
    /// generation = parent's + 1, digest = SHA-1 of
    /// `byte(len(parent)) ‖ parent as ASCII ‖ deleted-byte ‖ canonical JSON body`.
    ///
    /// This is PeerSync's own digest, not LiteCore's. LiteCore hashes the same framing but
    /// over the body encoded in Fleece with the database's shared keys (dictionary keys
    /// numbered in order of first use in that database), so its IDs depend on per-database
    /// state and cannot be reproduced from the body alone. The same edit made on two PeerSync
    /// peers gets the same ID; the same edit made on a PeerSync peer and on a Couchbase Lite
    /// peer gets different IDs (a conflict that the default resolver settles). See
    /// "Revision IDs" in `Packages/Replicator/README.md`.
    public static func next(parent: RevisionID?, deleted: Bool, canonicalBody: [UInt8]) -> RevisionID {
        var hasher = SHA1()
        let parentText = parent.map { Array($0.description.utf8) } ?? []
        hasher.update([UInt8(min(parentText.count, 255))])
        hasher.update(parentText)
        hasher.update([deleted ? 1 : 0])
        hasher.update(canonicalBody)
        return RevisionID(generation: (parent?.generation ?? 0) + 1, digest: hasher.finalize().hexString)
    }

    public var description: String {
        // One allocation (interpolation took three): IDs are turned back into text for every
        // message and key that carries them.
        var text = ""
        append(to: &text)
        return text
    }

    /// Appends `<generation>-<digest>` to `text`, first reserving room for it unless `text`
    /// already has that room (a caller building a longer string reserves once for all of it).
    public func append(to text: inout String) {
        let generation = String(self.generation)  // ≤ 20 digits: a small string, no allocation
        text.reserveCapacity(text.utf8.count + generation.utf8.count + 1 + digest.utf8.count)
        text.append(generation)
        text.append("-")
        text.append(digest)
    }

    /// Orders by generation, then by digest bytes (the winner rule's last tie-breaker).
    public static func < (lhs: RevisionID, rhs: RevisionID) -> Bool {
        if lhs.generation != rhs.generation { return lhs.generation < rhs.generation }
        return lhs.digest.utf8.lexicographicallyPrecedes(rhs.digest.utf8)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        try self.init(text)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A revision history as it travels in a `rev` message: newest first, each entry one
/// generation older than the previous (`"3-c,2-b,1-a"`).
public struct RevisionHistory: Sendable, Hashable, CustomStringConvertible {
    /// The revisions, newest first.
    public var revisions: [RevisionID]

    /// A history of `revisions`, newest first, taken as given (not validated; ``init(parsing:)``
    /// validates text).
    public init(_ revisions: [RevisionID]) { self.revisions = revisions }

    /// Parses a comma-separated list (spaces after commas allowed). Throws on a malformed ID
    /// or when generations do not decrease by one.
    public init(parsing text: String) throws(PeerSyncError) {
        var result: [RevisionID] = []
        if !text.isEmpty {
            for part in text.split(separator: ",", omittingEmptySubsequences: false) {
                let trimmed = part.drop(while: { $0 == " " })
                let id = try RevisionID(String(trimmed))
                if let last = result.last, id.generation != last.generation - 1 {
                    throw PeerSyncError(.invalidRevisionID, "revision history generations must decrease by one",
                                        context: ["history": String(text.prefix(200))])
                }
                result.append(id)
            }
        }
        revisions = result
    }

    public var description: String { revisions.map(\.description).joined(separator: ",") }
}
