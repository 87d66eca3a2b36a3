import Testing
@testable import PeerSyncCore

/// Pins PeerSync's revision-ID digest with worked examples, so the scheme cannot change
/// unnoticed (a change would make upgraded peers mint different IDs for identical edits).
///
/// These are PeerSync's IDs, not LiteCore's: the digest is SHA-1 of
/// `byte(len(parent)) ‖ parent ‖ byte(deleted) ‖ canonical JSON body`, whereas LiteCore hashes
/// the body in Fleece with per-database shared keys. Couchbase Lite 3.0 gives `{"v":"base"}`
/// as a first revision `1-23f32bd7…` on a fresh database; PeerSync gives `1-e2c8d8cc…`.
/// See "Revision IDs" in `Packages/Replicator/README.md`.
@Suite struct RevisionIDDigestTests {
    static let first = "1-e2c8d8cca1e140e386add63f58ad1493363b6e4d"
    static let child = "2-83c12a241cf9bc433f8d6059b95f8f14a7c988d2"
    static let deletion = "3-9d2ca578a42cf1d64ac310a645a8982e5420d097"

    @Test func firstRevision() {
        let id = RevisionID.next(parent: nil, deleted: false, canonicalBody: Array(#"{"v":"base"}"#.utf8))
        #expect(id.description == Self.first)
        #expect(!id.digest.hasPrefix("23f32bd7"))  // Couchbase Lite 3.0's ID for the same edit
    }

    @Test func childRevision() throws {
        let id = RevisionID.next(parent: try RevisionID(Self.first), deleted: false,
                                 canonicalBody: Array(#"{"v":"edit"}"#.utf8))
        #expect(id.description == Self.child)
    }

    @Test func deletion() throws {
        let id = RevisionID.next(parent: try RevisionID(Self.child), deleted: true, canonicalBody: Array("{}".utf8))
        #expect(id.description == Self.deletion)
        // The deletion flag is part of the digest.
        let live = RevisionID.next(parent: try RevisionID(Self.child), deleted: false, canonicalBody: Array("{}".utf8))
        #expect(live.generation == 3 && live != id)
    }

    @Test func digestDependsOnlyOnTheCanonicalBody() throws {
        // Two peers that write the same properties in a different order or layout get the same ID.
        let a = try JSONValue(parsing: #"{"b":1,"a":[true,null]}"#)
        let b = try JSONValue(parsing: #" { "a" : [ true , null ], "b" : 1 } "#)
        let idA = RevisionID.next(parent: nil, deleted: false, canonicalBody: Array(a.canonicalString.utf8))
        let idB = RevisionID.next(parent: nil, deleted: false, canonicalBody: Array(b.canonicalString.utf8))
        #expect(idA == idB)
        #expect(a.canonicalString == #"{"a":[true,null],"b":1}"#)
        #expect(idA.description == "1-c0f9afa73d4cde3832c0c8ce3acc478355ef9d37")
    }
}
