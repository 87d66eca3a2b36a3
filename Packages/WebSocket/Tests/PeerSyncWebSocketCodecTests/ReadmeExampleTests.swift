import PeerSyncWebSocketCodec
import Testing

/// The codec example of Packages/WebSocket/README.md, verbatim, so it keeps compiling and working.
@Suite("README example (codec)")
struct ReadmeExampleTests {
    @Test("decode a client frame fed in two pieces; parse and validate an upgrade request")
    func codecExample() throws {
        // What a client sends (masked), decoded as the server does, fed in two pieces.
        let frame = WebSocketFrameEncoder.encode(opcode: .text, payload: Array("hello".utf8), mask: 0x3767_1A2B)
        var decoder = WebSocketFrameDecoder(role: .server, maxMessageSize: 1 << 20)
        decoder.feed(Array(frame[..<3]))
        let none = try decoder.next()                     // nil: the frame is not complete yet
        decoder.feed(Array(frame[3...]))
        let event = try decoder.next()                    // .text("hello")

        var parser = HTTPRequestParser()
        parser.feed(Array("GET /db/_blipsync HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n".utf8)
                    + Array("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".utf8))
        let request = try parser.next()!                  // method, target, headers
        let upgrade = WebSocketHandshake.validateUpgradeRequest(request)   // .success: a valid upgrade

        #expect(none == nil)
        #expect(event == .text("hello"))
        #expect(request.method == "GET" && request.path == "/db/_blipsync")
        guard case .success(let accepted) = upgrade else {
            Issue.record("the upgrade was refused: \(upgrade)")
            return
        }
        #expect(WebSocketHandshake.acceptValue(forKey: accepted.key) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }
}
