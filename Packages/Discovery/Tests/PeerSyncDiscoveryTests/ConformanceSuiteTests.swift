import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncDiscoveryTesting
import Testing

/// A deliberately broken discovery wrapping a correct one (the in-process registry), to show
/// the suite catches each kind of contract breach (a suite that cannot fail proves nothing).
final class FaultyDiscovery: Discovery {
    enum Fault: Sendable {
        /// A browser also reports peers of other groups (relabelled as the browsed group).
        case leaksOtherGroups
        /// Metadata updates are never reported.
        case dropsUpdates
        /// Disappearances are never reported.
        case noDisappear
        /// A new browser does not report the peers published before it started.
        case forgetsExisting
        /// `stop()` does nothing.
        case stopDoesNotEnd
        /// Every appearance is reported twice.
        case duplicateAppeared
        /// A publication claims the requested name even when another publication has it.
        case claimsTakenName
        /// `shutdown()` keeps the publications.
        case shutdownKeepsPublications
        /// The discovery's kind differs from the kind on its events.
        case wrongKind
        /// Events carry no metadata.
        case losesMetadata
        /// The status stream never says recovered.
        case noRecoveredStatus
    }

    /// What the faulty hosts of one suite share.
    final class World: Sendable {
        let registry: InProcessDiscoveryRegistry
        let published = LockedValue<[PeerAnnouncement]>([])
        let browsed = LockedValue<Set<PeerGroupID>>([])

        init() throws { registry = try InProcessDiscoveryRegistry() }
    }

    let inner: InProcessDiscovery
    let fault: Fault
    let world: World

    init(_ fault: Fault, world: World, hostName: String) {
        self.inner = InProcessDiscovery(registry: world.registry, hostName: hostName)
        self.fault = fault
        self.world = world
    }

    var kind: DiscoveryKind { fault == .wrongKind ? .custom("faulty") : inner.kind }
    var status: DiscoveryStatus { inner.status }

    func statusUpdates() -> AsyncStream<DiscoveryStatus> {
        let updates = inner.statusUpdates()
        guard fault == .noRecoveredStatus else { return updates }
        return AsyncStream { continuation in
            let task = Task {
                for await status in updates where status != .recovered { continuation.yield(status) }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func publish(_ announcement: PeerAnnouncement) async throws -> any PeerPublication {
        world.published.withLock { $0.append(announcement) }
        let publication = try await inner.publish(announcement)
        if fault == .leaksOtherGroups {
            for group in world.browsed.withLock({ $0 }) where group != announcement.group {
                var copy = announcement
                copy.group = group
                copy.name = "leak-\(announcement.name)"
                _ = try await inner.publish(copy)
            }
        }
        return fault == .claimsTakenName ? NameClaimingPublication(publication) : publication
    }

    func browse(group: PeerGroupID) async throws -> PeerBrowser {
        world.browsed.withLock { _ = $0.insert(group) }
        let existing = Set(world.published.withLock { $0.map(\.peerID) })
        let browser = try await inner.browse(group: group)
        let fault = self.fault
        let (events, continuation) = AsyncStream<PeerEvent>.makeStream()
        let pump = Task {
            for await event in browser {
                switch (fault, event) {
                case (.dropsUpdates, .updated), (.noDisappear, .disappeared):
                    continue
                case (.forgetsExisting, _) where existing.contains(event.peer.peerID):
                    continue
                case (.duplicateAppeared, .appeared):
                    continuation.yield(event)
                    continuation.yield(event)
                case (.losesMetadata, .appeared(var peer)):
                    peer.metadata = PeerMetadata()
                    continuation.yield(.appeared(peer))
                default:
                    continuation.yield(event)
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in pump.cancel() }
        return PeerBrowser(group: group, events: events, onStop: {
            if fault != .stopDoesNotEnd { await browser.stop() }
        })
    }

    func shutdown() async {
        if fault != .shutdownKeepsPublications { await inner.shutdown() }
    }
}

/// Reports the requested name whatever name the publication got.
final class NameClaimingPublication: PeerPublication {
    let inner: any PeerPublication
    init(_ inner: any PeerPublication) { self.inner = inner }
    var announcement: PeerAnnouncement { inner.announcement }
    var name: String { inner.announcement.name }
    func updateMetadata(_ metadata: PeerMetadata) async throws { try await inner.updateMetadata(metadata) }
    func unpublish() async { await inner.unpublish() }
}

@Suite struct ConformanceSuiteCatchesBrokenDiscoveries {
    static func expectFailure(_ fault: FaultyDiscovery.Fault, _ caseName: String,
                              sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let world = try FaultyDiscovery.World()
        var configuration = DiscoveryConformanceSuite.Configuration()
        configuration.timeout = .seconds(3)
        configuration.quietPeriod = .milliseconds(300)
        configuration.manyPeers = 4
        let suite = DiscoveryConformanceSuite(
            configuration: configuration,
            makeHost: { FaultyDiscovery(fault, world: world, hostName: $0) },
            outage: .init(begin: { world.registry.beginOutage() }, end: { world.registry.endOutage() }))
        do {
            try await suite.run(caseName)
            Issue.record("case \(caseName) passed with fault \(fault)", sourceLocation: sourceLocation)
        } catch let failure as ConformanceFailure {
            #expect(failure.caseName == caseName, sourceLocation: sourceLocation)
            #expect(!failure.message.isEmpty, sourceLocation: sourceLocation)
        }
    }

    @Test func otherGroupsLeaking() async throws { try await Self.expectFailure(.leaksOtherGroups, "otherGroupsNotSeen") }
    @Test func updatesDropped() async throws { try await Self.expectFailure(.dropsUpdates, "metadataUpdate") }
    @Test func disappearancesDropped() async throws { try await Self.expectFailure(.noDisappear, "unpublishDisappears") }
    @Test func existingPeersForgotten() async throws { try await Self.expectFailure(.forgetsExisting, "publishThenBrowse") }
    @Test func stopThatDoesNotStop() async throws { try await Self.expectFailure(.stopDoesNotEnd, "stopEndsBrowse") }
    @Test func appearancesDuplicated() async throws { try await Self.expectFailure(.duplicateAppeared, "browseThenPublish") }
    @Test func takenNameClaimed() async throws { try await Self.expectFailure(.claimsTakenName, "samePeerTwice") }
    @Test func shutdownThatKeepsPublishing() async throws { try await Self.expectFailure(.shutdownKeepsPublications, "shutdownWithdraws") }
    @Test func kindMismatch() async throws { try await Self.expectFailure(.wrongKind, "publishThenBrowse") }
    @Test func metadataLost() async throws { try await Self.expectFailure(.losesMetadata, "publishThenBrowse") }
    @Test func recoveryNotReported() async throws { try await Self.expectFailure(.noRecoveredStatus, "survivesOutage") }

    @Test func unknownCaseAndMissingOutage() async throws {
        let registry = try InProcessDiscoveryRegistry()
        let suite = DiscoveryConformanceSuite(makeHost: { InProcessDiscovery(registry: registry, hostName: $0) })
        #expect(suite.availableCaseNames == DiscoveryConformanceSuite.basicCaseNames)
        await #expect(throws: ConformanceFailure.self) { try await suite.run("noSuchCase") }
        let missing = await #expect(throws: ConformanceFailure.self) { try await suite.run("survivesOutage") }
        #expect(missing?.message.contains("needs an outage") == true)
    }

    @Test func runAllReportsEveryCase() async throws {
        let registry = try InProcessDiscoveryRegistry()
        var configuration = DiscoveryConformanceSuite.Configuration()
        configuration.quietPeriod = .milliseconds(100)
        let suite = DiscoveryConformanceSuite(configuration: configuration,
                                              makeHost: { InProcessDiscovery(registry: registry, hostName: $0) })
        let results = await suite.runAll()
        #expect(results.map(\.name) == DiscoveryConformanceSuite.basicCaseNames)
        #expect(results.allSatisfy { $0.failure == nil }, "\(results.compactMap(\.failure))")
    }
}
