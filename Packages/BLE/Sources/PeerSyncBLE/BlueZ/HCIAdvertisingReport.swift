import PeerSyncCore

/// One LE Advertising Report (Core Spec Vol 4 Part E §7.7.65.2), read from an HCI event
/// packet by ``parse(eventPacket:)`` — pure, so it is tested and fuzzed without a radio.
struct HCIAdvertisingReport: Sendable, Hashable {
    /// ADV_IND, ADV_DIRECT_IND, ADV_SCAN_IND, ADV_NONCONN_IND or SCAN_RSP (0...4).
    var eventType: UInt8
    /// 0 public, 1 random (and 2, 3 for resolved identities).
    var addressType: UInt8
    /// The advertiser's address, `AA:BB:CC:DD:EE:FF` (the most significant byte first).
    var address: String
    /// The advertising data or scan response data.
    var data: [UInt8]
    /// Signal strength in dBm (127: not available).
    var rssi: Int8

    /// Whether the report carries scan response data (event type SCAN_RSP).
    var isScanResponse: Bool { eventType == 0x04 }

    static let eventPacketType: UInt8 = 0x04   // HCI_EVENT_PKT
    static let leMetaEvent: UInt8 = 0x3E       // EVT_LE_META_EVENT
    static let advertisingReportSubevent: UInt8 = 0x02  // EVT_LE_ADVERTISING_REPORT

    /// The reports of one packet read from an HCI socket (packet type byte, event code,
    /// parameter length, parameters). Other events and LE subevents give `[]`. Throws
    /// ``PeerSyncError/Code/protocolError`` when a length runs past the packet. Never traps.
    static func parse(eventPacket bytes: [UInt8]) throws(PeerSyncError) -> [HCIAdvertisingReport] {
        func malformed(_ why: String) -> PeerSyncError {
            PeerSyncError(.protocolError, "malformed HCI LE Advertising Report: \(why)", context: ["size": "\(bytes.count)"])
        }
        guard bytes.count >= 3, bytes[0] == eventPacketType, bytes[1] == leMetaEvent else { return [] }
        guard Int(bytes[2]) == bytes.count - 3 else { throw malformed("parameter length \(bytes[2]) for \(bytes.count - 3) bytes") }
        guard bytes.count >= 5, bytes[3] == advertisingReportSubevent else { return [] }
        var reports: [HCIAdvertisingReport] = []
        var index = 5
        for _ in 0..<Int(bytes[4]) {
            // event type, address type, 6 address bytes, data length
            guard index + 9 <= bytes.count else { throw malformed("a report header runs past the end") }
            let length = Int(bytes[index + 8])
            guard index + 9 + length + 1 <= bytes.count else { throw malformed("a report's data runs past the end") }
            let address = bytes[(index + 2)..<(index + 8)].reversed()
                .map { String($0, radix: 16, uppercase: true).count == 1 ? "0" + String($0, radix: 16, uppercase: true) : String($0, radix: 16, uppercase: true) }
                .joined(separator: ":")
            reports.append(HCIAdvertisingReport(eventType: bytes[index], addressType: bytes[index + 1], address: address,
                                                data: Array(bytes[(index + 9)..<(index + 9 + length)]),
                                                rssi: Int8(bitPattern: bytes[index + 9 + length])))
            index += 9 + length + 1
        }
        return reports
    }
}
