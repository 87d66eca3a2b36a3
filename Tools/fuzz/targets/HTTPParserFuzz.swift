// libFuzzer target: the HTTP/1.1 request and response parsers (PeerSyncWebSocketCodec) and
// the WebSocket handshake rules applied to what they parse.
//
// Input: byte 0 picks request or response parsing and the limits, byte 1 seeds the feed
// split. Properties checked (a violation traps):
// - parsing never traps, whatever the bytes;
// - results (messages, error code, remainder) do not depend on how bytes are split;
// - limits hold: header-limit errors only when the head is too long, bodies within the limit;
// - a parsed request or response serializes and re-parses to the same method/target/status,
//   headers and body;
// - the handshake validators never trap on parsed input.

import PeerSyncCore

struct HTTPOutcome: Equatable {
    var requests: [HTTPRequest] = []
    var responses: [HTTPResponse] = []
    var errorCode: String?
}

func parse(_ bytes: ArraySlice<UInt8>, request: Bool, maxHeader: Int, maxBody: Int, split: UInt8) -> HTTPOutcome {
    var outcome = HTTPOutcome()
    var requestParser = HTTPRequestParser(maxHeaderBytes: maxHeader, maxBodyBytes: maxBody)
    var responseParser = HTTPResponseParser(maxHeaderBytes: maxHeader, maxBodyBytes: maxBody)
    var i = bytes.startIndex
    var step = Int(split % 13) + 1
    do {
        while i < bytes.endIndex {
            let end = split == 0 ? bytes.endIndex : min(bytes.endIndex, i + step)
            let chunk = Array(bytes[i..<end])
            i = end
            step = step * 7 % 31 + 1
            if request {
                requestParser.feed(chunk)
                while let r = try requestParser.next() { outcome.requests.append(r) }
            } else {
                responseParser.feed(chunk)
                while let r = try responseParser.next() { outcome.responses.append(r) }
            }
        }
        if !request, let last = try responseParser.finish() { outcome.responses.append(last) }
    } catch {
        outcome.errorCode = error.code.rawValue
    }
    return outcome
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 2 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let isRequest = input[0] & 1 == 0
    let maxHeader = [64, 256, 16 * 1024][Int(input[0] >> 1) % 3]
    let maxBody = [0, 10, 100_000][Int(input[0] >> 3) % 3]
    let payload = input[2...]

    let whole = parse(payload, request: isRequest, maxHeader: maxHeader, maxBody: maxBody, split: 0)
    let split = parse(payload, request: isRequest, maxHeader: maxHeader, maxBody: maxBody, split: input[1] | 1)
    if whole != split {
        fatalError("HTTP parser depends on how input is split:\n\(whole)\nvs\n\(split)")
    }
    for request in whole.requests {
        if request.body.count > maxBody { fatalError("request body over the limit") }
        _ = WebSocketHandshake.isUpgradeRequest(request)
        _ = WebSocketHandshake.validateUpgradeRequest(request)
        if let auth = request.headers["Authorization"] { _ = BasicAuthorization.parse(auth) }
        // Re-frame the body with Content-Length (serialized() writes bodies raw).
        var plain = request
        plain.headers.remove("Transfer-Encoding")
        plain.headers.remove("Content-Length")
        var again = HTTPRequestParser(maxHeaderBytes: 1 << 20, maxBodyBytes: 1 << 20)
        again.feed(plain.serialized())
        do {
            guard let reparsed = try again.next() else { fatalError("serialized request does not re-parse") }
            if reparsed.method != request.method || reparsed.target != request.target
                || reparsed.body != request.body || reparsed.headers.count < plain.headers.count {
                fatalError("request round-trip mismatch: \(request) vs \(reparsed)")
            }
        } catch {
            fatalError("serialized request fails to parse: \(error) \(request)")
        }
    }
    for response in whole.responses {
        if response.body.count > maxBody { fatalError("response body over the limit") }
        _ = try? WebSocketHandshake.validateServerResponse(response, key: "dGhlIHNhbXBsZSBub25jZQ==", offeredSubprotocols: ["a"])
        if response.status < 100 || response.status > 999 { fatalError("status out of range") }
    }
    return 0
}
