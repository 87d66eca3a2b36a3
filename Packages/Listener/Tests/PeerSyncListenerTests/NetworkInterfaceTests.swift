import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener
import PeerSyncPosix
import PeerSyncReplicator
import PeerSyncTransport
import PeerSyncWebSocket
import PeerSyncWebSocketReplication
import Testing

/// `networkInterface` on the active side: the client socket is bound to the interface's
/// address before connecting.
@Suite(.serialized) struct NetworkInterfaceTests {
    @Test func clientSocketIsBoundToTheInterfaceAddress() async throws {
        try await withTempDirectory { dir in
            let (db, listener) = try await makeListener(dir, password: false, disableTLS: true)
            let port = try #require(listener.port)
            let viaLo = try await TCPStream.connect(host: "127.0.0.1", port: port, interface: "lo")
            #expect(viaLo.localAddress?.hasPrefix("127.0.0.1:") == true, "\(String(describing: viaLo.localAddress))")
            await viaLo.close()
            // 127.0.0.2 is on lo too but never the default source address: proves the bind.
            let viaAddress = try await TCPStream.connect(host: "127.0.0.1", port: port, interface: "127.0.0.2")
            #expect(viaAddress.localAddress?.hasPrefix("127.0.0.2:") == true, "\(String(describing: viaAddress.localAddress))")
            await viaAddress.close()
            await #expect(throws: PeerSyncError.self) {
                _ = try await TCPStream.connect(host: "127.0.0.1", port: port, interface: "nosuchif0")
            }
            await listener.stop()
            try await db.close()
        }
    }

    @Test(arguments: ["lo", "127.0.0.2"])
    func replicatorConnectsThroughInterface(_ interface: String) async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            try await addDocuments(serverDB.defaultCollection(), prefix: "s", count: 3)
            var config = try replicatorConfig(clientDB, listener)
            config.networkInterface = interface
            let status = try await runToCompletion(try Replicator(config: config))
            #expect(status.error == nil, "\(String(describing: status.error))")
            #expect(try await clientDB.defaultCollection().documentIDs().count == 3)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }

    @Test func unknownInterfaceStopsWithAClearError() async throws {
        try await withTempDirectory { dir in
            let (serverDB, listener) = try await makeListener(dir)
            let clientDB = try await openDatabase(dir, "client")
            var config = try replicatorConfig(clientDB, listener)
            config.networkInterface = "nosuchif0"
            let counting = CountingConnector()
            let status = try await runToCompletion(try Replicator(config: config, connector: counting.connector))
            let error = try #require(status.error)
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains("nosuchif0"))
            #expect(counting.count == 1)
            await listener.stop()
            try await clientDB.close()
            try await serverDB.close()
        }
    }
}
