// libFuzzer target: the WebSocket frame decoder (PeerSyncWebSocketCodec), both roles.
//
// Input: byte 0 picks the role and the size limit, byte 1 seeds how the rest is split into
// feeds. Properties checked (a violation traps, which libFuzzer reports as a crash):
// - decoding never traps, whatever the bytes;
// - the events and the error do not depend on how the bytes are split into feeds;
// - every event respects the limits (control payload ≤ 125, message ≤ maxMessageSize);
// - re-encoding the decoded messages and decoding again gives the same events.

import PeerSyncCore

struct DecodeOutcome: Equatable {
    var events: [WebSocketFrameDecoder.Event]
    var errorCode: String?
}

func decode(_ bytes: ArraySlice<UInt8>, role: WebSocketRole, max: Int, split: UInt8) -> DecodeOutcome {
    var decoder = WebSocketFrameDecoder(role: role, maxMessageSize: max)
    var outcome = DecodeOutcome(events: [], errorCode: nil)
    var i = bytes.startIndex
    var step = Int(split % 17) + 1
    while i < bytes.endIndex {
        let end = split == 0 ? bytes.endIndex : min(bytes.endIndex, i + step)
        decoder.feed(Array(bytes[i..<end]))
        i = end
        step = step * 5 % 23 + 1
        do {
            while let event = try decoder.next() { outcome.events.append(event) }
        } catch {
            outcome.errorCode = error.code.rawValue
            return outcome
        }
    }
    return outcome
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrameDecoder(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 2 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let role: WebSocketRole = input[0] & 1 == 0 ? .server : .client
    let max = [0, 1, 125, 1000, 70_000][Int(input[0] >> 1) % 5]
    let payload = input[2...]

    let whole = decode(payload, role: role, max: max, split: 0)
    let split = decode(payload, role: role, max: max, split: input[1] | 1)
    if whole != split {
        fatalError("frame decoder depends on how input is split: \(whole) vs \(split)")
    }
    var reencoded: [UInt8] = []
    for event in whole.events {
        let mask: UInt32? = role == .server ? 0xA1B2_C3D4 : nil
        switch event {
        case .text(let text):
            if text.utf8.count > max { fatalError("text message over the limit") }
            reencoded += WebSocketFrameEncoder.encode(opcode: .text, payload: Array(text.utf8), mask: mask)
        case .binary(let bytes):
            if bytes.count > max { fatalError("binary message over the limit") }
            reencoded += WebSocketFrameEncoder.encode(opcode: .binary, payload: bytes, mask: mask)
        case .ping(let bytes):
            if bytes.count > 125 { fatalError("ping over 125 bytes") }
            reencoded += WebSocketFrameEncoder.encode(opcode: .ping, payload: bytes, mask: mask)
        case .pong(let bytes):
            if bytes.count > 125 { fatalError("pong over 125 bytes") }
            reencoded += WebSocketFrameEncoder.encode(opcode: .pong, payload: bytes, mask: mask)
        case .close(let code, let reason):
            reencoded += WebSocketFrameEncoder.encode(opcode: .close,
                                                      payload: WebSocketFrameEncoder.closePayload(code: code, reason: reason),
                                                      mask: mask)
        }
    }
    let again = decode(reencoded[...], role: role, max: max, split: 0)
    if again.events != whole.events || again.errorCode != nil {
        fatalError("re-encoded events decode differently: \(whole.events) vs \(again)")
    }
    return 0
}
