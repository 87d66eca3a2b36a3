@testable import PeerSyncReplicator
import PeerSyncCore
import Testing

@Suite struct RecentCacheTests {
    @Test func keepsAtLeastTheLastCapacityEntriesAndAtMostTwice() {
        var map = RecentMap<Int>(capacity: 100)
        for i in 0..<1_000 {
            map["k\(i)"] = i
            #expect(map.count <= 200)
        }
        for i in 900..<1_000 { #expect(map["k\(i)"] == i) }
        #expect(map["k0"] == nil)
        #expect(map["k500"] == nil)
    }

    @Test func overwriteAndRemoveSeeBothGenerations() {
        var map = RecentMap<String>(capacity: 2)
        map["a"] = "1"
        map["b"] = "2"  // generation turns over: a, b are now previous
        #expect(map["a"] == "1")
        map["a"] = "3"
        #expect(map["a"] == "3")
        map["b"] = nil
        #expect(map["b"] == nil)
    }

    @Test func setIsBoundedToo() {
        let set: RecentSet = ["x"]
        #expect(set.contains("x"))
        #expect(!set.contains("y"))
        var small = RecentSet(capacity: 10)
        for i in 0..<100 { small.insert("\(i)") }
        #expect(small.count <= 20)
        #expect(small.contains("99"))
        #expect(!small.contains("0"))
    }

    /// A SHA-1 revision ID packs without its digest string and comes back the same; any other
    /// digest (upper case, other length, not hex) is kept as it is; equal IDs pack equal.
    @Test func packedRevisionIDsRoundTrip() throws {
        var random = SystemRandomNumberGenerator()
        for generation in [1, 2, 99, 1_000_000] as [UInt64] {
            for _ in 0..<200 {
                let digest = String((0..<40).map { _ in "0123456789abcdef".randomElement(using: &random)! })
                let revID = RevisionID(generation: generation, digest: digest)
                let packed = PackedRevisionID(revID)
                guard case .sha1 = packed else { Issue.record("\(revID) not packed"); continue }
                #expect(packed.revisionID == revID)
                #expect(packed == PackedRevisionID(try RevisionID(revID.description)))
            }
        }
        let edges = ["0000000000000000000000000000000000000000", "ffffffffffffffffffffffffffffffffffffffff"]
        for digest in edges {
            #expect(PackedRevisionID(RevisionID(generation: 3, digest: digest)).revisionID.digest == digest)
        }
        #expect(PackedRevisionID(RevisionID(generation: 1, digest: edges[0])) != PackedRevisionID(RevisionID(generation: 2, digest: edges[0])))
        for digest in ["ABCDEF0123456789ABCDEF0123456789ABCDEF01", "abc", "0123456789abcdef0123456789abcdef01234567ff", "g123456789abcdef0123456789abcdef01234567", "cafe"] {
            let revID = RevisionID(generation: 7, digest: digest)
            #expect(PackedRevisionID(revID) == .other(revID))
            #expect(PackedRevisionID(revID).revisionID == revID)
        }
    }
}
