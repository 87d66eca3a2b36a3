import PeerSyncCore
import PeerSyncLoopback
import PeerSyncTransport
import PeerSyncTransportTesting
import Testing

/// The examples of Packages/Loopback/README.md, compiled and run.
@Suite struct LoopbackReadmeExamples {
    @Test func quickStart() async throws {
        // --- README: quick start ---
        let network = LoopbackNetwork()                      // isolated: one per test
        let server = LoopbackTransport(network: network, host: "server")
        let client = LoopbackTransport(network: network, host: "phone")

        let listener = try await server.listen(on: Endpoint(url: "loopback://server:0"))
        let echo = Task {
            for try await connection in listener.connections {
                Task {
                    for try await message in connection.messages { try await connection.send(message) }
                }
            }
        }

        let connection = try await client.connect(to: listener.endpoint)
        try await connection.send(text: "hello")
        let reply = try await connection.receive()           // .text("hello")
        await connection.close(code: .normal, reason: "done")
        await listener.close()
        _ = try await echo.value
        // --- end ---
        #expect(reply == .text("hello"))
        #expect(network.liveLinkCount == 0)
    }

    @Test func bleLikeLinkAndPartition() async throws {
        // --- README: simulated link and partitions ---
        let network = LoopbackNetwork()
        network.setConditions(.bluetoothLE(seed: 1), between: "phone", and: "watch")
        let watch = try LoopbackTransport(network: network, host: "watch").listenLoopback(on: Endpoint(url: "loopback://watch"))
        let link = try await LoopbackTransport(network: network, host: "phone").connectLoopback(to: watch.endpoint)
        guard let peer = try await watch.acceptLoopback() else { Issue.record("no connection"); return }

        try await link.send([UInt8](repeating: 7, count: 10_000))   // 41 fragments of ≤ 244 bytes
        let received = try await peer.receive()                      // reassembled, ~0.1 s later

        network.partition(["phone"], ["watch"])                       // both ends: connectionReset
        do {
            _ = try await peer.receive()
        } catch let error as PeerSyncError where error.code == .connectionReset {
            print("partitioned:", error)
        }
        network.heal()
        await watch.close()
        // --- end ---
        #expect(received?.byteCount == 10_000)
        #expect(network.liveLinkCount == 0)
        #expect(peer.closeInfo?.code == .abnormalClosure)
    }
}
