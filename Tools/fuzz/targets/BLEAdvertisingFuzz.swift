// libFuzzer target: the Bluetooth LE advertising payload decoder (AD structures, PeerSync's
// advertisement) and the HCI LE Advertising Report parser. Compiled by Tools/fuzz/run with
// the PeerSyncBLE Advertising sources and HCIAdvertisingReport.swift.
//
// Input: byte 0 splits the rest into advertising data and scan response data; the whole
// input is also parsed as an HCI event packet. Checks: no trap; only `.protocolError`; an
// accepted advertisement that can be encoded again decodes to itself.

import PeerSyncCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBLEAdvertising(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do throws(PeerSyncError) {
        _ = try HCIAdvertisingReport.parse(eventPacket: bytes)
    } catch {
        if error.code != .protocolError { fatalError("HCI report parser threw \(error)") }
    }
    guard let split = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    let cut = min(rest.count, Int(split))
    let advertisement: BLEAdvertisement
    do throws(PeerSyncError) {
        advertisement = try BLEAdvertisement(advertisingData: rest[..<cut], scanResponse: rest[cut...])
    } catch {
        if error.code != .protocolError { fatalError("decoder threw \(error)") }
        return 0
    }
    if let name = advertisement.localName, name.isEmpty || name.utf8.count > BLEAdvertisement.maxLocalNameBytes { return 0 }
    guard let (advertisingData, scanResponse) = try? advertisement.encoded() else { return 0 }
    guard let again = try? BLEAdvertisement(advertisingData: advertisingData, scanResponse: scanResponse) else {
        fatalError("an encoded advertisement does not decode")
    }
    if again != advertisement { fatalError("decode(encode(x)) != x: \(again) vs \(advertisement)") }
    return 0
}
