import PeerSyncCore
@testable import PeerSyncWebSocketCodec
import Testing

/// Builds a frame by hand (independent of the encoder), masked with `mask` if given.
func rawFrame(fin: Bool = true, rsv: UInt8 = 0, opcode: UInt8, payload: [UInt8], mask: [UInt8]? = nil,
              forceLength: UInt64? = nil) -> [UInt8] {
    var out: [UInt8] = [(fin ? 0x80 : 0) | (rsv << 4) | opcode]
    let maskBit: UInt8 = mask == nil ? 0 : 0x80
    let length = forceLength ?? UInt64(payload.count)
    if length < 126 {
        out.append(maskBit | UInt8(length))
    } else if length <= 0xFFFF {
        out.append(maskBit | 126)
        out += [UInt8(length >> 8), UInt8(length & 0xFF)]
    } else {
        out.append(maskBit | 127)
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((length >> UInt64(shift)) & 0xFF)) }
    }
    if let mask {
        out += mask
        out += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    } else {
        out += payload
    }
    return out
}

func decodeAll(_ bytes: [UInt8], role: WebSocketRole, max: Int = 1 << 20, chunk: Int = .max) throws -> [WebSocketFrameDecoder.Event] {
    var decoder = WebSocketFrameDecoder(role: role, maxMessageSize: max)
    var events: [WebSocketFrameDecoder.Event] = []
    var i = 0
    while i < bytes.count {
        let end = min(bytes.count, i + chunk)
        decoder.feed(Array(bytes[i..<end]))
        while let event = try decoder.next() { events.append(event) }
        i = end
    }
    return events
}

func decodeError(_ bytes: [UInt8], role: WebSocketRole, max: Int = 1 << 20) -> PeerSyncError? {
    do {
        _ = try decodeAll(bytes, role: role, max: max)
        return nil
    } catch {
        return error as? PeerSyncError
    }
}

@Suite("Frame codec")
struct FrameCodecTests {
    let mask: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]

    @Test("RFC 6455 §5.7 examples decode")
    func rfcExamples() throws {
        // Unmasked "Hello" from a server, masked "Hello" from a client.
        #expect(try decodeAll([0x81, 0x05, 0x48, 0x65, 0x6C, 0x6C, 0x6F], role: .client) == [.text("Hello")])
        #expect(try decodeAll([0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58], role: .server) == [.text("Hello")])
        // Fragmented unmasked text: "Hel" + "lo".
        #expect(try decodeAll([0x01, 0x03, 0x48, 0x65, 0x6C, 0x80, 0x02, 0x6C, 0x6F], role: .client) == [.text("Hello")])
        // Unmasked ping "Hello".
        #expect(try decodeAll([0x89, 0x05, 0x48, 0x65, 0x6C, 0x6C, 0x6F], role: .client) == [.ping(Array("Hello".utf8))])
        // 256 bytes binary with a 16-bit length, 64 KiB with a 64-bit length.
        let small = [UInt8](repeating: 7, count: 256)
        #expect(try decodeAll([0x82, 0x7E, 0x01, 0x00] + small, role: .client) == [.binary(small)])
        let big = [UInt8](repeating: 9, count: 65536)
        #expect(try decodeAll([0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0] + big, role: .client) == [.binary(big)])
    }

    @Test("encoder output matches the RFC examples and round-trips at every size class")
    func encoderRoundTrip() throws {
        #expect(WebSocketFrameEncoder.encode(opcode: .text, payload: Array("Hello".utf8), mask: nil)
                == [0x81, 0x05, 0x48, 0x65, 0x6C, 0x6C, 0x6F])
        #expect(WebSocketFrameEncoder.encode(opcode: .text, payload: Array("Hello".utf8), mask: 0x37FA_213D)
                == [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58])
        for size in [0, 1, 7, 8, 9, 125, 126, 127, 65535, 65536, 100_003] {
            let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }
            let masked = WebSocketFrameEncoder.encode(opcode: .binary, payload: payload, mask: 0xDEAD_BEEF)
            #expect(masked.count == WebSocketFrameEncoder.headerSize(payloadLength: size, masked: true) + size)
            #expect(try decodeAll(masked, role: .server, chunk: 1000) == [.binary(payload)])
            let plain = WebSocketFrameEncoder.encode(opcode: .binary, payload: payload, mask: nil)
            #expect(try decodeAll(plain, role: .client, chunk: 3) == [.binary(payload)])
            // Independent encoder agrees.
            #expect(masked == rawFrame(opcode: 2, payload: payload, mask: [0xDE, 0xAD, 0xBE, 0xEF]))
        }
    }

    @Test("byte-at-a-time feeding yields the same events, fragments and interleaved control frames")
    func incremental() throws {
        var bytes: [UInt8] = []
        bytes += rawFrame(fin: false, opcode: 1, payload: Array("héllo ".utf8), mask: mask)
        bytes += rawFrame(opcode: 9, payload: [1, 2], mask: mask)
        bytes += rawFrame(fin: false, opcode: 0, payload: Array("wör".utf8), mask: mask)
        bytes += rawFrame(opcode: 0, payload: Array("ld".utf8), mask: mask)
        bytes += rawFrame(opcode: 2, payload: [], mask: mask)
        bytes += rawFrame(opcode: 8, payload: [0x03, 0xE8] + Array("bye".utf8), mask: mask)
        let expected: [WebSocketFrameDecoder.Event] = [.ping([1, 2]), .text("héllo wörld"), .binary([]),
                                                       .close(code: 1000, reason: "bye")]
        #expect(try decodeAll(bytes, role: .server) == expected)
        #expect(try decodeAll(bytes, role: .server, chunk: 1) == expected)
        #expect(try decodeAll(bytes, role: .server, chunk: 5) == expected)
    }

    @Test("a UTF-8 character split across fragments is valid")
    func splitCharacter() throws {
        let euro = Array("€".utf8)  // 3 bytes
        let bytes = rawFrame(fin: false, opcode: 1, payload: [euro[0]], mask: mask)
            + rawFrame(opcode: 0, payload: [euro[1], euro[2]], mask: mask)
        #expect(try decodeAll(bytes, role: .server) == [.text("€")])
    }

    @Test("masking rules by role")
    func maskingRules() {
        let unmasked = rawFrame(opcode: 2, payload: [1, 2, 3])
        let masked = rawFrame(opcode: 2, payload: [1, 2, 3], mask: mask)
        #expect(decodeError(unmasked, role: .server)?.code == .protocolError)
        #expect(decodeError(unmasked, role: .server)?.webSocketCloseCode == 1002)
        #expect(decodeError(masked, role: .client)?.code == .protocolError)
        #expect(decodeError(masked, role: .server) == nil)
        #expect(decodeError(unmasked, role: .client) == nil)
    }

    @Test("protocol violations give the right close code", arguments: [
        // reserved bits
        (rawFrame(rsv: 4, opcode: 2, payload: [1], mask: [1, 2, 3, 4]), UInt16(1002)),
        (rawFrame(rsv: 1, opcode: 1, payload: [], mask: [1, 2, 3, 4]), UInt16(1002)),
        // reserved opcodes
        (rawFrame(opcode: 3, payload: [], mask: [1, 2, 3, 4]), UInt16(1002)),
        (rawFrame(opcode: 0xB, payload: [], mask: [1, 2, 3, 4]), UInt16(1002)),
        // fragmented control frame, oversize control frame
        (rawFrame(fin: false, opcode: 9, payload: [], mask: [1, 2, 3, 4]), UInt16(1002)),
        (rawFrame(opcode: 10, payload: [UInt8](repeating: 0, count: 126), mask: [1, 2, 3, 4]), UInt16(1002)),
        // continuation without a message; new message inside a fragmented one
        (rawFrame(opcode: 0, payload: [1], mask: [1, 2, 3, 4]), UInt16(1002)),
        (rawFrame(fin: false, opcode: 1, payload: [0x41], mask: [1, 2, 3, 4]) + rawFrame(opcode: 2, payload: [], mask: [1, 2, 3, 4]), UInt16(1002)),
        // close frames: 1-byte payload, invalid codes, invalid UTF-8 reason
        (rawFrame(opcode: 8, payload: [3], mask: [1, 2, 3, 4]), UInt16(1002)),
        (rawFrame(opcode: 8, payload: [0x03, 0xED], mask: [1, 2, 3, 4]), UInt16(1002)),  // 1005
        (rawFrame(opcode: 8, payload: [0x03, 0xEE], mask: [1, 2, 3, 4]), UInt16(1002)),  // 1006
        (rawFrame(opcode: 8, payload: [0x00, 0x63], mask: [1, 2, 3, 4]), UInt16(1002)),  // 99
        (rawFrame(opcode: 8, payload: [0x13, 0x88], mask: [1, 2, 3, 4]), UInt16(1002)),  // 5000
        (rawFrame(opcode: 8, payload: [0x03, 0xE8, 0xFF], mask: [1, 2, 3, 4]), UInt16(1007)),
        // invalid UTF-8 text (overlong, surrogate, truncated)
        (rawFrame(opcode: 1, payload: [0xC0, 0xAF], mask: [1, 2, 3, 4]), UInt16(1007)),
        (rawFrame(opcode: 1, payload: [0xED, 0xA0, 0x80], mask: [1, 2, 3, 4]), UInt16(1007)),
        (rawFrame(opcode: 1, payload: [0x41, 0xE2, 0x82], mask: [1, 2, 3, 4]), UInt16(1007)),
        // 64-bit length with the top bit set
        ([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4], UInt16(1002)),
    ])
    func violations(bytes: [UInt8], closeCode: UInt16) {
        let error = decodeError(bytes, role: .server)
        #expect(error != nil)
        #expect(error?.webSocketCloseCode == closeCode)
    }

    @Test("messages over the limit fail at the header with 1009, also when fragmented")
    func sizeLimit() {
        let limit = 1000
        // A frame announcing more than the limit fails before its payload arrives.
        var decoder = WebSocketFrameDecoder(role: .server, maxMessageSize: limit)
        decoder.feed([0x82, 0xFF, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 1, 2, 3, 4])
        #expect(throws: PeerSyncError.self) { _ = try decoder.next() }
        #expect(decoder.isFinished)
        let fragments = rawFrame(fin: false, opcode: 2, payload: [UInt8](repeating: 1, count: 600), mask: mask)
            + rawFrame(opcode: 0, payload: [UInt8](repeating: 1, count: 600), mask: mask)
        #expect(decodeError(fragments, role: .server, max: limit)?.webSocketCloseCode == 1009)
        #expect(decodeError(rawFrame(opcode: 2, payload: [UInt8](repeating: 1, count: 1000), mask: mask), role: .server, max: limit) == nil)
    }

    @Test("close payloads: empty, code only, reason cut at 123 bytes on a character boundary")
    func closePayloads() throws {
        #expect(try decodeAll(rawFrame(opcode: 8, payload: [], mask: mask), role: .server) == [.close(code: nil, reason: "")])
        #expect(WebSocketFrameEncoder.closePayload(code: nil, reason: "x") == [])
        let long = String(repeating: "é", count: 100)  // 200 bytes
        let payload = WebSocketFrameEncoder.closePayload(code: 4000, reason: long)
        #expect(payload.count <= 125)
        #expect(payload.count == 2 + 122)  // 61 whole "é"
        let events = try decodeAll(rawFrame(opcode: 8, payload: payload, mask: mask), role: .server)
        #expect(events == [.close(code: 4000, reason: String(repeating: "é", count: 61))])
    }

    @Test("after a close frame the decoder yields nothing more")
    func afterClose() throws {
        let bytes = rawFrame(opcode: 8, payload: [0x03, 0xE8], mask: mask) + rawFrame(opcode: 2, payload: [1], mask: mask)
        #expect(try decodeAll(bytes, role: .server) == [.close(code: 1000, reason: "")])
    }

    @Test("mask application at every offset matches byte-wise XOR")
    func maskOffsets() {
        let key: (UInt8, UInt8, UInt8, UInt8) = (0x11, 0x22, 0x33, 0x44)
        let k = [UInt8(0x11), 0x22, 0x33, 0x44]
        for offset in 0..<4 {
            for count in [0, 1, 5, 8, 13, 64, 77] {
                var data = (0..<count).map { UInt8(truncatingIfNeeded: $0 * 7) }
                let expected = data.enumerated().map { $0.element ^ k[($0.offset + offset) % 4] }
                data.withUnsafeMutableBytes { applyMask($0, key: key, offset: offset) }
                #expect(data == expected)
            }
        }
    }
}

@Suite("HTTP codec")
struct HTTPCodecTests {
    func parseRequest(_ text: String, maxHeader: Int = 16 * 1024, maxBody: Int = 1 << 20, chunk: Int = .max) throws -> [HTTPRequest] {
        var parser = HTTPRequestParser(maxHeaderBytes: maxHeader, maxBodyBytes: maxBody)
        let bytes = Array(text.utf8)
        var out: [HTTPRequest] = []
        var i = 0
        while i < bytes.count {
            let end = min(bytes.count, i + chunk)
            parser.feed(Array(bytes[i..<end]))
            while let r = try parser.next() { out.append(r) }
            i = end
        }
        return out
    }

    func requestError(_ text: String, maxHeader: Int = 16 * 1024, maxBody: Int = 1 << 20) -> PeerSyncError? {
        do { _ = try parseRequest(text, maxHeader: maxHeader, maxBody: maxBody); return nil } catch { return error as? PeerSyncError }
    }

    @Test("a WebSocket upgrade request parses, byte by byte too")
    func upgradeRequest() throws {
        let text = "GET /db/_blipsync?x=1 HTTP/1.1\r\nHost: 127.0.0.1:4984\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: BLIP_3+CBMobile_3, BLIP_3+CBMobile_2\r\n\r\n"
        for chunk in [Int.max, 1, 7] {
            let requests = try parseRequest(text, chunk: chunk)
            #expect(requests.count == 1)
            let r = try #require(requests.first)
            #expect(r.method == "GET")
            #expect(r.path == "/db/_blipsync")
            #expect(r.query == "x=1")
            #expect(r.headers["host"] == "127.0.0.1:4984")
            #expect(r.headers.containsToken("upgrade", for: "CONNECTION"))
            #expect(r.headers.tokens(for: "Sec-WebSocket-Protocol") == ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"])
            let valid = try WebSocketHandshake.validateUpgradeRequest(r).get()
            #expect(valid.key == "dGhlIHNhbXBsZSBub25jZQ==")
        }
        // RFC 6455 §1.3 example.
        #expect(WebSocketHandshake.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test("pipelined requests with Content-Length and chunked bodies")
    func bodies() throws {
        let text = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            + "PUT /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n"
            + "GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
        for chunk in [Int.max, 1, 4] {
            let requests = try parseRequest(text, chunk: chunk)
            #expect(requests.map(\.target) == ["/a", "/b", "/c"])
            #expect(requests.map { String(decoding: $0.body, as: UTF8.self) } == ["hello", "hello world", ""])
        }
    }

    @Test("malformed requests give typed errors with the right status", arguments: [
        ("GARBAGE\r\n\r\n", 400),
        ("GET /\r\n\r\n", 400),
        ("GET  / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ("GET / HTTQ/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nX: a\u{0}b\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        // Only `chunked` alone is decoded: anything else would leave the body encoded (501).
        ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 501),
        // Two Authorization headers: which one counts would be arbitrary.
        ("GET / HTTP/1.1\r\nAuthorization: Basic YTpi\r\nAuthorization: Basic YzpkCg==\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nauthorization: Basic YTpi\r\nAUTHORIZATION: Basic YTpi\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400),
        ("POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
    ])
    func malformed(text: String, status: Int) {
        let error = requestError(text, maxBody: 1000)
        #expect(error != nil)
        #expect(error?.httpStatus == status)
    }

    @Test("header block over the limit fails with 431, whether or not it ever ends")
    func headerLimit() {
        let big = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 2000) + "\r\n\r\n"
        #expect(requestError(big, maxHeader: 1024)?.httpStatus == 431)
        let endless = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 2000)
        #expect(requestError(endless, maxHeader: 1024)?.httpStatus == 431)
        #expect(requestError(big, maxHeader: 4096) == nil)
    }

    @Test("an over-long chunk size is a 400, not an overflow (fuzzer regression)")
    func longChunkSize() {
        let text = "PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\neeeeeeedeeeeeeeeeeeeeeeee: 1\r\n\r\n"
        #expect(requestError(text)?.httpStatus == 400)
        let sixteen = "PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"
        #expect(requestError(sixteen)?.httpStatus == 400)
        let fifteen = "PUT /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n"
        #expect(requestError(fifteen)?.httpStatus == 413)
    }

    @Test("chunked body over the limit fails with 413")
    func chunkedLimit() {
        let text = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + String(repeating: "a", count: 1024) + "\r\n0\r\n\r\n"
        #expect(requestError(text, maxBody: 1000)?.httpStatus == 413)
    }

    @Test("responses: 101 leaves the frames after it; bodies by length, chunked and until EOF")
    func responses() throws {
        var parser = HTTPResponseParser()
        parser.feed(Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".utf8) + [0x81, 0x00])
        let r = try #require(try parser.next())
        #expect(r.status == 101)
        #expect(parser.takeRemainder() == [0x81, 0x00])

        var p2 = HTTPResponseParser()
        p2.feed(Array("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 3\r\n\r\nabc".utf8))
        let r2 = try #require(try p2.next())
        #expect(r2.status == 401 && r2.body == Array("abc".utf8))

        var p3 = HTTPResponseParser()
        p3.feed(Array("HTTP/1.0 200 OK\r\n\r\nuntil eof".utf8))
        #expect(try p3.next() == nil)
        let r3 = try #require(try p3.finish())
        #expect(r3.body == Array("until eof".utf8))

        var p4 = HTTPResponseParser()
        p4.feed(Array("HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".utf8))
        let r4 = try #require(try p4.next())
        #expect(r4.reason == "" && r4.body == Array("abc".utf8))

        var p5 = HTTPResponseParser()
        p5.feed(Array("HTTP/1.1 20x OK\r\n\r\n".utf8))
        #expect(throws: PeerSyncError.self) { _ = try p5.next() }

        var p6 = HTTPResponseParser()
        p6.feed(Array("HTTP/1.1 200 OK\r\nContent-Le".utf8))
        #expect(throws: PeerSyncError.self) { _ = try p6.finish() }
    }

    @Test("serialization round-trips through the parsers")
    func serialization() throws {
        let request = HTTPRequest(method: "PUT", target: "/db/doc", headers: ["Host": "h", "X-A": "1"], body: Array("{}".utf8))
        var parser = HTTPRequestParser()
        parser.feed(request.serialized())
        let parsed = try #require(try parser.next())
        #expect(parsed.method == "PUT" && parsed.target == "/db/doc" && parsed.body == Array("{}".utf8))
        #expect(parsed.headers["content-length"] == "2")

        let response = HTTPResponse.text(404, "nope")
        var rp = HTTPResponseParser()
        rp.feed(response.serialized())
        let parsedResponse = try #require(try rp.next())
        #expect(parsedResponse.status == 404 && parsedResponse.reason == "Not Found" && parsedResponse.body == Array("nope".utf8))
    }

    @Test("header validation rejects CR/LF injection and bad names")
    func headerValidation() {
        #expect(throws: PeerSyncError.self) { try HTTPHeaders([("X-A", "a\r\nInjected: 1")]).validate() }
        #expect(throws: PeerSyncError.self) { try HTTPHeaders([("Bad Name", "a")]).validate() }
        #expect(throws: Never.self) { try HTTPHeaders([("X-Ok", "fine\tvalue")]).validate() }
    }
}

@Suite("Handshake rules")
struct HandshakeRuleTests {
    func request(_ headers: [(String, String)], method: String = "GET", version: HTTPVersion = .http1_1) -> HTTPRequest {
        HTTPRequest(method: method, target: "/", version: version, headers: HTTPHeaders(headers))
    }
    let good: [(String, String)] = [("Host", "x"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13")]

    func status(_ r: HTTPRequest) -> Int? {
        if case .failure(let rejection) = WebSocketHandshake.validateUpgradeRequest(r) { return rejection.status }
        return nil
    }

    @Test("upgrade request validation")
    func validation() {
        #expect(status(request(good)) == nil)
        #expect(status(request(good, method: "POST")) == 405)
        #expect(status(request(good, version: .http1_0)) == 400)
        #expect(status(request(good.filter { $0.0 != "Host" })) == 400)
        #expect(status(request(good.filter { $0.0 != "Connection" })) == 400)
        #expect(status(request(good.filter { $0.0 != "Sec-WebSocket-Key" })) == 400)
        #expect(status(request(good.map { $0.0 == "Sec-WebSocket-Key" ? ($0.0, "c2hvcnQ=") : $0 })) == 400)
        #expect(status(request(good.map { $0.0 == "Sec-WebSocket-Version" ? ($0.0, "8") : $0 })) == 426)
        #expect(status(request(good.filter { $0.0 != "Sec-WebSocket-Version" })) == 426)
    }

    @Test("subprotocol choice follows the client's order")
    func subprotocols() {
        #expect(WebSocketHandshake.chooseSubprotocol(offered: ["b", "a"], supported: ["a", "b"]) == "b")
        #expect(WebSocketHandshake.chooseSubprotocol(offered: ["c"], supported: ["a", "b"]) == nil)
    }

    @Test("client-side validation of the 101 answer")
    func serverResponse() throws {
        let key = "dGhlIHNhbXBsZSBub25jZQ=="
        let ok = WebSocketHandshake.switchingProtocolsResponse(key: key, subprotocol: "p1")
        #expect(try WebSocketHandshake.validateServerResponse(ok, key: key, offeredSubprotocols: ["p0", "p1"]) == "p1")
        #expect(throws: PeerSyncError.self) {
            try WebSocketHandshake.validateServerResponse(ok, key: key, offeredSubprotocols: ["p0"])
        }
        let none = WebSocketHandshake.switchingProtocolsResponse(key: key, subprotocol: nil)
        do {
            _ = try WebSocketHandshake.validateServerResponse(none, key: key, offeredSubprotocols: ["p0"])
            Issue.record("accepted a handshake without the required subprotocol")
        } catch {
            #expect(error.code == .webSocketSubprotocolRejected)
        }
        do {
            _ = try WebSocketHandshake.validateServerResponse(none, key: "AAAAAAAAAAAAAAAAAAAAAA==", offeredSubprotocols: [])
            Issue.record("accepted a wrong Sec-WebSocket-Accept")
        } catch {
            #expect(error.code == .webSocketHandshakeFailed)
        }
        do {
            _ = try WebSocketHandshake.validateServerResponse(HTTPResponse(status: 403), key: key, offeredSubprotocols: [])
            Issue.record("accepted a 403")
        } catch {
            #expect(error.code == .webSocketHandshakeFailed && error.context["status"] == "403")
        }
    }

    @Test("Basic authorization round-trip and Base64")
    func basic() throws {
        let value = BasicAuthorization.headerValue(username: "Aladdin", password: "open sesame")
        #expect(value == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        let parsed = try #require(BasicAuthorization.parse(value))
        #expect(parsed.username == "Aladdin" && parsed.password == "open sesame")
        #expect(BasicAuthorization.parse("Bearer x") == nil)
        #expect(BasicAuthorization.parse("Basic !!!!") == nil)
        for n in 0..<10 {
            let bytes = (0..<n).map { UInt8($0 * 37 & 0xFF) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.decode("QQ=") == nil)
        #expect(Base64.decode("QR==") == nil)  // non-canonical
    }
}
