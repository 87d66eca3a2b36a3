import PeerSyncCore
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Testing

/// A custom connector's own settings, the way the WebSocket connector keeps its TLS settings:
/// a key type, a typed property on `ReplicatorConfiguration`, read by the connector. This
/// module's tests link no TLS (their dependency list has no PeerSyncAuth).
private enum SimulatedLinkOption: ReplicatorConnectorOptionKey {
    static let defaultValue = LinkConditions.perfect
}

private enum HostNameOption: ReplicatorConnectorOptionKey {
    static let defaultValue = "client"
}

extension ReplicatorConfiguration {
    fileprivate var simulatedLink: LinkConditions {
        get { connectorOptions[SimulatedLinkOption.self] }
        set { connectorOptions[SimulatedLinkOption.self] = newValue }
    }
}

@Suite struct ConnectorOptionsTests {
    @Test func unsetKeysReadTheirDefaultAndCopiesAreIndependent() throws {
        var options = ReplicatorConnectorOptions()
        #expect(options[HostNameOption.self] == "client")
        #expect(!options.contains(HostNameOption.self))
        options[HostNameOption.self] = "tablet"
        var copy = options
        copy[HostNameOption.self] = "phone"
        #expect(options[HostNameOption.self] == "tablet" && copy[HostNameOption.self] == "phone")
        #expect(options.contains(HostNameOption.self) && !options.contains(SimulatedLinkOption.self))
        options[HostNameOption.self] = HostNameOption.defaultValue
        #expect(options.contains(HostNameOption.self))
        options.remove(HostNameOption.self)
        #expect(!options.contains(HostNameOption.self) && options[HostNameOption.self] == "client")
    }

    /// The replicator hands its configuration, options included, to the connector on every
    /// attempt; over loopback with the link the option chose, the replication completes.
    @Test func aCustomConnectorReadsItsOwnOption() async throws {
        try await withPeers(2) { p in
            try p[1].listen()
            try await save(p[0].defaultCollection, "doc", ["v": 1])
            var config = ReplicatorConfiguration(target: p[1].endpoint)
            config.addCollection(try p[0].defaultCollection)
            config.replyTimeout = slow(.seconds(10))
            var slowLink = LinkConditions.perfect
            slowLink.latency = .milliseconds(2)
            config.simulatedLink = slowLink
            config.connectorOptions[HostNameOption.self] = "tablet"
            let seen = LockedValue<[LinkConditions]>([])
            let hosts = LockedValue<[String]>([])
            let network = p[1].network, endpoint = p[1].endpoint
            let replicator = try Replicator(config: config) { cfg in
                seen.withLock { $0.append(cfg.simulatedLink) }
                hosts.withLock { $0.append(cfg.connectorOptions[HostNameOption.self]) }
                return try await LoopbackTransport(network: network, host: cfg.connectorOptions[HostNameOption.self])
                    .connect(to: endpoint, options: LoopbackConnectOptions(conditions: cfg.simulatedLink))
            }
            replicator.start()
            await replicator.waitUntilStopped()
            #expect(replicator.status.error == nil)
            #expect(seen.withLock { $0 } == [slowLink] && hosts.withLock { $0 } == ["tablet"])
            #expect(try await p[1].defaultCollection.document(id: "doc") != nil)
        }
    }
}
