@testable import PeerSyncReplicator
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
}
