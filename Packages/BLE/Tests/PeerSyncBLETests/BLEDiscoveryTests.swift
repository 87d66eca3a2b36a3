import PeerSyncCore
@testable import PeerSyncBLE
import PeerSyncDiscovery
import PeerSyncDiscoveryTesting
import Testing

/// BLEDiscovery over the simulated radio runs the whole discovery conformance suite; the
/// outage is the air switched off (every adapter down) and on again.
@Suite("BLE discovery over the simulated radio")
struct BLEDiscoveryTests {
    static func configuration() -> BLEDiscoveryConfiguration {
        var configuration = BLEDiscoveryConfiguration()
        configuration.advertisementTimeout = slow(.seconds(2))
        configuration.nameProbeDuration = slow(.milliseconds(150))
        configuration.reconnectInterval = .milliseconds(100)
        configuration.transactionTimeout = slow(.seconds(10))
        return configuration
    }

    static func suite() -> DiscoveryConformanceSuite {
        let air = SimulatedBLEAir(advertisingInterval: .milliseconds(40))
        var suiteConfiguration = DiscoveryConformanceSuite.Configuration()
        suiteConfiguration.timeout = slow(.seconds(30))
        suiteConfiguration.quietPeriod = .milliseconds(500)
        return DiscoveryConformanceSuite(
            configuration: suiteConfiguration,
            makeHost: { name in try BLEDiscovery(air: air, hostName: name, configuration: configuration()) },
            outage: .init(begin: { air.powerOff() }, end: { air.powerOn() }))
    }

    @Test(arguments: DiscoveryConformanceSuite.caseNames)
    func conformance(_ name: String) async throws {
        try await Self.suite().run(name)
    }

    @Test("a browser sees the address, the PSM as port, the TXT metadata; a silent advertiser times out")
    func peerDetails() async throws {
        let air = SimulatedBLEAir(advertisingInterval: .milliseconds(40))
        let alice = try BLEDiscovery(air: air, hostName: "alice", configuration: Self.configuration())
        let bob = try BLEDiscovery(air: air, hostName: "bob", configuration: Self.configuration())
        let group = try PeerGroupID("team")
        let recorder = PeerEventRecorder(try await bob.browse(group: group), kind: .bluetoothLE, label: "bob")
        let long = String(repeating: "n", count: 40)
        let publication = try await alice.publish(PeerAnnouncement(peerID: PeerID("alice-1"), group: group, name: long,
                                                                   port: 0x0085, metadata: PeerMetadata(["k": "v"])))
        #expect(publication.name == String(repeating: "n", count: 29))
        let peer = try await recorder.waitForPeer(named: publication.name, timeout: slow(.seconds(10)))
        #expect(peer.port == 0x0085 && peer.metadata["k"] == "v" && peer.peerID.rawValue == "alice-1")
        #expect(peer.addresses.count == 1 && peer.addresses[0].hasPrefix("5E:"))
        // The advertiser vanishes without closing its GATT link: only the timeout can tell.
        let quiet = try #require(air.state.withLock { $0.advertising.keys.first })
        air.state.withLock { _ = $0.advertising.removeValue(forKey: quiet) }
        try await recorder.waitForAbsence(of: publication.name, timeout: slow(.seconds(10)))
        try recorder.checkRules()
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test("BLE names: cut to 29 bytes, alternatives fit")
    func names() {
        #expect(BLEAnnouncementName.fitted("short") == "short")
        let long = String(repeating: "a", count: 29)
        #expect(BLEAnnouncementName.alternative(after: long) == String(repeating: "a", count: 26) + " #2")
        #expect(BLEAnnouncementName.alternative(after: "x #2") == "x #3")
    }
}
