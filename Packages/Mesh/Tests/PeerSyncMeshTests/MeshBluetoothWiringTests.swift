import Foundation
import PeerSyncAuth
import PeerSyncBLE
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncMesh
import PeerSyncMeshBluetooth
import PeerSyncMeshWiFi
import PeerSyncStorage
import Testing

/// The production wiring, `MultipeerReplicator(config:wifi:bluetooth:)` — DNS-SD + WebSocket/TLS
/// and BlueZ — on this machine, whose kernel has no Bluetooth: the Bluetooth transport fails
/// with the one clear error and the mesh runs on over Wi-Fi.
@Suite struct MeshBluetoothWiringTests {
    static let kernelHasBluetooth = BlueZL2CAPConnector().unavailability == nil

    @Test(.enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func withoutBluetoothTheMeshRunsOnWifiAndSaysWhy() async throws {
        try await withReplicator(transports: [.wifi, .bluetooth]) { replicator in
            #expect(replicator.networks.map(\.links.transport) == [.wifi, .bluetooth])
            try await replicator.start()
            let bluetooth = replicator.status(for: .bluetooth)
            #expect(bluetooth?.active == false)
            #expect(bluetooth?.error?.code == .bluetoothUnavailable)
            #expect(bluetooth?.error?.message.hasPrefix("Bluetooth is not available on this system: ") == true,
                    "\(String(describing: bluetooth))")
            #expect(replicator.status(for: .wifi)?.active == true)
            #expect(replicator.status.active)
            #expect(replicator.wifiLinks?.port != nil, "the Wi-Fi listener is not up")
            #expect(replicator.bluetoothLinks?.psm == nil)
            await replicator.stop()
            #expect(replicator.status(for: .wifi)?.active == false)
            // And again after a stop.
            try await replicator.start()
            #expect(replicator.status(for: .bluetooth)?.error?.code == .bluetoothUnavailable)
            #expect(replicator.status(for: .wifi)?.active == true)
            await replicator.stop()
        }
    }

    @Test(.enabled(if: !kernelHasBluetooth, "this kernel has Bluetooth"))
    func bluetoothAloneFailsToStartWithTheClearError() async throws {
        try await withReplicator(transports: [.bluetooth]) { replicator in
            let error = await #expect(throws: PeerSyncError.self) { try await replicator.start() }
            #expect(error?.code == .bluetoothUnavailable)
            #expect(replicator.status.active == false)
        }
    }

    @Test func theWifiOnlyInitializerPointsToTheBluetoothOne() async throws {
        try await withConfiguration(transports: [.wifi, .bluetooth]) { config in
            let error = #expect(throws: PeerSyncError.self) { _ = try MultipeerReplicator(config: config) }
            #expect(error?.code == .invalidArgument)
            #expect(error?.message.contains("MultipeerReplicator(config:wifi:bluetooth:)") == true)
        }
    }

    private func withConfiguration(transports: Set<MultipeerTransport>,
                                   _ body: (MultipeerReplicatorConfiguration) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("peersync-meshwiring-\(UUID().uuidString)").path
        let database = try await Database(name: "wiring", config: DatabaseConfiguration(directory: directory, backend: MemoryStorageBackend()))
        var config = try MultipeerReplicatorConfiguration(
            peerGroupID: "wiring-test", identity: TestCA.identity("wiring"),
            authenticator: MultipeerCertificateAuthenticator(rootCerts: [TestCA.fleet.certificate]),
            collections: [MultipeerCollectionConfiguration(collection: try database.defaultCollection())])
        config.transports = transports
        // The memory store keeps nothing on disk but the database's directory (its blobs).
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do { try await body(config) } catch {
            try? await database.close()
            throw error
        }
        try await database.close()
    }

    private func withReplicator(transports: Set<MultipeerTransport>, _ body: (MultipeerReplicator) async throws -> Void) async throws {
        try await withConfiguration(transports: transports) { config in
            let replicator = try MultipeerReplicator(config: config, wifi: MultipeerWiFiOptions(bindAddress: "127.0.0.1"),
                                                     bluetooth: MultipeerBluetoothOptions())
            do { try await body(replicator) } catch {
                await replicator.stop()
                throw error
            }
            await replicator.stop()
        }
    }
}
