import Foundation
import Testing
@testable import PeerSyncBLIP
import PeerSyncCore

func hex(_ text: String) -> [UInt8] {
    let digits = text.filter { !$0.isWhitespace }
    var out: [UInt8] = []
    var i = digits.startIndex
    while i < digits.endIndex {
        let j = digits.index(i, offsetBy: 2)
        out.append(UInt8(digits[i..<j], radix: 16)!)
        i = j
    }
    return out
}

@Suite struct VarintTests {
    @Test func knownEncodings() throws {
        #expect(Varint.encode(0) == [0x00])
        #expect(Varint.encode(127) == [0x7F])
        #expect(Varint.encode(128) == [0x80, 0x01])
        #expect(Varint.encode(300) == [0xAC, 0x02])
        #expect(Varint.encode(16384) == [0x80, 0x80, 0x01])
        for value: UInt64 in [0, 1, 127, 128, 300, 1 << 35, UInt64.max] {
            var i = 0
            #expect(try Varint.read(Varint.encode(value)[...], at: &i) == value)
        }
    }

    @Test func rejectsOverlongAndTruncated() throws {
        var i = 0
        #expect(try Varint.read([0x80, 0x80][...], at: &i) == nil)
        i = 0
        #expect(throws: PeerSyncError.self) { try Varint.read([UInt8](repeating: 0xFF, count: 11)[...], at: &i) }
    }
}

@Suite struct FrameCodecTests {
    let getCheckpoint = hex("""
        01 00 32 50 72 6f 66 69 6c 65 00 67 65 74 43 68 65 63 6b 70 6f 69 6e 74 00
        63 6c 69 65 6e 74 00 63 70 2d 41 31 62 32 00 63 6f 6c 6c 65 63 74 69 6f 6e 00 30 00
        b9 ca d3 d4
        """)

    @Test func encodesTheWorkedGetCheckpointExample() throws {
        let encoder = try BLIPFrameEncoder(compressionLevel: 6)
        let message = BLIPMessage.request("getCheckpoint", properties: [("client", "cp-A1b2"), ("collection", "0")])
        var offset = 0
        let (frame, counted) = try encoder.nextFrame(type: .request, number: 1, flags: message.flags,
                                                     content: message.encodedContent(), offset: &offset, maxFrameSize: 16384)
        #expect(frame == getCheckpoint)
        #expect(counted == frame.count - 2)
    }

    @Test func decodesTheWorkedExamplesOnTheOtherSide() throws {
        // Passive side decodes the client's request #1, then the client's compressed request #2.
        let passive = try BLIPFrameDecoder(tuning: BLIPTuning())
        let events = try passive.decode(getCheckpoint)
        #expect(events == [
            .started(type: .request, number: 1, flags: [], properties: [("Profile", "getCheckpoint"), ("client", "cp-A1b2"), ("collection", "0")]),
            .completed(type: .request, number: 1),
        ])
        let compressed = hex("""
            02 18 92 0d 28 ca 4f cb cc 49 65 48 ce 48 cc 4b 4f 2d 66 48 ce cf c9 49 4d 2e c9 cc cf 63 30 60
            88 8e 36 d4 51 4a c9 4f 36 54 d2 51 32 d4 4d 4c 4a 56 8a d5 89 36 02 0b 19 81 85 52 52 d3 94 62
            63 01 00 59 70 d4 19
            """)
        let events2 = try passive.decode(compressed)
        #expect(events2 == [
            .started(type: .request, number: 2, flags: [.urgent, .compressed], properties: [("Profile", "changes"), ("collection", "0")]),
            .body(type: .request, number: 2, bytes: Array(#"[[1,"doc1","1-abc"],[2,"doc2","1-def"]]"#.utf8)),
            .completed(type: .request, number: 2),
        ])

        // Active side decodes the peer's reply #1.
        let active = try BLIPFrameDecoder(tuning: BLIPTuning())
        active.expectResponse(to: 1)
        let reply = hex("""
            01 01 09 72 65 76 00 33 2d 63 63 00 7b 22 6c 6f 63 61 6c 22 3a 34 32 2c 22 72 65 6d 6f 74 65 22
            3a 31 37 7d 2c ec d5 2f
            """)
        let events3 = try active.decode(reply)
        #expect(events3 == [
            .started(type: .response, number: 1, flags: [], properties: [("rev", "3-cc")]),
            .body(type: .response, number: 1, bytes: Array(#"{"local":42,"remote":17}"#.utf8)),
            .completed(type: .response, number: 1),
        ])
    }

    @Test func ackFrameMatchesTheWorkedExample() {
        #expect(BLIPFrameEncoder.ackFrame(type: .ackRequest, number: 5, received: 50_010) == hex("05 34 da 86 03"))
    }

    /// Issue 9 §4: zlib state (~400 KiB per connection for deflate) is created by the first
    /// compressed frame, not by the connection: 3,000 silent connections held ~190 KB each.
    @Test func zlibStateIsCreatedByTheFirstCompressedFrameOnly() throws {
        let encoder = try BLIPFrameEncoder(compressionLevel: 6)
        let decoder = try BLIPFrameDecoder(tuning: BLIPTuning())
        #expect(!encoder.hasDeflater && !decoder.hasInflater)
        var offset = 0
        let plain = BLIPMessage.request("getCheckpoint", properties: [("client", "x")])
        let (frame, _) = try encoder.nextFrame(type: .request, number: 1, flags: plain.flags, content: plain.encodedContent(),
                                               offset: &offset, maxFrameSize: 16384)
        _ = try decoder.decode(frame)
        #expect(!encoder.hasDeflater && !decoder.hasInflater)
        offset = 0
        let body = Array(repeating: Array("{\"n\":1}".utf8), count: 100).flatMap { $0 }
        let compressed = BLIPMessage.request("rev", properties: [("id", "doc")], body: body, flags: [.compressed])
        let (second, _) = try encoder.nextFrame(type: .request, number: 2, flags: compressed.flags,
                                                content: compressed.encodedContent(), offset: &offset, maxFrameSize: 16384)
        var received: [UInt8] = []
        for case .body(_, _, let bytes) in try decoder.decode(second) { received += bytes }
        #expect(encoder.hasDeflater && decoder.hasInflater)
        #expect(received == body)
        #expect(encoder.crc == decoder.crc)
    }

    @Test func roundTripsLargeCompressedMessagesAcrossFramesWithAcks() throws {
        let encoder = try BLIPFrameEncoder(compressionLevel: 6)
        let decoder = try BLIPFrameDecoder(tuning: BLIPTuning())
        var body: [UInt8] = []
        var rng = SystemRandomNumberGenerator()
        for i in 0..<300_000 { body.append(i % 7 == 0 ? UInt8.random(in: 0...255, using: &rng) : UInt8(i % 31)) }
        let message = BLIPMessage.request("rev", properties: [("id", "doc")], body: body, flags: [.compressed])
        let content = message.encodedContent()
        var offset = 0
        var received: [UInt8] = []
        var acks = 0
        var completed = false
        while offset < content.count {
            let (frame, _) = try encoder.nextFrame(type: .request, number: 1, flags: message.flags, content: content,
                                                   offset: &offset, maxFrameSize: 16384)
            for event in try decoder.decode(frame) {
                switch event {
                case .body(_, _, let bytes): received.append(contentsOf: bytes)
                case .sendAck: acks += 1
                case .completed: completed = true
                case .started(_, _, _, let props): #expect(props["id"] == "doc")
                case .ack: Issue.record("unexpected ack")
                case .streamProgress: Issue.record("unexpected stream progress for a request")
                }
            }
        }
        #expect(completed)
        #expect(received == body)
        #expect(acks >= 1)
        #expect(encoder.crc == decoder.crc)
    }

    @Test func rejectsProtocolViolations() throws {
        // Out-of-order request number.
        let d1 = try BLIPFrameDecoder(tuning: BLIPTuning())
        var frame = getCheckpoint
        frame[0] = 2
        #expect(throws: PeerSyncError.self) { try d1.decode(frame) }
        // Corrupted checksum.
        let d2 = try BLIPFrameDecoder(tuning: BLIPTuning())
        frame = getCheckpoint
        frame[frame.count - 1] ^= 0xFF
        #expect(throws: PeerSyncError.self) { try d2.decode(frame) }
        // Response nobody asked for.
        let d3 = try BLIPFrameDecoder(tuning: BLIPTuning())
        #expect(throws: PeerSyncError.self) { try d3.decode([0x07, 0x01, 0x00, 0, 0, 0, 0]) }
        // Truncated frame, garbage compressed data.
        let d4 = try BLIPFrameDecoder(tuning: BLIPTuning())
        #expect(throws: PeerSyncError.self) { try d4.decode([0x01]) }
        #expect(throws: PeerSyncError.self) { try d4.decode([0x01, 0x08, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]) }
        // Properties without a final NUL.
        let d5 = try BLIPFrameDecoder(tuning: BLIPTuning())
        var bad: [UInt8] = [0x01, 0x00, 0x03, 0x61, 0x00, 0x62]
        let crc = crc32Update(0, Array(bad[2...]))
        bad += [UInt8(crc >> 24), UInt8(truncatingIfNeeded: crc >> 16), UInt8(truncatingIfNeeded: crc >> 8), UInt8(truncatingIfNeeded: crc)]
        #expect(throws: PeerSyncError.self) { try d5.decode(bad) }
    }

    @Test func inflatesFramesFromAnIndependentDeflater() throws {
        // Python's zlib (raw deflate, one stream across messages) produces the frames; we decode them.
        let python = ProcessInfo.processInfo.environment["PEERSYNC_PYTHON"] ?? "/usr/bin/python3"
        let script = """
        import zlib, sys
        c = zlib.compressobj(6, zlib.DEFLATED, -15, 9)
        crc = 0
        out = []
        for n, body in enumerate([b'{"hello":"world"}' * 50, b'[1,2,3]' * 400, b'x' * 10000], start=1):
            props = b'Profile\\x00rev\\x00id\\x00doc%d\\x00' % n
            content = bytes([len(props)]) + props + body
            data = c.compress(content) + c.flush(zlib.Z_SYNC_FLUSH)
            assert data.endswith(b'\\x00\\x00\\xff\\xff')
            crc = zlib.crc32(content, crc)
            frame = bytes([n, 0x08]) + data[:-4] + crc.to_bytes(4, 'big')
            out.append(frame.hex())
        print("\\n".join(out))
        """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", script]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let frames = String(decoding: output, as: UTF8.self).split(separator: "\n").map { hex(String($0)) }
        #expect(frames.count == 3)
        let decoder = try BLIPFrameDecoder(tuning: BLIPTuning())
        var bodies: [[UInt8]] = []
        for frame in frames {
            for case .body(_, _, let bytes) in try decoder.decode(frame) { bodies.append(bytes) }
        }
        #expect(bodies == [Array(String(repeating: #"{"hello":"world"}"#, count: 50).utf8),
                           Array(String(repeating: "[1,2,3]", count: 400).utf8),
                           [UInt8](repeating: UInt8(ascii: "x"), count: 10000)])
    }
}
