import PeerSyncBLE
import PeerSyncCore
import PeerSyncTransport
import PeerSyncTransportTesting
import Testing

/// The transport conformance suite over BLETransport on the simulated network: TLS, WebSocket
/// framing and 245-byte packets through real `AF_UNIX` seqpacket sockets and the shaping relay.
/// Cases run one at a time: every byte crosses four sockets and a relay, and the machine is shared.
@Suite(.serialized, .timeLimit(.minutes(10 * TestTiming.slowFactor))) struct BLETransportConformanceTests {
    /// MTU 247 and a 1 ms latency at a rate the big cases can afford (16 MiB at 1.2 Mbit/s would
    /// take two minutes).
    static let fastNetwork = SimulatedL2CAPNetwork(conditions: BLELinkConditions(bitsPerSecond: 800_000_000,
                                                                                 latency: .milliseconds(1),
                                                                                 inFlightBytes: 64 * 1024))
    static let fastSuite: TransportConformanceSuite = {
        var configuration = TransportConformanceSuite.Configuration()
        configuration.largestMessage = 4 << 20
        configuration.timeout = TestTiming.slow(.seconds(60))
        let (listen, connect) = try! TestIdentity.options()
        return TransportConformanceSuite(
            transport: BLETransport(connector: fastNetwork.connector(address: "central")),
            listenOn: try! Endpoint(url: "l2cap://central:0"),
            connectOptions: connect, listenOptions: listen, configuration: configuration, drop: abortBLE)
    }()

    @Test("every case, MTU 247, TLS", arguments: TransportConformanceSuite.caseNames)
    func fastLink(_ name: String) async throws {
        try await Self.fastSuite.run(name)
    }

    /// The BLE shape itself (1.2 Mbit/s, 30 ms each way), with loads sized to it. The cases
    /// left out fill the WebSocket buffers (several MiB, ~40 s to drain at 150 kB/s) or repeat
    /// what the fast run checks at the same MTU.
    static let bleNetwork = SimulatedL2CAPNetwork(conditions: .bluetoothLE)
    static let bleSuite: TransportConformanceSuite = {
        var configuration = TransportConformanceSuite.Configuration()
        configuration.largestMessage = 256 << 10
        configuration.orderingCount = 200
        configuration.concurrentSenders = 4
        configuration.messagesPerSender = 10
        configuration.timeout = TestTiming.slow(.seconds(90))
        let (listen, connect) = try! TestIdentity.options()
        return TransportConformanceSuite(
            transport: BLETransport(connector: bleNetwork.connector(address: "AA:BB:CC:DD:EE:01")),
            listenOn: try! Endpoint(scheme: "l2cap", host: "AA:BB:CC:DD:EE:01", port: 0),
            connectOptions: connect, listenOptions: listen, configuration: configuration, drop: abortBLE)
    }()

    @Test("at BLE speed", arguments: ["metadata", "ordering", "messageSizes", "concurrentSenders",
                                      "closeCodeAndReason", "peerVanishes", "listenerClose"])
    func bleLink(_ name: String) async throws {
        try await Self.bleSuite.run(name)
    }
}
