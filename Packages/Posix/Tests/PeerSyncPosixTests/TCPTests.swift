import Foundation
import PeerSyncCore
@testable import PeerSyncPosix
import PeerSyncTransport
import Testing

/// TCP sockets on 127.0.0.1 / ::1 only.
@Suite("TCP sockets", .timeLimit(.minutes(1)))
struct TCPTests {
    /// A listener on `host` with a connected client and the server side of that connection.
    static func connectedPair(host: String = "127.0.0.1") async throws -> (TCPListener, client: TCPStream, server: TCPStream) {
        let listener = try await TCPListener.bind(host: host, port: 0)
        async let accepted = listener.accept()
        let client = try await TCPStream.connect(host: host, port: listener.port, timeout: .seconds(20))
        return (listener, client, try await accepted)
    }

    /// Reads until `count` bytes arrived (or the stream ended).
    static func read(_ stream: TCPStream, count: Int) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        while bytes.count < count, let chunk = try await stream.read(maxBytes: count - bytes.count) {
            bytes += chunk
        }
        return bytes
    }

    @Test("bytes travel both ways over IPv4 and IPv6; addresses are reported", arguments: ["127.0.0.1", "::1"])
    func roundTrip(host: String) async throws {
        let (listener, client, server) = try await Self.connectedPair(host: host)
        defer {
            listener.close()
            client.closeNow()
            server.closeNow()
        }
        let bracketed = host.contains(":") ? "[\(host)]" : host
        #expect(client.remoteAddress == "\(bracketed):\(listener.port)")
        #expect(server.localAddress == "\(bracketed):\(listener.port)")
        #expect(server.remoteAddress == client.localAddress)
        // Larger than the socket buffers: the writer has to wait for room.
        let large = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        async let sent: Void = client.write(large)
        #expect(try await Self.read(server, count: large.count) == large)
        try await sent
        try await server.write([1, 2, 3])
        #expect(try await Self.read(client, count: 3) == [1, 2, 3])
    }

    @Test("end of stream: read returns nil after the peer shuts down its output; readAvailable says when nothing is there")
    func endOfStream() async throws {
        let (listener, client, server) = try await Self.connectedPair()
        defer {
            listener.close()
            client.closeNow()
            server.closeNow()
        }
        var scratch = [UInt8](repeating: 0, count: 16)
        #expect(try scratch.withUnsafeMutableBytes { try server.readAvailable(into: $0) } == nil)
        try await client.write([7])
        await client.shutdownOutput()
        #expect(try await Self.read(server, count: 1) == [7])
        #expect(try await server.read(maxBytes: 16) == nil)
        #expect(try scratch.withUnsafeMutableBytes { try server.readAvailable(into: $0) } == 0)
    }

    @Test("port 0 picks distinct free ports; a taken port fails with addressInUse")
    func ports() async throws {
        let a = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        let b = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        defer {
            a.close()
            b.close()
        }
        #expect(a.port != 0 && b.port != 0 && a.port != b.port)
        await #expect { _ = try await TCPListener.bind(host: "127.0.0.1", port: a.port) } throws: { error in
            (error as? PeerSyncError)?.code == .addressInUse
        }
    }

    @Test("a listener on every address (host nil) serves IPv4 and IPv6; one on an interface takes its address")
    func wildcardAndInterface() async throws {
        let any = try await TCPListener.bind(port: 0)
        defer { any.close() }
        for host in ["127.0.0.1", "::1"] {
            async let accepted = any.accept()
            let client = try await TCPStream.connect(host: host, port: any.port, timeout: .seconds(20))
            let server = try await accepted
            try await client.write(Array(host.utf8))
            #expect(try await Self.read(server, count: host.utf8.count) == Array(host.utf8))
            client.closeNow()
            server.closeNow()
        }
        let onLoopback = try await TCPListener.bind(port: 0, interface: "lo")
        defer { onLoopback.close() }
        #expect(onLoopback.host == "127.0.0.1")
    }

    @Test("connection refused, unknown interface and a bad port are typed errors (no name lookup: it could leave the machine)")
    func connectErrors() async throws {
        let closed = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        let port = closed.port
        closed.close()
        let cases: [(String, PeerSyncError.Code, @Sendable () async throws -> Void)] = [
            ("refused", .connectionRefused, { _ = try await TCPStream.connect(host: "127.0.0.1", port: port, timeout: .seconds(20)) }),
            ("unknown interface", .invalidArgument, {
                _ = try await TCPStream.connect(host: "127.0.0.1", port: port, interface: "nosuchif0")
            }),
            ("port out of range", .invalidArgument, { _ = try await TCPStream.connect(host: "127.0.0.1", port: 70_000) }),
            ("listen on an unknown interface", .hostNotFound, { _ = try await TCPListener.bind(port: 0, interface: "nosuchif0") }),
        ]
        for (name, code, attempt) in cases {
            do {
                try await attempt()
                Issue.record("\(name): no error")
            } catch let error as PeerSyncError {
                #expect(error.code == code, "\(name): \(error)")
            }
        }
    }

    @Test("closing a listener ends a pending accept with .closed")
    func closeEndsAccept() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0)
        let accepting = Task { try await listener.accept() }
        listener.close()
        await #expect { _ = try await accepting.value } throws: { ($0 as? PeerSyncError)?.code == .closed }
    }
}
