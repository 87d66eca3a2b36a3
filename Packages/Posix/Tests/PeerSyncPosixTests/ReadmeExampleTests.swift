import PeerSyncPosix
import Testing

/// The example of Packages/Posix/README.md, verbatim, so it keeps compiling and working.
@Suite("README example", .timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test("TCP echo on 127.0.0.1")
    func echoExample() async throws {
        let listener = try await TCPListener.bind(host: "127.0.0.1", port: 0)   // port 0: a free port
        let echo = Task {
            let connection = try await listener.accept()
            while let bytes = try await connection.read(maxBytes: 65536) {     // nil: the peer shut down
                try await connection.write(bytes)
            }
            await connection.close()
        }
        let client = try await TCPStream.connect(host: "127.0.0.1", port: listener.port)
        try await client.write(Array("hello".utf8))
        let reply = try await client.read(maxBytes: 5)                         // "hello" (TCP may split it)
        await client.shutdownOutput()
        try await echo.value
        await client.close()
        listener.close()

        let first = try #require(reply)
        #expect(!first.isEmpty && Array("hello".utf8).starts(with: first))
    }
}
