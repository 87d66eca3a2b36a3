import PeerSyncCore
import PeerSyncTransport
import Testing

// --- README: using a connection ---
func chat(over transport: some Transport, at url: String) async throws {
    let connection = try await transport.connect(to: Endpoint(url: url))
    try await connection.send(text: "hello")
    for try await message in connection.messages {      // ends after a clean close
        print("got", message)
        if message.text == "bye" { break }
    }
    await connection.close(code: .normal, reason: "done")
    print(connection.closeInfo.map { "closed: \($0)" } ?? "open")
}
// --- end ---

@Suite struct TransportReadmeExamples {
    @Test func usingAConnection() async throws {
        let transport = PipeTransport()
        let listener = try await transport.listen(on: Endpoint(url: "pipe://readme"))
        let peer = Task { () -> CloseInfo? in
            guard let connection = try await listener.accept() else { return nil }
            let hello = try await connection.receive()
            #expect(hello == .text("hello"))
            try await connection.send(text: "bye")
            #expect(try await connection.receive() == nil)
            return connection.closeInfo
        }
        try await chat(over: transport, at: "pipe://readme")
        #expect(try await peer.value == CloseInfo(code: .normal, reason: "done"))
        await listener.close()
    }

    @Test func queueSnippet() async throws {
        let inbox = AsyncMessageQueue<TransportMessage>(maxCount: 64, maxBytes: 4 << 20)
        try await inbox.send(.text("x"))
        let next = try await inbox.receive()
        inbox.finish()
        #expect(next == .text("x"))
        #expect(try await inbox.receive() == nil)
    }
}
