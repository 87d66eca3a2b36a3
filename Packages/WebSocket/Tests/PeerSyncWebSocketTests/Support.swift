import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTestSupport
import PeerSyncTransport
import PeerSyncTransportTesting
@testable import PeerSyncWebSocket
import Testing

func endpoint(_ server: WebSocketServer, tls: Bool = false, path: String = "/echo") throws -> Endpoint {
    try Endpoint(url: "\(tls ? "wss" : "ws")://127.0.0.1:\(server.port)\(path)")
}

/// The number of threads of this process.
func threadCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
}

/// The names of this process's threads (at most 15 characters each, as the kernel keeps them).
func threadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
        .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// Resident memory of this process in MiB.
func residentMegabytes() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return -1 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? -1
        return kb / 1024
    }
    return -1
}

/// A raw TCP client for sending hand-made bytes to a server.
struct RawClient {
    let stream: TCPStream

    static func connect(port: Int) async throws -> RawClient {
        RawClient(stream: try await TCPStream.connect(host: "127.0.0.1", port: port, timeout: .seconds(20)))
    }

    func send(_ text: String) async throws { try await stream.write(Array(text.utf8)) }
    func send(_ bytes: [UInt8]) async throws { try await stream.write(bytes) }

    /// Reads one HTTP response (head and body).
    func readResponse(timeout: Double = 20) async throws -> HTTPResponse {
        let stream = self.stream
        return try await withTimeout(timeout, "reading a response") {
            var parser = HTTPResponseParser()
            while true {
                guard let bytes = try await stream.read(maxBytes: 65536) else {
                    if let response = try parser.finish() { return response }
                    throw PeerSyncError(.connectionClosed, "closed before a response")
                }
                parser.feed(bytes)
                if let response = try parser.next() { return response }
            }
        }
    }

    /// Upgrades with a valid handshake; returns bytes received after the 101.
    func upgrade(path: String = "/", extraHeaders: String = "") async throws -> (HTTPResponse, [UInt8]) {
        try await send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\(extraHeaders)\r\n")
        var parser = HTTPResponseParser()
        while true {
            guard let bytes = try await stream.read(maxBytes: 65536) else {
                throw PeerSyncError(.connectionClosed, "closed during upgrade")
            }
            parser.feed(bytes)
            if let response = try parser.next() { return (response, parser.takeRemainder()) }
        }
    }

    /// Reads frames (as a client: unmasked expected) until a close frame or end of stream.
    func readUntilClose(initial: [UInt8] = [], timeout: Double = 20) async throws -> (events: [WebSocketFrameDecoder.Event], ended: Bool) {
        let stream = self.stream
        return try await withTimeout(timeout, "reading until close") {
            var decoder = WebSocketFrameDecoder(role: .client, maxMessageSize: 1 << 24)
            decoder.feed(initial)
            var events: [WebSocketFrameDecoder.Event] = []
            while true {
                while let event = try decoder.next() {
                    events.append(event)
                    if case .close = event { return (events, false) }
                }
                guard let bytes = try await stream.read(maxBytes: 65536) else { return (events, true) }
                decoder.feed(bytes)
            }
        }
    }

    /// Whether the server closed the connection (EOF or reset) within `timeout`.
    func isClosedByServer(timeout: Double = 20) async -> Bool {
        let stream = self.stream
        return (try? await withTimeout(timeout, "waiting for the server to close") {
            while true {
                do {
                    guard try await stream.read(maxBytes: 65536) != nil else { return true }
                } catch {
                    return true
                }
            }
        }) ?? false
    }

    func close() async { await stream.close() }
}

/// A masked client frame (what a client must send) with any first byte — FIN, the RSV bits
/// and the opcode, undefined ones too: the encoder's frame (tested against the RFC in
/// PeerSyncWebSocketCodecTests) with its first byte replaced.
func clientFrame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, rsv: UInt8 = 0) -> [UInt8] {
    var frame = WebSocketFrameEncoder.encode(opcode: .binary, payload: payload, mask: 0x1234_5678)
    frame[0] = (fin ? 0x80 : 0) | (rsv << 4) | opcode
    return frame
}
