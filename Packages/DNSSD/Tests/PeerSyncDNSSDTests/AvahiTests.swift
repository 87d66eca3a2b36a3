import Foundation
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncDiscoveryTesting
import PeerSyncDNSSD
import PeerSyncTestSupport
import Testing

/// Everything that needs a running avahi-daemon, one test at a time (the outage tests kill
/// the daemon), inside one sandbox started and stopped by the suite.
@Suite(.serialized, .avahiSandbox,
       .disabled(if: AvahiSandbox.unavailableReason != nil, "\(AvahiSandbox.unavailableReason ?? "")"))
struct AvahiTests {
    var sandbox: AvahiSandbox {
        get throws {
            guard let sandbox = AvahiSandbox.current else { throw PeerSyncError(.internalError, "no Avahi sandbox is running") }
            return sandbox
        }
    }

    static func configuration() -> DNSSDConfiguration {
        var configuration = DNSSDConfiguration()
        configuration.retryInterval = .milliseconds(500)
        return configuration
    }

    /// A group ID of its own for one test.
    static func group(_ prefix: String) throws -> PeerGroupID {
        try PeerGroupID("\(prefix)-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// The conformance suite over DNS-SD: every "host" is a DNSSDDiscovery on host 1's daemon;
    /// the outage is a SIGKILL of that daemon and a restart.
    @Test(arguments: DiscoveryConformanceSuite.caseNames)
    func conformance(_ name: String) async throws {
        let sandbox = try self.sandbox
        var configuration = DiscoveryConformanceSuite.Configuration()
        configuration.timeout = slow(.seconds(30))
        let suite = DiscoveryConformanceSuite(
            configuration: configuration,
            makeHost: { _ in try DNSSDDiscovery(configuration: Self.configuration()) },
            outage: .init(begin: { try await sandbox.stopAvahi() }, end: { try await sandbox.startAvahi() }))
        try await suite.run(name)
    }

    /// `avahi-browse` on the other host (over multicast) sees our announcement under the group
    /// subtype and the base type, with our TXT keys and the metadata.
    @Test func anotherHostsAvahiBrowseSeesOurAnnouncement() async throws {
        let sandbox = try self.sandbox
        let discovery = try DNSSDDiscovery(configuration: Self.configuration())
        // A group starting with "_", so avahi-browse (which refuses other subtypes) can ask for it.
        let group = try Self.group("_interop")
        let publication = try await discovery.publish(PeerAnnouncement(
            peerID: PeerID("peer-interop"), group: group, name: "Interop Peer", port: 4999,
            metadata: PeerMetadata(["role": "test"]), protocolVersion: 2))
        #expect(publication.name == "Interop Peer")
        for type in ["\(group)._sub._couchbaseP2P._tcp", "_couchbaseP2P._tcp"] {
            var output = ""
            let found = try await eventually {
                output = await Command.run("avahi-browse", ["--parsable", "--resolve", "--terminate", type],
                                           environment: sandbox.environment(host: 2)).output
                return output.contains("=;lo;IPv4;Interop\\032Peer;_couchbaseP2P._tcp;local;")
            }
            #expect(found, "avahi-browse \(type) on host 2 did not resolve our announcement: \(output)")
            let line = output.split(separator: "\n").first { $0.hasPrefix("=;lo;IPv4;Interop\\032Peer;") } ?? ""
            #expect(line.contains(";127.0.0.1;4999;"), "\(line)")
            for entry in ["\"txtvers=1\"", "\"peerid=peer-interop\"", "\"protovers=2\"", "\"role=test\""] {
                #expect(line.contains(entry), "\(entry) missing from \(line)")
            }
        }
        await discovery.shutdown()
    }

    /// A peer published by `avahi-publish` on the other host is seen, with unknown TXT keys as
    /// metadata (lowercased; a key without `=` has an empty value); a record without `peerid`
    /// is ignored; SIGTERM (goodbye packets) makes the peer disappear.
    @Test func weSeeAPeerPublishedByAvahiPublish() async throws {
        let sandbox = try self.sandbox
        let discovery = try DNSSDDiscovery(configuration: Self.configuration())
        let group = try Self.group("_fromavahi")
        let collected = PeerEventRecorder(try await discovery.browse(group: group), kind: .dnssd, label: "ours")
        let subtype = "--sub=\(group)._sub._couchbaseP2P._tcp"
        // Host 2 announces no address of its own: its services name host 1 (same address).
        let stranger = try ChildProcess(program: "avahi-publish", ["--service", "--host=peersync-sandbox-1.local", subtype,
                                                          "No ID", "_couchbaseP2P._tcp", "5002", "color=red"],
                                        environment: sandbox.environment(host: 2))
        let peer = try ChildProcess(program: "avahi-publish", ["--service", "--host=peersync-sandbox-1.local", subtype,
                                                      "Avahi Peer", "_couchbaseP2P._tcp", "5001",
                                                      "txtvers=1", "peerid=peer-avahi", "protovers=7", "Color=blue", "flag", "bad key=x"],
                                    environment: sandbox.environment(host: 2))
        let seen = try await eventually { collected.visible["Avahi Peer"] != nil }
        #expect(seen, "the avahi-publish peer was not seen; avahi-publish said: \(peer.text)")
        if let found = collected.visible["Avahi Peer"] {
            #expect(found.peerID.rawValue == "peer-avahi")
            #expect(found.port == 5001 && found.protocolVersion == 7 && found.discovery == .dnssd)
            #expect(found.addresses == ["127.0.0.1"] && found.hostName == "peersync-sandbox-1.local")
            #expect(found.metadata == (try PeerMetadata(["color": "blue", "flag": ""])))
        }
        // Its own process, registered on its own time: waited for, not sampled (a clean-clone
        // run under load found it not yet established when "Avahi Peer" already was).
        #expect(try await eventually { stranger.text.contains("Established") }, "avahi-publish: \(stranger.text)")
        #expect(collected.visible["No ID"] == nil, "a record without peerid was reported")
        await peer.stop()
        #expect(try await eventually { collected.visible["Avahi Peer"] == nil }, "the peer did not disappear after avahi-publish ended")
        #expect(!collected.events.contains { $0.peer.name == "No ID" })
        try collected.checkRules()
        await stranger.stop()
        await discovery.shutdown()
    }

    /// A name another host already holds (probing finds it on the network) is replaced by
    /// Avahi's alternative; two publications with one name on this daemon get different names.
    @Test func takenNamesAreReplaced() async throws {
        let sandbox = try self.sandbox
        let discovery = try DNSSDDiscovery(configuration: Self.configuration())
        let group = try Self.group("clash")
        let name = "Clash \(UInt16.random(in: 0...UInt16.max))"
        let holder = try ChildProcess(program: "avahi-publish", ["--service", "--host=peersync-sandbox-1.local", name, "_couchbaseP2P._tcp", "5003"],
                                      environment: sandbox.environment(host: 2))
        #expect(try await eventually { holder.text.contains("Established") }, "avahi-publish: \(holder.text)")
        let ours = try await discovery.publish(PeerAnnouncement(peerID: PeerID("peer-clash"), group: group, name: name, port: 5004))
        #expect(ours.name == "\(name) #2")
        let second = try await discovery.publish(PeerAnnouncement(peerID: PeerID("peer-clash"), group: group, name: name, port: 5005))
        #expect(second.name == "\(name) #3")
        let collected = PeerEventRecorder(try await discovery.browse(group: group), kind: .dnssd, label: "ours")
        try await collected.wait("both of our publications", timeout: slow(.seconds(20))) {
            Set($0.keys) == ["\(name) #2", "\(name) #3"]
        }
        await holder.stop()
        await discovery.shutdown()
    }

    /// No daemon at start: the status says so (naming avahi-daemon), publishing and browsing
    /// wait for it, and when it starts the discovery runs (not "recovered": it never ran).
    /// Killed later: unavailable again, then recovered.
    @Test func daemonAbsentAtStartAndKilledLater() async throws {
        let sandbox = try self.sandbox
        try await sandbox.stopAvahi()
        var startedAgain = false
        do {
            let discovery = try DNSSDDiscovery(configuration: Self.configuration())
            let statuses = DiscoveryStatusRecorder(discovery)
            let unavailable = try await statuses.wait("unavailable", timeout: slow(.seconds(20))) {
                if case .unavailable = $0 { true } else { false }
            }
            guard case .unavailable(let error) = unavailable else { return }
            #expect(error.code == .discoveryUnavailable)
            #expect(error.message.contains("avahi-daemon is not running"), "\(error)")
            let group = try Self.group("late")
            let publication = try await discovery.publish(PeerAnnouncement(peerID: PeerID("peer-late"), group: group, port: 5006))
            let collected = PeerEventRecorder(try await discovery.browse(group: group), kind: .dnssd, label: "ours")
            try await sandbox.startAvahi()
            startedAgain = true
            #expect(try await eventually { discovery.status == .running })
            try await collected.waitForPeer(named: publication.name, timeout: slow(.seconds(20)))

            try await sandbox.stopAvahi()
            #expect(try await eventually { statuses.statuses.filter { if case .unavailable = $0 { true } else { false } }.count >= 2 })
            try await sandbox.startAvahi()
            #expect(try await eventually { discovery.status == .recovered })
            // The stream starts with the status current when the recorder subscribed: `.starting`,
            // or already `.unavailable` when the first connection attempt failed before that.
            let first = statuses.statuses.first
            let startedAsExpected = if case .unavailable? = first { true } else { first == .starting }
            #expect(startedAsExpected, "\(statuses.statuses)")
            #expect(!statuses.statuses.contains(.stopped))
            try await publication.updateMetadata(PeerMetadata(["after": "restart"]))
            try await collected.waitForPeer(named: publication.name, timeout: slow(.seconds(20)),
                                            matching: { $0.metadata["after"] == "restart" }, "the update after the restart")
            try collected.checkRules()
            await discovery.shutdown()
            #expect(discovery.status == .stopped)
        } catch {
            if !startedAgain { try? await sandbox.startAvahi() }
            throw error
        }
    }
}

extension AvahiTests {
    /// The example in Packages/DNSSD/README.md, with `print` collected.
    @Test func readmeExample() async throws {
        var printed: [String] = []
        func print(_ item: Any) { printed.append("\(item)") }

        let discovery = try DNSSDDiscovery()
        let group = try PeerGroupID("tasks")
        let browser = try await discovery.browse(group: group)
        let me = try await discovery.publish(PeerAnnouncement(
            peerID: PeerID("peer-1"), group: group, port: 4984, metadata: PeerMetadata(["name": "Kitchen tablet"])))
        print(me.name)
        for await event in browser {
            print(event)
            break
        }
        await discovery.shutdown()

        #expect(printed == [
            "peer-1",
            "appeared peer-1 'peer-1' in tasks at 127.0.0.1#4984 [name=Kitchen tablet] via dnssd",
        ])
    }
}
