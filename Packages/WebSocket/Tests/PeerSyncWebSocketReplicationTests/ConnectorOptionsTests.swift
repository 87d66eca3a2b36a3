import PeerSyncAuth
import PeerSyncCore
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket
import PeerSyncWebSocketReplication
import Testing

/// The WebSocket connector's settings live on `ReplicatorConfiguration` (in its connector
/// options) and select the WebSocket client options; no network here — the end-to-end cases
/// (pinned, self-signed only, system roots, interfaces, 401) run against a listener in
/// PeerSyncListenerTests.
@Suite struct ConnectorOptionsTests {
    static func configuration(_ url: String) throws -> ReplicatorConfiguration {
        ReplicatorConfiguration(target: try Endpoint(url: url))
    }

    @Test func settingsDefaultLikeCouchbaseLite() throws {
        let config = try Self.configuration("wss://127.0.0.1:4984/db")
        #expect(config.pinnedServerCertificate == nil)
        #expect(config.acceptOnlySelfSignedServerCertificate == false)
        #expect(config.headers == nil)
        #expect(config.networkInterface == nil)
        let options = try WebSocketReplicatorConnector().options(for: config)
        #expect(options.tls?.serverTrust == .systemRoots)
        #expect(options.tls?.serverName == "127.0.0.1")
        #expect(options.interface == nil)
        #expect(options.subprotocols == ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"])
    }

    /// Couchbase Lite's order: the pinned certificate wins, then self-signed only, then the
    /// connector's CA roots, then the system roots.
    @Test func serverTrustFollowsCouchbaseLitesOrder() throws {
        let pinned = try TLSIdentity.createIdentity(for: [.serverAuth], attributes: [certAttrCommonName: "pinned"]).certificate
        let root = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "root"]).certificate
        var config = try Self.configuration("wss://peer.example:4984/db")
        let withRoots = WebSocketReplicatorConnector(trustedRootCertificates: [root])

        #expect(try withRoots.options(for: config).tls?.serverTrust == .roots([root]))
        config.acceptOnlySelfSignedServerCertificate = true
        #expect(try withRoots.options(for: config).tls?.serverTrust == .selfSignedOnly)
        config.pinnedServerCertificate = pinned
        #expect(config.pinnedServerCertificate == pinned)
        #expect(try withRoots.options(for: config).tls?.serverTrust == .pinned(pinned))
        config.pinnedServerCertificate = nil
        config.acceptOnlySelfSignedServerCertificate = false
        #expect(try WebSocketReplicatorConnector().options(for: config).tls?.serverTrust == .systemRoots)
    }

    @Test func plainWebSocketHasNoTLSAndOtherSchemesAreRefused() throws {
        var config = try Self.configuration("ws://127.0.0.1:4984/db")
        config.acceptOnlySelfSignedServerCertificate = true   // meaningless without TLS: ignored
        #expect(try WebSocketReplicatorConnector().options(for: config).tls == nil)
        let error = #expect(throws: PeerSyncError.self) {
            try WebSocketReplicatorConnector().options(for: try Self.configuration("http://127.0.0.1:4984/db"))
        }
        #expect(error?.code == .invalidArgument)
    }

    @Test func headersInterfaceAndBasicCredentialsReachTheUpgradeRequest() throws {
        var config = try Self.configuration("ws://127.0.0.1:4984/db")
        config.headers = ["X-B": "2", "X-A": "1", "Authorization": "Bearer replaced"]
        config.networkInterface = "lo"
        config.authenticator = BasicAuthenticator(username: "alice", password: "s3cret")
        let options = try WebSocketReplicatorConnector().options(for: config)
        #expect(options.headers.map(\.name) == ["X-A", "X-B", "Authorization"])
        #expect(options.headers["Authorization"] == "Basic YWxpY2U6czNjcmV0")
        #expect(options.interface == "lo")
    }

    /// The heartbeat is the WebSocket ping interval, and a peer that does not answer a ping is
    /// dropped no later than the replicator's reply timeout (at most 30 s).
    @Test func heartbeatAndDeadPeerTimeout() throws {
        var config = try Self.configuration("ws://127.0.0.1:1/db")
        config.heartbeat = .seconds(7)
        config.replyTimeout = .seconds(5)
        var options = try WebSocketReplicatorConnector().options(for: config)
        #expect(options.connection.heartbeatInterval == .seconds(7))
        #expect(options.connection.deadPeerTimeout == .seconds(5))
        config.replyTimeout = .seconds(120)
        options = try WebSocketReplicatorConnector().options(for: config)
        #expect(options.connection.deadPeerTimeout == .seconds(30))
    }

    @Test func syncEndpointAppendsBlipsyncOnce() throws {
        #expect(try WebSocketReplicatorConnector.syncEndpoint(for: Endpoint(url: "wss://h:1/db/")).description == "wss://h:1/db/_blipsync")
        #expect(try WebSocketReplicatorConnector.syncEndpoint(for: Endpoint(url: "ws://h:1/db/_blipsync")).description == "ws://h:1/db/_blipsync")
        #expect(throws: PeerSyncError.self) { try WebSocketReplicatorConnector.syncEndpoint(for: Endpoint(url: "ws://h:1/")) }
    }
}
