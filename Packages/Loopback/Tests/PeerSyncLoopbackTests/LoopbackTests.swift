import PeerSyncCore
import PeerSyncLoopback
import PeerSyncTransport
import Testing

/// Opens a listener on `server` and connects a client from `client`; returns both ends.
private func connectedPair(_ network: LoopbackNetwork, client: String = "a", server: String = "b",
                           options: LoopbackConnectOptions = .init(),
                           listenOptions: LoopbackListenOptions = .init(),
                           closeTimeout: Duration = .seconds(5)) async throws
    -> (client: LoopbackConnection, server: LoopbackConnection, listener: LoopbackListener) {
    let listener = try LoopbackTransport(network: network, host: server, closeTimeout: closeTimeout)
        .listenLoopback(on: Endpoint(url: "loopback://\(server):0"), options: listenOptions)
    let connection = try await LoopbackTransport(network: network, host: client, closeTimeout: closeTimeout)
        .connectLoopback(to: listener.endpoint, options: options)
    let accepted = try #require(try await listener.acceptLoopback())
    return (connection, accepted, listener)
}

private func expectError(_ code: PeerSyncError.Code, _ body: () async throws -> Void,
                         sourceLocation: SourceLocation = #_sourceLocation) async {
    do {
        try await body()
        Issue.record("expected PeerSyncError \(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as PeerSyncError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected PeerSyncError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Sends `messages` from the client and reads them at the server; returns what arrived.
private func exchange(_ client: LoopbackConnection, _ server: LoopbackConnection,
                      _ messages: [TransportMessage]) async throws -> [TransportMessage] {
    async let sent: Void = { for m in messages { try await client.send(m) } }()
    var received: [TransportMessage] = []
    for _ in messages { received.append(try #require(try await server.receive())) }
    try await sent
    return received
}

@Suite struct LoopbackEndpointsAndListeners {
    @Test func refusesUnknownEndpointsAndBadURLs() async throws {
        let network = LoopbackNetwork()
        let transport = LoopbackTransport(network: network)
        await expectError(.connectionRefused) { _ = try await transport.connect(to: Endpoint(url: "loopback://nobody")) }
        await expectError(.invalidArgument) { _ = try await transport.connect(to: Endpoint(url: "ws://127.0.0.1:1/x")) }
        await expectError(.invalidArgument) { _ = try await transport.connect(to: Endpoint(url: "loopback://x:0")) }
        await expectError(.invalidArgument) { _ = try await transport.listen(on: Endpoint(url: "wss://x")) }
        var options = LoopbackConnectOptions()
        options.conditions = LinkConditions(mtu: 0)
        _ = try await transport.listen(on: Endpoint(url: "loopback://y"))
        await expectError(.invalidArgument) { _ = try await transport.connect(to: Endpoint(url: "loopback://y"), options: options) }
    }

    @Test func networksAreIsolated() async throws {
        let one = LoopbackNetwork()
        let two = LoopbackNetwork()
        let listener = try await LoopbackTransport(network: one).listen(on: Endpoint(url: "loopback://shared-name"))
        await expectError(.connectionRefused) {
            _ = try await LoopbackTransport(network: two).connect(to: Endpoint(url: "loopback://shared-name"))
        }
        // The same name is free on the other network.
        let other = try await LoopbackTransport(network: two).listen(on: Endpoint(url: "loopback://shared-name"))
        await other.close()
        await listener.close()
    }

    @Test func bindingRulesAndPortZero() async throws {
        let network = LoopbackNetwork()
        let transport = LoopbackTransport(network: network)
        let named = try await transport.listen(on: Endpoint(url: "loopback://svc"))
        #expect(named.endpoint == (try Endpoint(url: "loopback://svc")))
        await expectError(.addressInUse) { _ = try await transport.listen(on: Endpoint(url: "loopback://svc")) }
        let first = try await transport.listen(on: Endpoint(url: "loopback://svc:0"))
        let second = try await transport.listen(on: Endpoint(url: "loopback://svc:0"))
        #expect(first.endpoint.port != nil && first.endpoint.port != 0)
        #expect(second.endpoint.port != nil && second.endpoint.port != first.endpoint.port)
        #expect(Set(network.listenerEndpoints) == [named.endpoint, first.endpoint, second.endpoint])
        await named.close()
        // Closing frees the endpoint.
        let again = try await transport.listen(on: Endpoint(url: "loopback://svc"))
        for listener in [again, first, second] { await listener.close() }
        #expect(network.listenerEndpoints.isEmpty)
    }

    @Test func metadataAndRequestedPath() async throws {
        let network = LoopbackNetwork()
        let listener = try LoopbackTransport(network: network, host: "srv").listenLoopback(on: Endpoint(url: "loopback://srv:4984"))
        let client = try await LoopbackTransport(network: network, host: "cli")
            .connectLoopback(to: Endpoint(url: "loopback://srv:4984/db/_blipsync?x=1"))
        let server = try #require(try await listener.acceptLoopback())
        #expect(server.requestedEndpoint.path == "/db/_blipsync")
        #expect(server.requestedEndpoint.query == "x=1")
        #expect(client.remoteAddress == "loopback://srv:4984")
        #expect(server.remoteAddress?.hasPrefix("loopback://cli:") == true)
        #expect(client.localHost == "cli" && client.remoteHost == "srv")
        #expect(server.localHost == "srv" && server.remoteHost == "cli")
        #expect(client.kind == .loopback && client.peerCertificateChain.isEmpty)
        #expect(client.conditions == .perfect)
        await client.close()
        await server.close()
        await listener.close()
        #expect(network.liveLinkCount == 0)
    }

    @Test func fullBacklogRefuses() async throws {
        let network = LoopbackNetwork()
        var options = LoopbackListenOptions()
        options.backlog = 2
        let listener = try LoopbackTransport(network: network).listenLoopback(on: Endpoint(url: "loopback://busy"), options: options)
        let transport = LoopbackTransport(network: network)
        let one = try await transport.connect(to: listener.endpoint)
        let two = try await transport.connect(to: listener.endpoint)
        await expectError(.connectionRefused) { _ = try await transport.connect(to: listener.endpoint) }
        // Accepting one makes room.
        let accepted = try #require(try await listener.accept())
        let three = try await transport.connect(to: listener.endpoint)
        await listener.close()
        await accepted.close()
        for connection in [one, two, three] { await connection.close() }
    }

    @Test func closingListenerClosesUnacceptedConnections() async throws {
        let network = LoopbackNetwork()
        let listener = try await LoopbackTransport(network: network).listen(on: Endpoint(url: "loopback://l"))
        let client = try await LoopbackTransport(network: network).connect(to: listener.endpoint)
        await listener.close()
        #expect(try await client.receive() == nil)
        #expect(client.closeInfo?.code == .goingAway)
        #expect(network.liveLinkCount == 0)
    }
}

@Suite struct LoopbackClosing {
    @Test func releasingAnOpenConnectionResetsThePeer() async throws {
        let network = LoopbackNetwork()
        var pair: (client: LoopbackConnection, server: LoopbackConnection, listener: LoopbackListener)? =
            try await connectedPair(network)
        let server = try #require(pair?.server)
        try await pair?.client.send(text: "last words")
        await pair?.listener.close()
        pair = nil  // drops the client end without closing it
        #expect(try await server.receive() == .text("last words"))
        await expectError(.connectionReset) { _ = try await server.receive() }
        #expect(server.closeInfo?.code == .abnormalClosure)
        #expect(network.liveLinkCount == 0)
    }

    @Test func closeGivesUpAfterTimeoutWhenThePeerDoesNotRead() async throws {
        let network = LoopbackNetwork()
        var options = LoopbackConnectOptions(conditions: LinkConditions(latency: .milliseconds(1), mtu: 1000))
        options.receiveBufferMessages = 2
        var listenOptions = LoopbackListenOptions()
        listenOptions.receiveBufferMessages = 2
        let (client, server, listener) = try await connectedPair(network, options: options, listenOptions: listenOptions,
                                                                 closeTimeout: .milliseconds(300))
        // Fill every buffer on the way (about 1.5 MB): the server never reads.
        let blocked = Task { () -> Int in
            var sent = 0
            do {
                while sent < 10_000 {
                    try await client.send([UInt8](repeating: 1, count: 100_000))
                    sent += 1
                }
            } catch {}
            return sent
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.closeInfo == nil)
        let clock = ContinuousClock()
        let start = clock.now
        await client.close(code: .normal, reason: "bye")
        // It gave up after its 300 ms timeout instead of waiting for the peer to read. (Only a
        // hang guard: under a loaded test run wake-ups can lag by seconds.)
        #expect(clock.now - start >= .milliseconds(300))
        #expect(clock.now - start < .seconds(60))
        let sent = await blocked.value
        #expect(sent < 10_000)
        // The close never reached the server: it reads what arrived, then sees the reset.
        var received = 0
        do {
            while try await server.receive() != nil { received += 1 }
            Issue.record("expected a reset, got a clean close")
        } catch let error as PeerSyncError {
            #expect(error.code == .connectionReset)
        }
        #expect(received <= sent)
        #expect(client.closeInfo == CloseInfo(code: .normal, reason: "bye"))
        #expect(server.closeInfo?.code == .abnormalClosure)
        await listener.close()
        #expect(network.liveLinkCount == 0)
    }

    @Test func cleanClosesLeaveNoLinks() async throws {
        let network = LoopbackNetwork()
        let conditions = LinkConditions(latency: .milliseconds(1), mtu: 64, seed: 3)
        for round in 0..<10 {
            let (client, server, listener) = try await connectedPair(network, options: .init(conditions: round % 2 == 0 ? conditions : nil))
            try await client.send(text: "x")
            #expect(try await server.receive() == .text("x"))
            if round % 3 == 0 {
                await server.close()
            } else {
                await client.close()
            }
            await listener.close()
        }
        #expect(network.liveLinkCount == 0)
    }
}

@Suite struct LoopbackLinkSimulation {
    @Test func fragmentsBelowTheMTUAndReassembles() async throws {
        let network = LoopbackNetwork()
        let trace = LinkTrace()
        let options = LoopbackConnectOptions(conditions: LinkConditions(mtu: 100, seed: 1), trace: trace)
        let (client, server, listener) = try await connectedPair(network, options: options)
        let text = String(repeating: "é😀a", count: 40)  // 280 bytes; cuts fall inside characters
        let messages: [TransportMessage] = [.binary([]), .binary(Array(0..<250).map { UInt8($0) }), .text(text), .binary([9])]
        #expect(try await exchange(client, server, messages) == messages)
        let fragments = trace.events(.clientToServer).filter { $0.kind == .fragment }
        #expect(fragments.map(\.bytes) == [0, 100, 100, 50, 100, 100, 80, 1])
        #expect(fragments.map(\.endsMessage) == [true, false, false, true, false, false, true, true])
        #expect(fragments.map(\.index) == Array(0..<8))
        #expect(fragments.allSatisfy { $0.bytes <= 100 })
        await client.close()
        await listener.close()
        _ = server
    }

    /// Runs fixed traffic over a fresh network with `conditions` and returns the trace.
    private func traceOf(_ conditions: LinkConditions, messages: Int = 40, replies: Bool = true) async throws -> [LinkTrace.Event] {
        let network = LoopbackNetwork()
        let trace = LinkTrace()
        let (client, server, listener) = try await connectedPair(network, options: .init(conditions: conditions, trace: trace))
        let replyCount = replies ? messages : 0
        async let replying: Void = {
            for i in 0..<replyCount { try await server.send(Array(repeating: UInt8(i), count: 300 + i * 7)) }
        }()
        do {
            for i in 0..<messages { try await client.send(Array(repeating: UInt8(i), count: 100 + i * 13)) }
            for _ in 0..<messages { _ = try await server.receive() }
            for _ in 0..<replyCount { _ = try await client.receive() }
        } catch let error as PeerSyncError where error.code == .connectionReset {
            // Conditions with disconnects end the traffic early; the trace says where.
        }
        try? await replying
        await client.close()
        await listener.close()
        return trace.events
    }

    @Test func sameSeedGivesTheSameFragmentAndTimingSequence() async throws {
        let conditions = LinkConditions(latency: .milliseconds(1), jitter: .milliseconds(3), bandwidth: 50_000_000,
                                        mtu: 128, seed: 1234)
        let first = try await traceOf(conditions)
        let second = try await traceOf(conditions)
        for direction in [LinkDirection.clientToServer, .serverToClient] {
            let a = first.filter { $0.direction == direction }
            let b = second.filter { $0.direction == direction }
            #expect(a.count > 40)
            #expect(a == b, "\(direction) traces differ for the same seed")
            // Jitter really varies within a run.
            #expect(Set(a.map(\.delay)).count > 5)
        }
        var other = conditions
        other.seed = 4321
        let third = try await traceOf(other)
        #expect(third.filter { $0.direction == .clientToServer }.map(\.delay)
                != first.filter { $0.direction == .clientToServer }.map(\.delay))
        // Sizes do not depend on the seed, only the random parts do.
        #expect(third.filter { $0.direction == .clientToServer }.map(\.bytes)
                == first.filter { $0.direction == .clientToServer }.map(\.bytes))
    }

    @Test func randomDisconnectsAreDeterministic() async throws {
        let conditions = LinkConditions(mtu: 64, disconnectProbability: 0.01, seed: 77)
        // One direction only: with traffic both ways, which direction breaks first would
        // depend on scheduling.
        let first = try await traceOf(conditions, messages: 100, replies: false)
        let second = try await traceOf(conditions, messages: 100, replies: false)
        let disconnects = first.filter { $0.kind == .disconnect }
        #expect(disconnects.count == 1)
        #expect(disconnects == second.filter { $0.kind == .disconnect })
    }

    @Test func dropAfterBytesBreaksTheLinkForBothSides() async throws {
        let network = LoopbackNetwork()
        let trace = LinkTrace()
        let options = LoopbackConnectOptions(conditions: LinkConditions(mtu: 1000, dropAfterBytes: 10_000), trace: trace)
        let (client, server, listener) = try await connectedPair(network, options: options)
        var delivered = 0
        // 10 messages of 1500 bytes fit in the buffers, so the sends may all be accepted
        // before the wire reaches the limit.
        for _ in 0..<10 {
            do {
                try await client.send([UInt8](repeating: 5, count: 1500))
            } catch let error as PeerSyncError {
                #expect(error.code == .connectionReset)
                break
            }
        }
        do {
            while let message = try await server.receive() {
                #expect(message == .binary([UInt8](repeating: 5, count: 1500)))
                delivered += 1
            }
            Issue.record("expected a reset on the server")
        } catch let error as PeerSyncError {
            #expect(error.code == .connectionReset)
        }
        await expectError(.connectionReset) { try await client.send([1]) }
        // 10_000 bytes carry 6 whole messages of 1500 (9000 bytes); the 7th is cut.
        #expect(delivered == 6)
        await expectError(.connectionReset) { _ = try await client.receive() }
        #expect(client.closeInfo?.code == .abnormalClosure)
        #expect(server.closeInfo?.code == .abnormalClosure)
        #expect(trace.events.filter { $0.kind == .disconnect }.count == 1)
        await client.close()
        await listener.close()
        #expect(network.liveLinkCount == 0)
    }

    @Test func latencyDelaysDelivery() async throws {
        let network = LoopbackNetwork()
        let (client, server, listener) = try await connectedPair(network, options: .init(conditions: LinkConditions(latency: .milliseconds(40))))
        let clock = ContinuousClock()
        let start = clock.now
        try await client.send(text: "ping")
        _ = try await server.receive()
        try await server.send(text: "pong")
        _ = try await client.receive()
        // Loose lower bound only: a round trip takes at least twice the latency.
        #expect(clock.now - start >= .milliseconds(80))
        await client.close()
        await listener.close()
    }

    @Test func bandwidthShapingIsObservable() async throws {
        let network = LoopbackNetwork()
        let bandwidth = 1_000_000
        let trace = LinkTrace()
        let (client, server, listener) = try await connectedPair(network, options: .init(conditions: LinkConditions(bandwidth: bandwidth, mtu: 4096), trace: trace))
        let total = 500_000
        let clock = ContinuousClock()
        let start = clock.now
        async let sending: Void = {
            for _ in 0..<(total / 10_000) { try await client.send([UInt8](repeating: 1, count: 10_000)) }
        }()
        var received = 0
        while received < total {
            received += try #require(try await server.receive()).byteCount
        }
        try await sending
        let elapsed = clock.now - start
        // The wire time is N / bandwidth = 0.5 s exactly...
        let wireTime = trace.events(.clientToServer).filter { $0.kind == .fragment }.reduce(Duration.zero) { $0 + $1.transmission }
        #expect(wireTime >= .milliseconds(499) && wireTime <= .milliseconds(501), "wire time \(wireTime)")
        // ...and it really passes: never faster; slower only by scheduling lag (loose hang
        // guard, since a loaded 2-core machine delays wake-ups).
        #expect(elapsed >= .milliseconds(450), "500 kB at 1 MB/s arrived in \(elapsed)")
        #expect(elapsed < .seconds(120), "500 kB at 1 MB/s took \(elapsed)")
        await client.close()
        await listener.close()
    }

    @Test func networkConditionsPerHostPair() async throws {
        let network = LoopbackNetwork(conditions: LinkConditions(mtu: 512))
        network.setConditions(.bluetoothLE(seed: 5), between: "phone", and: "watch")
        #expect(network.conditions(between: "watch", and: "phone") == .bluetoothLE(seed: 5))
        #expect(network.conditions(between: "phone", and: "laptop") == LinkConditions(mtu: 512))
        let (client, server, listener) = try await connectedPair(network, client: "phone", server: "watch")
        #expect(client.conditions == .bluetoothLE(seed: 5))
        let messages: [TransportMessage] = [.binary(Array(repeating: 3, count: 2000)), .text("over BLE")]
        #expect(try await exchange(client, server, messages) == messages)
        network.setConditions(nil, between: "phone", and: "watch")
        #expect(network.conditions(between: "phone", and: "watch") == LinkConditions(mtu: 512))
        await client.close()
        await listener.close()
    }
}

@Suite struct LoopbackPartitions {
    @Test func partitionBreaksAndRefusesThenHealRestores() async throws {
        let network = LoopbackNetwork()
        let listeners = try ["a", "b", "c"].map { (name: String) in
            try LoopbackTransport(network: network, host: name).listenLoopback(on: Endpoint(url: "loopback://\(name)"))
        }
        let fromA = LoopbackTransport(network: network, host: "a")
        let fromB = LoopbackTransport(network: network, host: "b")
        let ab = try await fromA.connectLoopback(to: Endpoint(url: "loopback://b"))
        let abServer = try #require(try await listeners[1].acceptLoopback())
        let bc = try await fromB.connectLoopback(to: Endpoint(url: "loopback://c"))
        let bcServer = try #require(try await listeners[2].acceptLoopback())

        network.partition(["a"], ["b", "c"])
        #expect(network.isPartitioned("a", "b") && network.isPartitioned("c", "a"))
        #expect(!network.isPartitioned("b", "c"))
        await expectError(.connectionReset) { _ = try await ab.receive() }
        await expectError(.connectionReset) { _ = try await abServer.receive() }
        await expectError(.connectionRefused) { _ = try await fromA.connect(to: Endpoint(url: "loopback://c")) }
        await expectError(.connectionRefused) { _ = try await fromB.connect(to: Endpoint(url: "loopback://a")) }
        // Inside one side of the partition, traffic flows.
        try await bc.send(text: "still here")
        #expect(try await bcServer.receive() == .text("still here"))

        network.heal()
        #expect(!network.isPartitioned("a", "b"))
        let healed = try await fromA.connectLoopback(to: Endpoint(url: "loopback://b"))
        let healedServer = try #require(try await listeners[1].acceptLoopback())
        try await healed.send(text: "back")
        #expect(try await healedServer.receive() == .text("back"))

        await healed.close()
        await bc.close()
        for listener in listeners { await listener.close() }
        #expect(network.liveLinkCount == 0)
    }

    @Test func disconnectHostBreaksItsLinks() async throws {
        let network = LoopbackNetwork()
        let (client, server, listener) = try await connectedPair(network, client: "x", server: "y")
        let (other, otherServer, otherListener) = try await connectedPair(network, client: "p", server: "q")
        network.disconnect(host: "y")
        await expectError(.connectionReset) { _ = try await client.receive() }
        await expectError(.connectionReset) { try await server.send(text: "lost") }
        try await other.send(text: "unaffected")
        #expect(try await otherServer.receive() == .text("unaffected"))
        // The listener survives: new connections work.
        let again = try await LoopbackTransport(network: network, host: "x").connect(to: listener.endpoint)
        await again.close()
        await other.close()
        await listener.close()
        await otherListener.close()
    }
}
