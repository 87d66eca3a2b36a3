import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncTestSupport
import Testing

@Suite(.timeLimit(.minutes(1))) struct TLSStreamTests {
    static let server = Result { try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth],
                                                                  attributes: [certAttrCommonName: "server", certAttrHostname: "localhost"]) }

    @Test func handshakeAndEcho() async throws {
        let identity = try Self.server.get()
        let result = await handshakePair(client: .client(serverName: "localhost", serverTrust: .selfSignedOnly),
                                         server: .server(identity: identity))
        let client = try result.client.get()
        let server = try result.server.get()
        #expect(client.protocolVersion == .v1_3)
        #expect(!client.cipherSuite.isEmpty)
        #expect(client.peerCertificateChain == [identity.certificate])
        #expect(server.peerCertificateChain.isEmpty)
        #expect(server.serverName == "localhost")

        try await client.write(Array("hello".utf8))
        #expect(try await readExactly(server, 5) == Array("hello".utf8))
        try await server.write(Array("world!".utf8))
        #expect(try await readExactly(client, 6) == Array("world!".utf8))
        await client.close()
        #expect(try await server.read(maxBytes: 100) == nil)
        await server.close()
    }
}

@Suite(.timeLimit(.minutes(1))) struct TLSStreamBehaviourTests {
    static func identity() throws -> TLSIdentity { try TLSStreamTests.server.get() }
    static let clientConfig = TLSConfiguration.client(serverName: "localhost", serverTrust: .selfSignedOnly)

    static func connected(capacity: Int = 16 * 1024, client: TLSConfiguration = clientConfig) async throws -> (TLSStream, TLSStream) {
        let result = await handshakePair(client: client, server: .server(identity: try identity()), capacity: capacity)
        return (try result.client.get(), try result.server.get())
    }

    static func pattern(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed) &+ $0 >> 8) }
    }

    @Test func bulkTransferBothWaysConcurrently() async throws {
        let (client, server) = try await Self.connected(capacity: 4096)
        let up = Self.pattern(1_000_000, seed: 1), down = Self.pattern(700_000, seed: 2)
        async let sendUp: Void = client.write(up)
        async let sendDown: Void = server.write(down)
        async let receivedUp = readExactly(server, up.count)
        async let receivedDown = readExactly(client, down.count)
        try await sendUp
        try await sendDown
        #expect(try await receivedUp == up)
        #expect(try await receivedDown == down)
        await client.close()
        await server.close()
    }

    @Test func manySmallWritesKeepOrder() async throws {
        let (client, server) = try await Self.connected()
        async let send: Void = {
            for i in 0..<500 { try await client.write([UInt8(i % 256), UInt8(i / 256)]) }
        }()
        let received = try await readExactly(server, 1000)
        try await send
        let expected: [UInt8] = (0..<500).flatMap { (i: Int) -> [UInt8] in [UInt8(i % 256), UInt8(i / 256)] }
        #expect(received == expected)
        await client.close()
        await server.close()
    }

    @Test func readHonoursMaxBytes() async throws {
        let (client, server) = try await Self.connected()
        try await client.write(Array(repeating: 7, count: 100))
        let first = try await server.read(maxBytes: 10)
        #expect(first?.count == 10)
        #expect(try await readExactly(server, 90).count == 90)
        await #expect(throws: PeerSyncError.self) { try await server.read(maxBytes: 0) }
        await client.close()
        await server.close()
    }

    /// A read opens every record already received (up to `maxBytes`), not one 16 KiB record per
    /// call; a `close_notify` behind them is reported by the next read, after the data.
    @Test func aReadOpensEveryRecordAlreadyReceived() async throws {
        let (client, server) = try await Self.connected(capacity: 256 * 1024)
        let message = Self.pattern(60_000, seed: 3)
        try await client.write(message)        // four TLS records, all in the pipe
        await client.shutdownOutput()          // and close_notify behind them
        let first = try await server.read(maxBytes: 64 * 1024)
        #expect(first == message)
        #expect(try await server.read(maxBytes: 64 * 1024) == nil)
        await client.close()
        await server.close()
    }

    @Test func shutdownOutputIsAHalfClose() async throws {
        let (client, server) = try await Self.connected()
        try await client.write([1, 2, 3])
        await client.shutdownOutput()
        #expect(try await readExactly(server, 3) == [1, 2, 3])
        #expect(try await server.read(maxBytes: 10) == nil)
        // The other direction still works.
        try await server.write([9, 8])
        #expect(try await readExactly(client, 2) == [9, 8])
        let error = await capture { () async throws(PeerSyncError) in try await client.write([4]) }.error
        #expect(error?.code == .closed)
        await server.close()
        #expect(try await client.read(maxBytes: 10) == nil)
        await client.close()
    }

    @Test func closeEndsPendingReadAndLaterCalls() async throws {
        let (client, server) = try await Self.connected()
        async let pending = capture { () async throws(PeerSyncError) in try await client.read(maxBytes: 10) }
        try await Task.sleep(for: .milliseconds(50))
        await client.close()
        #expect(await pending.error?.code == .closed)
        #expect(await capture { () async throws(PeerSyncError) in try await client.write([1]) }.error?.code == .closed)
        await client.close() // idempotent
        #expect(try await server.read(maxBytes: 10) == nil)
        await server.close()
    }

    @Test func endWithoutCloseNotifyIsAnError() async throws {
        let pair = ByteStreamPair()
        let identity = try Self.identity()
        async let s = capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.b, configuration: .server(identity: identity))
        }
        let client = try await TLSStream.handshake(over: pair.a, configuration: Self.clientConfig)
        let server = try await s.get()
        await pair.a.close()   // the raw transport goes away, no TLS close_notify
        let error = await capture { () async throws(PeerSyncError) in try await server.read(maxBytes: 10) }.error
        #expect(error?.code == .tlsError)
        _ = client
        await server.close()
    }

    @Test func tls12CanBeNegotiated() async throws {
        var config = Self.clientConfig
        config.maximumVersion = .v1_2
        let (client, server) = try await Self.connected(client: config)
        #expect(client.protocolVersion == .v1_2)
        #expect(server.protocolVersion == .v1_2)
        #expect(client.cipherSuite.contains("ECDHE"))
        try await client.write([42])
        #expect(try await readExactly(server, 1) == [42])
        await client.close()
        await server.close()
    }

    @Test func noCommonVersionFailsTheHandshake() async throws {
        var client = Self.clientConfig
        client.maximumVersion = .v1_2
        var server = TLSConfiguration.server(identity: try Self.identity())
        server.minimumVersion = .v1_3
        let result = await handshakePair(client: client, server: server)
        #expect(result.client.error?.code == .tlsHandshakeFailed)
        #expect(result.server.error?.code == .tlsHandshakeFailed)
        #expect(result.client.error?.isCertificateTrustFailure == false)
    }

    @Test func garbageFromThePeerFailsCleanly() async throws {
        let pair = ByteStreamPair()
        let identity = try Self.identity()
        async let s = capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.b, configuration: .server(identity: identity))
        }
        try await pair.a.write(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8) + Array(repeating: 0x16, count: 300))
        let error = await s.error
        #expect(error?.code == .tlsHandshakeFailed)
        // Not TLS at all: the server closes the transport without answering.
        var received: [UInt8] = []
        while let chunk = try await pair.a.read(maxBytes: 1000) { received += chunk }
        #expect(received.isEmpty)
    }

    @Test func malformedHandshakeRecordGetsAnAlert() async throws {
        let pair = ByteStreamPair()
        let identity = try Self.identity()
        async let s = capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.b, configuration: .server(identity: identity))
        }
        // A handshake record holding a ClientHello header with a nonsense body.
        let body: [UInt8] = [0x01, 0x00, 0x00, 0x06, 0x03, 0x03, 0xFF, 0xFF, 0xFF, 0xFF]
        try await pair.a.write([0x16, 0x03, 0x01, 0x00, UInt8(body.count)] + body)
        #expect(await s.error?.code == .tlsHandshakeFailed)
        var received: [UInt8] = []
        while let chunk = try await pair.a.read(maxBytes: 1000) { received += chunk }
        #expect(received.first == 21, "a fatal alert record, then the end: \(received)")
    }

    @Test func randomGarbageNeverCrashes() async throws {
        var generator = SystemRandomNumberGenerator()
        let identity = try Self.identity()
        for _ in 0..<20 {
            let pair = ByteStreamPair()
            async let s = capture { () async throws(PeerSyncError) in
                try await TLSStream.handshake(over: pair.b, configuration: .server(identity: identity))
            }
            let length = Int.random(in: 1...3000, using: &generator)
            var junk = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            junk[0] = 0x16   // looks like a handshake record
            try? await pair.a.write(junk)
            await pair.a.shutdownOutput()
            #expect(await s.error != nil)
            await pair.a.close()
        }
    }

    @Test func peerClosingDuringHandshake() async throws {
        let pair = ByteStreamPair()
        async let c = capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.a, configuration: Self.clientConfig)
        }
        _ = try await pair.b.read(maxBytes: 100_000)   // the ClientHello
        await pair.b.close()
        let error = await c.error
        #expect(error?.code == .tlsHandshakeFailed || error?.code == .closed, "\(String(describing: error))")
    }

    @Test func handshakeTimesOutOnASilentPeer() async throws {
        let pair = ByteStreamPair()
        var config = Self.clientConfig
        config.handshakeTimeout = .milliseconds(200)
        let error = await capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.a, configuration: config)
        }.error
        #expect(error?.code == .timeout)
        // The transport was closed: the silent peer sees the ClientHello, then the end.
        var bytes: [UInt8] = []
        while let chunk = try await pair.b.read(maxBytes: 100_000) { bytes += chunk }
        #expect(bytes.first == 0x16)
    }

    @Test func cancellingTheHandshakeClosesTheStream() async throws {
        let pair = ByteStreamPair()
        var config = Self.clientConfig
        config.handshakeTimeout = nil
        let task = Task { await capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.a, configuration: config)
        } }
        _ = try await pair.b.read(maxBytes: 100_000)   // the ClientHello arrived; the peer stays silent
        task.cancel()
        #expect(await task.value.error?.code == .cancelled)
        #expect(try await pair.b.read(maxBytes: 10) == nil, "the transport was closed")
    }

    @Test func invalidConfigurations() async throws {
        let pair = ByteStreamPair()
        let noIdentity = TLSConfiguration(role: .server)
        await #expect(throws: PeerSyncError.self) { try await TLSStream.handshake(over: pair.b, configuration: noIdentity) }
        var inverted = Self.clientConfig
        inverted.minimumVersion = .v1_3
        inverted.maximumVersion = .v1_2
        let error = await capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.a, configuration: inverted)
        }.error
        #expect(error?.code == .invalidArgument)
        let badName = TLSConfiguration.client(serverName: "", serverTrust: .selfSignedOnly)
        #expect(await capture { () async throws(PeerSyncError) in
            try await TLSStream.handshake(over: pair.a, configuration: badName)
        }.error?.code == .invalidArgument)
    }

    @Test func cblTrustSelection() throws {
        let cert = try Self.identity().certificate
        #expect(ServerTrust(pinnedServerCertificate: cert, acceptOnlySelfSignedServerCertificate: true) == .pinned(cert))
        #expect(ServerTrust(pinnedServerCertificate: nil, acceptOnlySelfSignedServerCertificate: true) == .selfSignedOnly)
        #expect(ServerTrust(pinnedServerCertificate: nil, acceptOnlySelfSignedServerCertificate: false) == .systemRoots)
    }

    @Test func remoteAddressComesFromTheTransport() async throws {
        let (client, server) = try await Self.connected()
        #expect(client.remoteAddress == "memory:b")
        #expect(server.remoteAddress == "memory:a")
        await client.close()
        await server.close()
    }
}
