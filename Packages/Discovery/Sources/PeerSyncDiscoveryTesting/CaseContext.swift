import PeerSyncCore
import PeerSyncDiscovery

/// What one case made (hosts, browsers) and the helpers it uses; ``cleanup()`` ends it all.
final class CaseContext: Sendable {
    let caseName: String
    let configuration: DiscoveryConformanceSuite.Configuration
    /// A random tag that makes this run's group IDs and names its own.
    let tag: String
    private let makeHost: @Sendable (String) async throws -> any Discovery
    private let hosts = LockedValue<[any Discovery]>([])
    private let recorders = LockedValue<[PeerEventRecorder]>([])

    init(caseName: String, configuration: DiscoveryConformanceSuite.Configuration,
         makeHost: @escaping @Sendable (String) async throws -> any Discovery) {
        self.caseName = caseName
        self.configuration = configuration
        self.makeHost = makeHost
        var random = SystemRandomNumberGenerator()
        self.tag = String(random.next() & 0xFFFF_FFFF, radix: 16)
    }

    var timeout: Duration { configuration.timeout }

    /// A new host (a new `Discovery` instance).
    func host(_ name: String) async throws -> any Discovery {
        let make = makeHost
        let host = try await within(timeout, "making host '\(name)'") { try await make(name) }
        hosts.withLock { $0.append(host) }
        return host
    }

    /// A group ID of this case: `<prefix>-<case>-<tag>`.
    func group(_ prefix: String = "g") throws -> PeerGroupID {
        try PeerGroupID(PeerAnnouncement.truncated("\(prefix)-\(caseName)", toBytes: 50) + "-\(tag)")
    }

    /// An announcement of `peer` in `group`, named `<peer>-<tag>` unless `name` is given.
    func announcement(_ peer: String, in group: PeerGroupID, name: String? = nil, port: UInt16 = 4984,
                      metadata: [String: String] = [:]) throws -> PeerAnnouncement {
        try PeerAnnouncement(peerID: PeerID(peer), group: group, name: name ?? "\(peer)-\(tag)", port: port,
                             metadata: PeerMetadata(metadata))
    }

    func publish(_ announcement: PeerAnnouncement, on host: any Discovery) async throws -> any PeerPublication {
        try await within(timeout, "publishing \(announcement.peerID) ('\(announcement.name)')") {
            try await host.publish(announcement)
        }
    }

    /// Starts browsing `group` on `host` and records the events.
    func browse(_ group: PeerGroupID, on host: any Discovery, label: String) async throws -> PeerEventRecorder {
        let browser = try await within(timeout, "starting a browse of \(group) (\(label))") {
            try await host.browse(group: group)
        }
        let recorder = PeerEventRecorder(browser, kind: host.kind, label: label)
        recorders.withLock { $0.append(recorder) }
        return recorder
    }

    func update(_ publication: any PeerPublication, _ metadata: [String: String]) async throws {
        let metadata = try PeerMetadata(metadata)
        try await within(timeout, "updating the metadata of '\(publication.name)'") {
            try await publication.updateMetadata(metadata)
        }
    }

    func unpublish(_ publication: any PeerPublication) async throws {
        try await within(timeout, "unpublishing '\(publication.name)'") { await publication.unpublish() }
    }

    func shutdown(_ host: any Discovery) async throws {
        try await within(timeout, "shutting a host down") { await host.shutdown() }
    }

    /// Watches for ``DiscoveryConformanceSuite/Configuration/quietPeriod`` (events that must
    /// not come), checking the rules.
    func quietPeriod() async throws {
        try await Task.sleep(for: configuration.quietPeriod)
        try checkRules()
    }

    /// Throws if any recorder saw an event that broke the rules.
    func checkRules() throws {
        for recorder in recorders.withLock({ $0 }) { try recorder.checkRules() }
    }

    /// Stops every browser and shuts every host down, each within the timeout; failures here
    /// do not fail the case (it already passed or failed).
    func cleanup() async {
        let recorders = self.recorders.withLock { $0 }
        for recorder in recorders {
            _ = try? await within(timeout, "stopping a browser") { await recorder.browser.stop() }
            recorder.cancelConsumer()
        }
        let hosts = self.hosts.withLock { $0 }
        for host in hosts {
            _ = try? await within(timeout, "shutting a host down") { await host.shutdown() }
        }
    }
}
