import PeerSyncCore
@testable import PeerSyncBLE
import Testing

@Suite("Advertising payload")
struct AdvertisingTests {
    let service = BLEServiceUUID.forPeerGroup("com.myapp")

    @Test("flags and the 128-bit UUID (little-endian) in the advertising data, the name in the scan response")
    func layout() throws {
        let (advertising, scanResponse) = try BLEAdvertisement(serviceUUID: service, localName: "alice").encoded()
        #expect(advertising == [2, 0x01, 0x06, 17, 0x07] + service.littleEndianBytes)
        #expect(advertising.count == 21)
        #expect(Array(advertising.suffix(16)) == service.bytes.reversed())
        #expect(scanResponse == [6, 0x09] + Array("alice".utf8))
        let decoded = try BLEAdvertisement(advertisingData: advertising, scanResponse: scanResponse)
        #expect(decoded == BLEAdvertisement(serviceUUID: service, localName: "alice"))
        #expect(decoded.advertises(service))
        #expect(!decoded.advertises(BLEServiceUUID.forPeerGroup("other")))
    }

    @Test("a name over 29 bytes goes shortened, cut on a scalar boundary")
    func shortenedName() throws {
        let long = String(repeating: "é", count: 20)  // 40 bytes
        let (_, scanResponse) = try BLEAdvertisement(serviceUUID: service, localName: long).encoded()
        #expect(scanResponse.count <= 31)
        #expect(scanResponse[1] == ADStructure.KnownType.shortenedLocalName)
        let decoded = try BLEAdvertisement(advertisingData: [], scanResponse: scanResponse)
        #expect(decoded.localName == String(repeating: "é", count: 14))
        #expect(decoded.localNameComplete == false)
        let exact = String(repeating: "n", count: 29)
        let (_, fits) = try BLEAdvertisement(serviceUUID: service, localName: exact).encoded()
        #expect(fits.count == 31 && fits[1] == ADStructure.KnownType.completeLocalName)
    }

    @Test("what does not fit in 31 bytes is a clear tooLarge error")
    func tooLarge() {
        let two = BLEAdvertisement(flags: BLEAdvertisement.peerSyncFlags, serviceUUIDs: [service, service], localName: nil)
        let error = #expect(throws: PeerSyncError.self) { try two.encoded() }
        #expect(error?.code == .tooLarge)
        #expect(error?.message.contains("37 bytes") == true)
        let oversized = ADStructure(type: 0xFF, data: [UInt8](repeating: 1, count: 255))
        #expect(throws: PeerSyncError.self) { try ADStructure.encode([oversized], limit: 1000) }
    }

    @Test("unknown AD types are kept and ignored, zero padding accepted, order free")
    func tolerant() throws {
        let manufacturer = ADStructure(type: 0xFF, data: [0x4C, 0x00, 1, 2])
        let bytes = try ADStructure.encode([ADStructure(type: 0x09, data: Array("bob".utf8)), manufacturer,
                                            ADStructure(type: 0x07, data: service.littleEndianBytes)])
        let decoded = try BLEAdvertisement(advertisingData: bytes + [0, 0, 0])
        #expect(decoded.localName == "bob")
        #expect(decoded.serviceUUIDs == [service])
        #expect(decoded.otherStructures == [manufacturer])
        #expect(decoded.flags == nil)
    }

    @Test("malformed lengths are protocolError, never a trap", arguments: [
        [5, 0x09, 0x41],              // length past the end
        [17, 0x07] + [UInt8](repeating: 0, count: 15),
        [2, 0x01, 0x06, 0, 7],        // data after the end marker
        [3, 0x07, 1, 2],              // a UUID list that is not a multiple of 16
        [1],                          // type byte missing
    ] as [[UInt8]])
    func malformed(_ bytes: [UInt8]) {
        let error = #expect(throws: PeerSyncError.self) { try BLEAdvertisement(advertisingData: bytes) }
        #expect(error?.code == .protocolError)
        let inScanResponse = #expect(throws: PeerSyncError.self) { try BLEAdvertisement(advertisingData: [], scanResponse: bytes) }
        #expect(inScanResponse?.code == .protocolError)
    }

    @Test("every prefix of a valid payload decodes or fails cleanly")
    func prefixes() throws {
        let (advertising, _) = try BLEAdvertisement(serviceUUID: service, localName: nil).encoded()
        var failures = 0
        for cut in 0...advertising.count {
            do { _ = try BLEAdvertisement(advertisingData: advertising.prefix(cut)) } catch { failures += 1 }
        }
        #expect(failures > 0)
        #expect(try BLEAdvertisement(advertisingData: advertising.prefix(3)).flags == BLEAdvertisement.peerSyncFlags)
    }
}
