import PeerSyncCore
@testable import PeerSyncDiscovery
import PeerSyncDiscoveryTesting
import Testing

/// The in-process registry passes the whole conformance suite, with immediate delivery and
/// with seeded delay and loss. Each case gets a registry of its own (the outage case takes
/// the whole registry down).
@Suite struct InProcessConformance {
    static func suite(_ conditions: SimulatedDiscoveryConditions) throws -> DiscoveryConformanceSuite {
        let registry = try InProcessDiscoveryRegistry(conditions: conditions)
        var configuration = DiscoveryConformanceSuite.Configuration()
        configuration.timeout = slow(.seconds(30))
        configuration.quietPeriod = .milliseconds(300)
        return DiscoveryConformanceSuite(
            configuration: configuration,
            makeHost: { InProcessDiscovery(registry: registry, hostName: $0) },
            outage: .init(begin: { registry.beginOutage() }, end: { registry.endOutage() }))
    }

    @Test(arguments: DiscoveryConformanceSuite.caseNames)
    func immediate(_ name: String) async throws {
        try await Self.suite(.perfect).run(name)
    }

    @Test(arguments: DiscoveryConformanceSuite.caseNames)
    func delayedAndLossy(_ name: String) async throws {
        let conditions = SimulatedDiscoveryConditions(delay: .milliseconds(5), jitter: .milliseconds(20), lossProbability: 0.3,
                                                      retransmitInterval: .milliseconds(25), seed: 7)
        try await Self.suite(conditions).run(name)
    }
}

@Suite struct InProcessRegistryTests {
    @Test func partitionsHideOtherSidesUntilHealed() async throws {
        let registry = try InProcessDiscoveryRegistry()
        let group = try PeerGroupID("team")
        let hosts = ["a", "b", "c"].map { InProcessDiscovery(registry: registry, hostName: $0) }
        var names: [String] = []
        for (index, host) in hosts.enumerated() {
            let publication = try await host.publish(PeerAnnouncement(peerID: PeerID("peer-\(index)"), group: group, port: 1))
            names.append(publication.name)
        }
        let fromB = PeerEventRecorder(try await hosts[1].browse(group: group), kind: .inProcess, label: "b")
        let fromA = PeerEventRecorder(try await hosts[0].browse(group: group), kind: .inProcess, label: "a")
        let timeout = slow(.seconds(10))
        try await fromB.wait("every peer", timeout: timeout) { Set($0.keys) == Set(names) }
        registry.partition([["a"], ["b", "c"]])
        try await fromB.wait("only b's and c's peers", timeout: timeout) { Set($0.keys) == [names[1], names[2]] }
        try await fromA.wait("only a's own peer", timeout: timeout) { Set($0.keys) == [names[0]] }
        registry.heal()
        try await fromA.wait("every peer after healing", timeout: timeout) { Set($0.keys) == Set(names) }
        try await fromB.wait("every peer after healing", timeout: timeout) { Set($0.keys) == Set(names) }
        // Hosts named nowhere share one more partition.
        registry.partition([["a"]])
        try await fromB.wait("only b's and c's peers", timeout: timeout) { Set($0.keys) == [names[1], names[2]] }
        try fromA.checkRules()
        try fromB.checkRules()
        for host in hosts { await host.shutdown() }
    }

    @Test func seededDrawsRepeatAndLossAddsRetransmissions() {
        let conditions = SimulatedDiscoveryConditions(delay: .milliseconds(10), jitter: .milliseconds(5), lossProbability: 0.5,
                                                      retransmitInterval: .seconds(1), seed: 42)
        func draws(_ seed: UInt64) -> [Duration] {
            var random = SplitMix64(seed: seed)
            return (0..<200).map { _ in conditions.drawDelay(&random) }
        }
        #expect(draws(42) == draws(42))
        #expect(draws(42) != draws(43))
        let delays = draws(42)
        #expect(delays.allSatisfy { $0 >= .milliseconds(10) })
        // Half the attempts are lost: some deliveries wait for a retransmission, most not long.
        #expect(delays.contains { $0 >= .seconds(1) })
        #expect(delays.filter { $0 < .seconds(1) }.count > 50)
        var random = SplitMix64(seed: 0)
        #expect(SimulatedDiscoveryConditions.perfect.drawDelay(&random) == .zero)
    }

    @Test func invalidConditionsAreRefused() {
        for conditions in [SimulatedDiscoveryConditions(delay: .milliseconds(-1)),
                           SimulatedDiscoveryConditions(jitter: .milliseconds(-1)),
                           SimulatedDiscoveryConditions(lossProbability: 1),
                           SimulatedDiscoveryConditions(lossProbability: -0.1),
                           SimulatedDiscoveryConditions(lossProbability: 0.5, retransmitInterval: .zero)] {
            #expect(throws: PeerSyncError.self) { try InProcessDiscoveryRegistry(conditions: conditions) }
        }
    }

    @Test func eventsOfOnePeerStayInOrderUnderJitter() async throws {
        let registry = try InProcessDiscoveryRegistry(conditions: SimulatedDiscoveryConditions(
            jitter: .milliseconds(30), lossProbability: 0.4, retransmitInterval: .milliseconds(10), seed: 3))
        let group = try PeerGroupID("order")
        let publisher = InProcessDiscovery(registry: registry, hostName: "p")
        let observer = InProcessDiscovery(registry: registry, hostName: "b")
        let browser = PeerEventRecorder(try await observer.browse(group: group), kind: .inProcess, label: "b")
        let publication = try await publisher.publish(PeerAnnouncement(peerID: PeerID("x"), group: group, port: 1))
        for version in 1...20 { try await publication.updateMetadata(PeerMetadata(["v": "\(version)"])) }
        await publication.unpublish()
        try await browser.wait("the disappearance", timeout: slow(.seconds(10))) { _ in
            if case .disappeared = browser.events.last { true } else { false }
        }
        let versions = browser.events.compactMap { event -> Int? in
            if case .updated(let peer) = event { Int(peer.metadata["v"] ?? "") } else { nil }
        }
        #expect(versions == Array(1...20))
        guard case .appeared = browser.events.first else { Issue.record("the first event was not appeared"); return }
        await observer.shutdown()
        await publisher.shutdown()
    }

    @Test func releasingTheDiscoveryShutsItDown() async throws {
        let registry = try InProcessDiscoveryRegistry()
        let group = try PeerGroupID("gone")
        let observer = InProcessDiscovery(registry: registry, hostName: "o")
        let browser = PeerEventRecorder(try await observer.browse(group: group), kind: .inProcess, label: "o")
        var name = ""
        do {
            let temporary = InProcessDiscovery(registry: registry, hostName: "t")
            name = try await temporary.publish(PeerAnnouncement(peerID: PeerID("t"), group: group, port: 1)).name
            try await browser.waitForPeer(named: name, timeout: slow(.seconds(10)))
        }
        try await browser.waitForAbsence(of: name, timeout: slow(.seconds(10)), "the released discovery's peer to disappear")
        await observer.shutdown()
    }

    @Test func outagesReportStatusAndCatchUp() async throws {
        let registry = try InProcessDiscoveryRegistry()
        let group = try PeerGroupID("outage")
        let host = InProcessDiscovery(registry: registry, hostName: "h")
        #expect(host.status == .running)
        registry.beginOutage(reason: "maintenance")
        guard case .unavailable(let error) = host.status else { Issue.record("status \(host.status)"); return }
        #expect(error.code == .discoveryUnavailable && error.message == "maintenance")
        // A host made during the outage starts unavailable; publishing works and shows later.
        let late = InProcessDiscovery(registry: registry, hostName: "l")
        #expect(late.status == .unavailable(error))
        let name = try await late.publish(PeerAnnouncement(peerID: PeerID("l"), group: group, port: 1)).name
        let browser = PeerEventRecorder(try await host.browse(group: group), kind: .inProcess, label: "h")
        try await Task.sleep(for: .milliseconds(50))
        #expect(browser.events.isEmpty)
        registry.endOutage()
        #expect(host.status == .recovered && late.status == .recovered)
        try await browser.waitForPeer(named: name, timeout: slow(.seconds(10)))
    }
}
