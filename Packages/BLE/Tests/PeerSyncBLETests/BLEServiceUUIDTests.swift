import PeerSyncBLE
import Testing

@Suite("Peer-group service UUIDs")
struct BLEServiceUUIDTests {
    @Test("UUIDv5 of the group ID under Couchbase Lite's namespace (the protocol notes' check value)")
    func checkValue() {
        #expect(BLEServiceUUID.forPeerGroup("com.myapp").description == "EA1B4C09-46F7-5522-9D31-A3855CC335FE")
        #expect(BLEServiceUUID.forPeerGroup("com.myapp") != BLEServiceUUID.forPeerGroup("com.myapp2"))
    }

    @Test("text form round-trips; malformed text is refused")
    func textForm() throws {
        let uuid = try #require(BLEUUID("abdd3056-28fa-441d-a470-55a75a52553a"))
        #expect(uuid == BLEServiceUUID.psmCharacteristic)
        #expect(BLEUUID(uuid.description) == uuid)
        #expect(uuid.littleEndianBytes.first == 0x3A)
        for bad in ["", "ABDD3056-28FA-441D-A470-55A75A52553", "ABDD3056+28FA-441D-A470-55A75A52553A",
                    "GBDD3056-28FA-441D-A470-55A75A52553A"] {
            #expect(BLEUUID(bad) == nil, "\(bad)")
        }
    }
}
