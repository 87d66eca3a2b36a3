import PeerSyncCore
import PeerSyncTransport
import Testing

@Suite struct EndpointTests {
    @Test func parsesWebSocketURLs() throws {
        let e = try Endpoint(url: "ws://127.0.0.1:4984/db")
        #expect(e.scheme == "ws" && e.host == "127.0.0.1" && e.port == 4984 && e.path == "/db" && e.query == nil)
        #expect(e.description == "ws://127.0.0.1:4984/db")
        #expect(e.authority == "127.0.0.1:4984")
    }

    @Test func parsesIPv6AndQueriesAndLowercasesScheme() throws {
        let e = try Endpoint(url: "WSS://[::1]:443/db/_blipsync?client=1")
        #expect(e.scheme == "wss" && e.host == "::1" && e.port == 443)
        #expect(e.path == "/db/_blipsync" && e.query == "client=1")
        #expect(e.authority == "[::1]:443")
        #expect(e.description == "wss://[::1]:443/db/_blipsync?client=1")
        #expect(try Endpoint(url: "ws://[fe80::1]/").port == nil)
    }

    @Test func parsesLoopbackNames() throws {
        let e = try Endpoint(url: "loopback://peerA")
        #expect(e.scheme == "loopback" && e.host == "peerA" && e.port == nil && e.path == "")
        #expect(try Endpoint(url: "loopback://peerA:0").port == 0)
        #expect(e.with(port: 7).description == "loopback://peerA:7")
        #expect(try e.with(path: "/x").description == "loopback://peerA/x")
    }

    @Test(arguments: ["", "ws:/x", "ws//x", "ws://", "ws://:80", "ws://h:99999", "ws://h:-1", "ws://h:8a",
                      "ws://h:", "ws://user:pw@h/db", "ws://h/x#frag", "ws://::1/x", "ws://[::1", "ws://[::1]x",
                      "ws://[host]/", "ws://h:80:90", "1ws://h", "w s://h", "ws://h h/", "ws://h/a b", "ws://h\n/"])
    func rejectsMalformedURLs(_ url: String) {
        #expect(throws: PeerSyncError.self) { try Endpoint(url: url) }
        do {
            _ = try Endpoint(url: url)
        } catch let error as PeerSyncError {
            #expect(error.code == .invalidArgument)
            #expect(error.context["url"] == url)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test func roundTripsThroughDescription() throws {
        for url in ["ws://a.b:1/x/y?q", "wss://[2001:db8::1]:4984/db", "loopback://n", "x+y.z-w://h"] {
            let endpoint = try Endpoint(url: url)
            #expect(try Endpoint(url: endpoint.description) == endpoint)
        }
    }

    @Test func validatesParts() {
        #expect(throws: PeerSyncError.self) { try Endpoint(scheme: "ws", host: "", port: nil) }
        #expect(throws: PeerSyncError.self) { try Endpoint(scheme: "ws", host: "h", port: 70000) }
        #expect(throws: PeerSyncError.self) { try Endpoint(scheme: "ws", host: "h", path: "db") }
        #expect(throws: PeerSyncError.self) { try Endpoint(scheme: "", host: "h") }
        #expect(throws: PeerSyncError.self) { try Endpoint(scheme: "ws", host: "h/x") }
    }
}

@Suite struct CloseAndMessageTests {
    @Test func closeCodeNumbersAndSendability() {
        #expect(CloseCode.normal.rawValue == 1000 && CloseCode.goingAway.rawValue == 1001)
        #expect(CloseCode.protocolError.rawValue == 1002 && CloseCode.unsupportedData.rawValue == 1003)
        #expect(CloseCode.abnormalClosure.rawValue == 1006 && CloseCode.invalidPayload.rawValue == 1007)
        #expect(CloseCode.policyViolation.rawValue == 1008 && CloseCode.messageTooBig.rawValue == 1009)
        #expect(CloseCode.internalError.rawValue == 1011)
        for code: CloseCode in [.normal, .goingAway, .protocolError, .invalidPayload, .messageTooBig, .internalError, 3000, 4999] {
            #expect(code.isSendable, "\(code)")
        }
        for code: CloseCode in [0, 999, 1004, .noStatusReceived, .abnormalClosure, .tlsHandshakeFailure, 2999, 5000] {
            #expect(!code.isSendable, "\(code)")
        }
        #expect(CloseCode.messageTooBig.description == "1009 (messageTooBig)")
        #expect(CloseCode(4001).description == "4001")
    }

    @Test func reasonsAreTruncatedAtCharacterBoundaries() {
        let long = String(repeating: "é", count: 200)  // 400 bytes
        let info = CloseInfo(code: .normal, reason: long)
        #expect(info.reason.utf8.count == 122)  // 61 two-byte characters; a 62nd would pass 123
        #expect(info.reason == String(repeating: "é", count: 61))
        #expect(CloseInfo(code: .normal, reason: "short").reason == "short")
        let exact = String(repeating: "a", count: 123)
        #expect(CloseInfo.truncatedReason(exact) == exact)
        #expect(CloseInfo(code: .abnormalClosure).wasClean == false)
        #expect(CloseInfo(code: .goingAway, reason: "bye").description == "1001 (goingAway): bye")
    }

    @Test func messageSizesAndAccessors() {
        #expect(TransportMessage.text("é😀").byteCount == 6)
        #expect(TransportMessage.binary([1, 2]).byteCount == 2)
        #expect(TransportMessage.text("ab").bytes == [97, 98])
        #expect(TransportMessage.text("ab").text == "ab" && TransportMessage.binary([]).text == nil)
        #expect(TransportMessage.binary([1]).isText == false)
        #expect(TransportMessage.text("secret").description == "text(6 bytes)")
        #expect(TransportKind.custom("serial").description == "serial")
    }
}
