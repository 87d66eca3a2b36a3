import PeerSyncCore
import PeerSyncLoopback
import PeerSyncTransport
import PeerSyncTransportTesting
import Testing

/// Drops a loopback connection without a close handshake (the suite's "peer vanishes" hook).
@Sendable func abortLoopback(_ connection: any MessageConnection) async {
    (connection as? LoopbackConnection)?.abort()
}

/// The conformance suite over a perfect in-process link.
@Suite struct PlainLoopbackConformance {
    static let network = LoopbackNetwork()
    static let suite = TransportConformanceSuite(
        transport: LoopbackTransport(network: network, host: "client"),
        listenOn: try! Endpoint(url: "loopback://server:0"),
        drop: abortLoopback)

    @Test(arguments: TransportConformanceSuite.caseNames)
    func conformance(_ name: String) async throws {
        try await Self.suite.run(name)
    }
}

/// The conformance suite over a simulated link: small MTU (fragmentation and reassembly),
/// latency with jitter, bandwidth shaping.
@Suite struct ConditionedLoopbackConformance {
    static let network = LoopbackNetwork()
    static let conditions = LinkConditions(latency: .milliseconds(1), jitter: .milliseconds(1),
                                           bandwidth: 400_000_000, mtu: 512, seed: 42)
    static let suite = TransportConformanceSuite(
        transport: LoopbackTransport(network: network, host: "client"),
        listenOn: try! Endpoint(url: "loopback://server:0"),
        connectOptions: LoopbackConnectOptions(conditions: conditions),
        drop: abortLoopback)

    @Test(arguments: TransportConformanceSuite.caseNames)
    func conformance(_ name: String) async throws {
        try await Self.suite.run(name)
    }
}

/// The conformance suite over a BLE-like link built from the network's own conditions.
@Suite struct BLELikeLoopbackConformance {
    static let network = LoopbackNetwork(conditions: LinkConditions(latency: .milliseconds(2), jitter: .milliseconds(2),
                                                                    mtu: 244, seed: 9))
    static let suite: TransportConformanceSuite = {
        var configuration = TransportConformanceSuite.Configuration()
        // Every byte crosses a 244-byte MTU: keep the big cases to 4 MiB to bound the run time.
        configuration.largestMessage = 4 << 20
        return TransportConformanceSuite(
            transport: LoopbackTransport(network: network, host: "central"),
            listenOn: try! Endpoint(url: "loopback://peripheral:0"),
            configuration: configuration,
            drop: abortLoopback)
    }()

    @Test(arguments: ["ordering", "messageSizes", "concurrentSenders", "backpressure", "closeWhileSending",
                      "peerVanishesWhileSending", "simultaneousClose"])
    func conformance(_ name: String) async throws {
        try await Self.suite.run(name)
    }
}
