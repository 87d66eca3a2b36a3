#if canImport(Glibc)
import Glibc
#endif
import PeerSyncCore
@testable import PeerSyncBLE
import PeerSyncDiscovery
import PeerSyncTransport
import Testing

/// The BlueZ layer cannot reach a radio here (no AF_BLUETOOTH in this kernel): what is
/// checked is the clear error, its mapping, and the pure parsing of HCI events.
@Suite("BlueZ layer")
struct BlueZTests {
    /// Whether this kernel has Bluetooth sockets (the assertions below are for one without).
    static let kernelHasBluetooth = BlueZAdapter.probe() == nil

    @Test("without AF_BLUETOOTH every entry point throws one clear error",
          .enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func unavailableHere() async throws {
        let error = #expect(throws: PeerSyncError.self) { try BlueZAdapter.openDefault() }
        #expect(error?.code == .bluetoothUnavailable)
        #expect(error?.message.hasPrefix("Bluetooth is not available on this system: ") == true, "\(String(describing: error))")
        let radio = BlueZRadio()
        #expect(radio.unavailability?.code == .bluetoothUnavailable)
        let scan = await #expect(throws: PeerSyncError.self) { _ = try await radio.scan() }
        #expect(scan?.code == .bluetoothUnavailable)
        let connect = await #expect(throws: PeerSyncError.self) { _ = try await radio.connectATT(to: "00:11:22:33:44:55") }
        #expect(connect?.code == .bluetoothUnavailable)
        let server = try GATTServer(serviceUUID: BLEServiceUUID.forPeerGroup("g"), psm: 0x80, metadata: [0])
        let advertise = await #expect(throws: PeerSyncError.self) {
            _ = try await radio.advertise(BLEAdvertisement(serviceUUID: server.serviceUUID, localName: "x"), server: server)
        }
        #expect(advertise?.code == .bluetoothUnavailable)
    }

    @Test("BLEDiscovery on the BlueZ radio reports a clear unavailable status here, and keeps working",
          .enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func discoveryStatusHere() async throws {
        let discovery = try BLEDiscovery()
        guard case .unavailable(let error) = discovery.status else {
            Issue.record("status is \(discovery.status), expected unavailable")
            return
        }
        #expect(error.code == .discoveryUnavailable)
        #expect(error.message.hasPrefix("Bluetooth is not available on this system: "))
        // Publishing and browsing still work locally (the contract while unavailable).
        let group = try PeerGroupID("g")
        let browser = try await discovery.browse(group: group)
        let publication = try await discovery.publish(PeerAnnouncement(peerID: PeerID("p"), group: group, port: 0x80))
        var events = browser.makeAsyncIterator()
        #expect(await events.next()?.peer.name == publication.name)
        await discovery.shutdown()
        #expect(discovery.status == .stopped)
    }

    @Test("the BlueZ L2CAP connector and a BLE transport on it fail with the one clear error here",
          .enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func l2capConnectorUnavailableHere() async throws {
        let connector = BlueZL2CAPConnector()
        #expect(connector.unavailability?.code == .bluetoothUnavailable)
        #expect(connector.localAddress.isEmpty)
        let connect = await #expect(throws: PeerSyncError.self) {
            _ = try await connector.connect(to: "00:11:22:33:44:55", psm: 0x80, timeout: .seconds(1))
        }
        #expect(connect?.code == .bluetoothUnavailable)
        #expect(connect?.message.hasPrefix("Bluetooth is not available on this system: ") == true, "\(String(describing: connect))")
        let listen = await #expect(throws: PeerSyncError.self) { _ = try await connector.listen(psm: nil) }
        #expect(listen?.code == .bluetoothUnavailable)
        // The transport above passes the error through unchanged, both ways.
        let transport = BLETransport(connector: connector)
        let dial = await #expect(throws: PeerSyncError.self) {
            _ = try await transport.connectBLE(to: Endpoint(scheme: "l2cap", host: "00:11:22:33:44:55", port: 0x80))
        }
        #expect(dial?.code == .bluetoothUnavailable)
        let serve = await #expect(throws: PeerSyncError.self) {
            _ = try await transport.listenBLE(on: Endpoint(scheme: "l2cap", host: "local", port: 0))
        }
        #expect(serve?.code == .bluetoothUnavailable)
    }

    @Test("errno and HCI status mapping")
    func errorMapping() {
        #expect(bluetoothError("socket", errno: EAFNOSUPPORT).code == .bluetoothUnavailable)
        #expect(bluetoothError("hci_get_route", errno: ENODEV).message.contains("no Bluetooth adapter"))
        #expect(bluetoothError("connect", errno: ECONNREFUSED).code == .connectionRefused)
        #expect(bluetoothError("LE Set Advertise Enable", errno: 0, hciStatus: 0x0C).code == .invalidArgument)
        let failed = bluetoothError("LE Set Scan Enable", errno: 0, hciStatus: 0x03)
        #expect(failed.code == .io && failed.context["hciStatus"] == "0x3")
    }

    @Test("LE Advertising Report events parse; other events are ignored; malformed ones throw")
    func advertisingReports() throws {
        let data: [UInt8] = [2, 0x01, 0x06]
        let report: [UInt8] = [0x00, 0x01, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, UInt8(data.count)] + data + [0xC4]
        let parameters: [UInt8] = [0x02, 1] + report
        let packet: [UInt8] = [0x04, 0x3E, UInt8(parameters.count)] + parameters
        let parsed = try HCIAdvertisingReport.parse(eventPacket: packet)
        #expect(parsed == [HCIAdvertisingReport(eventType: 0, addressType: 1, address: "11:22:33:44:55:66", data: data, rssi: -60)])
        #expect(try HCIAdvertisingReport.parse(eventPacket: [0x04, 0x0E, 1, 0]) == [])
        #expect(try HCIAdvertisingReport.parse(eventPacket: [0x04, 0x3E, 2, 0x01, 0]) == [])
        #expect(throws: PeerSyncError.self) { try HCIAdvertisingReport.parse(eventPacket: Array(packet.dropLast())) }
        var lying = packet
        lying[4] = 2  // two reports announced, one present
        #expect(throws: PeerSyncError.self) { try HCIAdvertisingReport.parse(eventPacket: lying) }
    }
}
