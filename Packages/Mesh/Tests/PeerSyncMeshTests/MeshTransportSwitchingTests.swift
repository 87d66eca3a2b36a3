import Foundation
import PeerSyncBLE
import PeerSyncCore
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncMeshBluetooth
import Testing

/// Wi-Fi ⇄ Bluetooth switching (module README, "Transports"): peers with both transports —
/// Wi-Fi the in-process network (loopback links, in-process discovery), Bluetooth the real BLE
/// stack over simulated radios and shaped `AF_UNIX` seqpacket channels (TLS, WebSocket
/// framing, BLIP as on a radio). Every document is written once, under its own ID, so each
/// peer must store each of the other's documents exactly once: the counters catch a document
/// lost or fetched twice across a switch.
@Suite struct MeshTransportSwitchingTests {
    /// Seeds of ``seededCutRestoreSchedules(batch:)``: 50 by default (10 under a sanitizer);
    /// `PEERSYNC_MESH_SWITCH_SEEDS=N` runs N.
    static let seedCount = PeerSyncMeshTests.seedCount("PEERSYNC_MESH_SWITCH_SEEDS", normal: 50, sanitized: 10)
    /// Five batches run side by side; the seeds of a batch one after another.
    static let batches = 0..<min(5, seedCount)

    @Test func bluetoothAloneCarriesAMesh() async throws {
        try await withSwitchingPeers(["a", "b", "c"], wifi: false) { peers in
            try await peers.startAll()
            for peer in peers.all {
                for i in 0..<4 { try await peer.save("\(peer.name)-\(i)", ["by": .string(peer.name)]) }
            }
            try await peers.expectEveryDocumentOnceEverywhere(count: 12, within: .seconds(90), "three peers over Bluetooth only")
            for peer in peers.all {
                for other in peers.all where other !== peer {
                    let info = peer.replicator.peerInfo(for: other.replicator.peerID)
                    #expect(info?.transports == [.bluetooth], "\(peer.name) sees \(other.name) on \(String(describing: info?.transports))")
                }
                #expect(peer.replicator.status(for: .bluetooth)?.active == true)
                #expect(peer.replicator.status(for: .wifi) == nil)
            }
        }
    }

    @Test func aPeerOnlyBluetoothReachesSyncsThereAndMovesToWifiWhenItAppears() async throws {
        try await withSwitchingPeers(["a", "b"]) { peers in
            let (a, b) = (peers.all[0], peers.all[1])
            peers.wifi.partition([["a"], ["b"]])          // Wi-Fi neither discovers nor links them
            try await peers.startAll()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .bluetooth && peers.linkTransport(b, a) == .bluetooth },
                    "no Bluetooth link")
            #expect(a.replicator.peerInfo(for: b.replicator.peerID)?.transports == [.bluetooth])
            try await a.save("a-1", ["n": 1])
            try await b.save("b-1", ["n": 1])
            try await peers.expectEveryDocumentOnceEverywhere(count: 2, within: .seconds(60), "over Bluetooth")

            // Wi-Fi comes back: the link moves there, and the pair is never without a link.
            let gaps = peers.watchForGaps(a, b)
            peers.wifi.heal()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .wifi && peers.linkTransport(b, a) == .wifi },
                    "the link did not move to Wi-Fi")
            #expect(await gaps.stop() == 0, "the peers were without a link while moving to Wi-Fi")
            #expect(a.replicator.peerInfo(for: b.replicator.peerID)?.transports == [.wifi, .bluetooth])
            for i in 2...6 { try await a.save("a-\(i)", ["n": .int(Int64(i))]) }
            try await peers.expectEveryDocumentOnceEverywhere(count: 7, within: .seconds(60), "after moving to Wi-Fi")
            #expect(peers.received(by: b, over: .wifi) > 0, "nothing arrived over Wi-Fi")
        }
    }

    /// The side that dials the Wi-Fi link keeps the Bluetooth link until the new one got
    /// going, so a peer slow to take the new link in (here: each accepted Wi-Fi link reaches
    /// the mesh 1 s late, as under load) is never without a link. Both directions are watched:
    /// whichever side dials, the other one is the slow acceptor.
    @Test func aPeerSlowToAcceptTheWifiLinkKeepsItsBluetoothLinkMeanwhile() async throws {
        try await withSwitchingPeers(["a", "b"], wrapWifiLinks: { DelayedLinks(wrapping: $0, acceptDelay: .seconds(1)) }) { peers in
            let (a, b) = (peers.all[0], peers.all[1])
            peers.wifi.partition([["a"], ["b"]])
            try await peers.startAll()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .bluetooth && peers.linkTransport(b, a) == .bluetooth },
                    "no Bluetooth link")
            try await a.save("a-1", ["n": 1])
            try await peers.expectEveryDocumentOnceEverywhere(count: 1, within: .seconds(60), "over Bluetooth")

            let (gapsAtA, gapsAtB) = (peers.watchForGaps(a, b), peers.watchForGaps(b, a))
            peers.wifi.heal()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .wifi && peers.linkTransport(b, a) == .wifi },
                    "the link did not move to Wi-Fi")
            let (atA, atB) = (await gapsAtA.stop(), await gapsAtB.stop())
            #expect(atA == 0 && atB == 0, "without a link while moving to Wi-Fi: a \(atA), b \(atB) samples")
            try await b.save("b-1", ["n": 1])
            try await peers.expectEveryDocumentOnceEverywhere(count: 2, within: .seconds(60), "after moving to Wi-Fi")
        }
    }

    @Test func wifiCutMidSyncContinuesOverBluetoothThenReturns() async throws {
        var tuning = MeshTuning()
        tuning.transportFallbackFailures = 2
        try await withSwitchingPeers(["a", "b"], tuning: tuning) { peers in
            let (a, b) = (peers.all[0], peers.all[1])
            try await peers.startAll()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .wifi && peers.linkTransport(b, a) == .wifi },
                    "no Wi-Fi link")
            for i in 0..<150 { try await a.save("a-\(i)", ["n": .int(Int64(i)), "pad": .string(String(repeating: "x", count: 200))]) }
            // Mid-sync: every Wi-Fi link breaks and no new one connects, while discovery still
            // sees the peer there (the failures count; the third is Bluetooth's turn).
            #expect(try await eventually(.seconds(30)) { peers.received(by: b) >= 10 }, "the sync did not start")
            peers.wifi.links.partition(["a"], ["b"])
            #expect(peers.received(by: b) < 150, "the sync ended before the cut: the test proves nothing")
            // Two failed Wi-Fi dials (each up to the 5 s connect timeout) and their backoff come
            // first: ~2-4 s alone, but more than 30 s once in the full run's Mesh module (48
            // suites in parallel, 64-peer meshes among them).
            #expect(try await eventually(.seconds(90)) { peers.linkTransport(a, b) == .bluetooth }, "no fallback to Bluetooth")
            try await peers.expectEveryDocumentOnceEverywhere(count: 150, within: .seconds(120), "after the Wi-Fi cut")
            #expect(peers.received(by: b, over: .bluetooth) > 0, "nothing arrived over Bluetooth")

            let gaps = peers.watchForGaps(a, b)
            peers.wifi.links.heal()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .wifi && peers.linkTransport(b, a) == .wifi },
                    "the link did not move back to Wi-Fi")
            #expect(await gaps.stop() == 0, "the peers were without a link while moving back to Wi-Fi")
            for i in 0..<10 { try await b.save("b-\(i)", ["n": .int(Int64(i))]) }
            try await peers.expectEveryDocumentOnceEverywhere(count: 160, within: .seconds(60), "back on Wi-Fi")
        }
    }

    @Test func bluetoothLostWhileOnWifiChangesNothing() async throws {
        try await withSwitchingPeers(["a", "b"]) { peers in
            let (a, b) = (peers.all[0], peers.all[1])
            try await peers.startAll()
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(a, b) == .wifi }, "no Wi-Fi link")
            peers.bluetooth.powerOff()
            for i in 0..<5 { try await a.save("a-\(i)", ["n": .int(Int64(i))]) }
            try await peers.expectEveryDocumentOnceEverywhere(count: 5, within: .seconds(60), "Wi-Fi without Bluetooth")
            #expect(peers.linkTransport(a, b) == .wifi)
            #expect(peers.received(by: b, over: .bluetooth) == 0)
        }
    }

    /// Seeded schedules of Wi-Fi and Bluetooth cuts and restores (Wi-Fi links only, or Wi-Fi
    /// discovery and links), with writes in between; at the end every network is back and the
    /// two peers must hold every document, each stored exactly once, linked over Wi-Fi.
    @Test(arguments: batches)
    func seededCutRestoreSchedules(batch: Int) async throws {
        for seed in stride(from: batch, to: Self.seedCount, by: Self.batches.count) {
            try await runSchedule(seed: seed)
        }
    }

    func runSchedule(seed: Int) async throws {
        var random = SplitMix64(seed: UInt64(seed) &* 0x2545_F491 &+ 99)
        var tuning = MeshTuning()
        tuning.handshakeTimeout = .seconds(2)
        tuning.maximumRetryDelay = .milliseconds(500)
        tuning.transportFallbackFailures = 1 + seed % 3
        try await withSwitchingPeers(["x\(seed)", "y\(seed)"], tuning: tuning) { peers in
            let (x, y) = (peers.all[0], peers.all[1])
            try await peers.startAll()
            var written = 0
            var steps: [String] = []
            for _ in 0..<10 {
                switch Int.random(in: 0..<9, using: &random) {
                case 0..<4:
                    let peer = Bool.random(using: &random) ? x : y
                    try await peer.save("\(peer.name)-\(written)", ["n": .int(Int64(written))])
                    written += 1
                    steps.append("write@\(peer.name)")
                case 4:
                    peers.wifi.links.partition([x.name], [y.name])
                    steps.append("cut wifi links")
                case 5:
                    peers.wifi.partition([[x.name], [y.name]])
                    steps.append("cut wifi")
                case 6:
                    peers.wifi.heal()
                    steps.append("restore wifi")
                case 7:
                    peers.bluetooth.powerOff()
                    steps.append("cut bluetooth")
                default:
                    peers.bluetooth.powerOn()
                    steps.append("restore bluetooth")
                }
                try await Task.sleep(for: .milliseconds(Int.random(in: 0..<400, using: &random)))
            }
            peers.wifi.heal()
            peers.bluetooth.powerOn()
            let what = "seed \(seed) (fallback after \(tuning.transportFallbackFailures); \(steps.joined(separator: ", ")))"
            try await peers.expectEveryDocumentOnceEverywhere(count: written, within: .seconds(90), what)
            #expect(try await eventually(.seconds(30)) { peers.linkTransport(x, y) == .wifi && peers.linkTransport(y, x) == .wifi },
                    "\(what): the link is not back on Wi-Fi")
        }
    }
}

/// Peers with Wi-Fi (in-process) and Bluetooth (simulated radios and channels), counting what
/// each stores from the others, per document and transport.
final class SwitchingPeers: Sendable {
    let wifi: InProcessMeshNetwork
    let bluetooth: SimulatedBluetoothMeshNetwork
    let all: [MeshPeer]
    /// Per receiving peer: how often each document was stored, and per transport how many.
    private let stored = LockedValue<[String: (documents: [String: Int], transports: [MultipeerTransport: Int])]>([:])

    init(_ names: [String], wifi useWifi: Bool, tuning: MeshTuning,
         wrapWifiLinks: (@Sendable (any MeshLinkTransport) -> any MeshLinkTransport)? = nil) async throws {
        wifi = try InProcessMeshNetwork()
        var options = MultipeerBluetoothOptions()
        options.discovery.nameProbeDuration = .milliseconds(200)
        options.discovery.advertisementTimeout = .seconds(5)
        options.connectTimeout = .seconds(5)
        bluetooth = try SimulatedBluetoothMeshNetwork(options: options)
        var peers: [MeshPeer] = []
        for name in names {
            peers.append(try await MeshPeer(name, network: wifi, tuning: tuning, wrapLinks: wrapWifiLinks, wifi: useWifi,
                                            bluetooth: bluetooth))
        }
        all = peers
        for peer in peers {
            let name = peer.name
            peer.replicator.addPeerDocumentReplicationListener { [stored] event in
                guard !event.isPush else { return }
                stored.withLock { counts in
                    for document in event.documents where document.error == nil {
                        counts[name, default: ([:], [:])].documents[document.id, default: 0] += 1
                        counts[name, default: ([:], [:])].transports[event.transport, default: 0] += 1
                    }
                }
            }
        }
    }

    func startAll() async throws {
        for peer in all { try await peer.replicator.start() }
    }

    func close() async {
        await withTaskGroup(of: Void.self) { group in
            for peer in all { group.addTask { await peer.close() } }
        }
    }

    /// The transport of `peer`'s link to `other`, nil without one.
    func linkTransport(_ peer: MeshPeer, _ other: MeshPeer) -> MultipeerTransport? {
        peer.replicator.peerInfo(for: other.replicator.peerID)?.replicatorTransport
    }

    /// Documents `peer` stored from others (over `transport`, or any).
    func received(by peer: MeshPeer, over transport: MultipeerTransport? = nil) -> Int {
        stored.withLock { counts in
            guard let mine = counts[peer.name] else { return 0 }
            return transport.map { mine.transports[$0] ?? 0 } ?? mine.documents.values.reduce(0, +)
        }
    }

    /// Waits until every peer holds `count` documents, the same everywhere, and each peer
    /// stored every document it did not write exactly once; records what is wrong otherwise.
    func expectEveryDocumentOnceEverywhere(count: Int, within timeout: Duration, _ what: String,
                                           sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let mesh = TestMesh(wrapping: all, network: wifi)
        guard try await mesh.expectConvergence(expecting: count, within: timeout, what, sourceLocation: sourceLocation) else { return }
        // A document is reported after the transaction storing it committed: its handler has
        // to resume first, and the event then passes the replicator's and the mesh's listener
        // queue. This check used to look 200 ms after the databases matched, and twice in the
        // full run of `Tools/test` (every core busy) found the last documents unreported — a
        // contiguous run, one transaction's worth (`a-139`…`a-149` once, 37 once), as when
        // those handlers had not resumed yet. So it waits until every stored document was
        // reported, generously (an event truly lost still fails below), then a moment more for
        // a second report of any of them.
        var received: [String: Set<String>] = [:]
        for peer in all { received[peer.name] = Set(try await peer.snapshot().keys.filter { !$0.hasPrefix("\(peer.name)-") }) }
        _ = try await eventually(.seconds(30)) { [received] in
            stored.withLock { counts in
                all.allSatisfy { peer in received[peer.name, default: []].allSatisfy { counts[peer.name]?.documents[$0] != nil } }
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        for peer in all {
            let ids = received[peer.name, default: []]
            let counts = stored.withLock { $0[peer.name]?.documents ?? [:] }
            let wrong = ids.filter { (counts[$0] ?? 0) > 1 }.sorted()
            let unexpected = Set(counts.keys).subtracting(ids)
            #expect(wrong.isEmpty && unexpected.isEmpty,
                    "\(what): \(peer.name) stored \(wrong.prefix(5).map { "\($0) ×\(counts[$0] ?? 0)" }) \(unexpected.sorted().prefix(5)) (each must be once)",
                    sourceLocation: sourceLocation)
            // Every document stored is reported once (it once was not, after a link cut: the
            // link's replicator was dropped before its last revision's event; Mesh README).
            let unreported = ids.filter { counts[$0] == nil }.sorted()
            #expect(unreported.isEmpty, "\(what): \(peer.name) reported no event for \(unreported.prefix(5))",
                    sourceLocation: sourceLocation)
        }
    }

    /// Samples every 2 ms whether `peer` has a link to `other`; ``GapWatch/stop()`` returns the
    /// samples without one.
    func watchForGaps(_ peer: MeshPeer, _ other: MeshPeer) -> GapWatch {
        GapWatch { [self] in linkTransport(peer, other) != nil }
    }
}

/// A sampler started by ``SwitchingPeers/watchForGaps(_:_:)``.
final class GapWatch: Sendable {
    private let task: Task<Int, Never>

    init(_ linked: @escaping @Sendable () -> Bool) {
        task = Task {
            var gaps = 0
            while !Task.isCancelled {
                if !linked() { gaps += 1 }
                try? await Task.sleep(for: .milliseconds(2))
            }
            return gaps
        }
    }

    /// Stops sampling; the number of samples that found no link.
    func stop() async -> Int {
        task.cancel()
        return await task.value
    }
}

/// Runs `body` with peers `names` (Wi-Fi unless `wifi` is false, and Bluetooth), closing them
/// afterwards (also on failure). The peers are not started.
func withSwitchingPeers(_ names: [String], wifi: Bool = true, tuning: MeshTuning = MeshTuning(),
                        wrapWifiLinks: (@Sendable (any MeshLinkTransport) -> any MeshLinkTransport)? = nil,
                        _ body: (SwitchingPeers) async throws -> Void) async throws {
    let peers = try await SwitchingPeers(names, wifi: wifi, tuning: tuning, wrapWifiLinks: wrapWifiLinks)
    do { try await body(peers) } catch {
        await peers.close()
        throw error
    }
    await peers.close()
}
