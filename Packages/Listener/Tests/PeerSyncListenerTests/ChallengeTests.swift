import Foundation
import PeerSyncCore
import PeerSyncListener
import PeerSyncWebSocket
import Testing

/// The 401 challenge is the same on the WebSocket upgrade path and the REST path.
@Suite(.serialized) struct ChallengeTests {
    @Test func upgradeAndRESTSendTheSameBasicChallenge() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, disableTLS: true, rest: true)
            let port = try #require(listener.port)
            let expected = "Basic realm=\"\(URLEndpointListener.authenticationRealm)\", charset=\"UTF-8\""
            let upgrade = "GET /server/_blipsync HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: Upgrade\r\n"
                + "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                + "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3\r\n\r\n"
            let refused = try await httpExchange(port: port, Array(upgrade.utf8))
            #expect(refused.status == 401)
            #expect(refused.headers["WWW-Authenticate"] == expected)
            // Wrong credentials: the same challenge.
            let wrong = upgrade.replacingOccurrences(of: "\r\n\r\n", with: "\r\n\(basic("alice", "nope").0): \(basic("alice", "nope").1)\r\n\r\n")
            let refusedAgain = try await httpExchange(port: port, Array(wrong.utf8))
            #expect(refusedAgain.status == 401 && refusedAgain.headers["WWW-Authenticate"] == expected)
            let rest = try await httpRequest(port: port, "GET", "/server")
            #expect(rest.status == 401)
            #expect(rest.headers["WWW-Authenticate"] == expected)
            await listener.stop()
            try await db.close()
        }
    }
}
