import PeerSyncCore
import PeerSyncPosix

/// A ``BLERadio`` on the system's default Bluetooth adapter through ``BlueZAdapter``.
/// **Compiled, never run on a radio** (no Bluetooth in the kernels PeerSync is tested on):
/// there ``unavailability`` is the adapter's ``PeerSyncError/Code/bluetoothUnavailable``
/// error and every method throws it.
///
/// Limits, by design of this thin layer: legacy advertising carries one advertisement, so one
/// publication per adapter (a second ``advertise(_:server:)`` throws
/// ``PeerSyncError/Code/discoveryFailed``); the GATT server listens on the ATT fixed channel,
/// which `bluetoothd` must not hold; the adapter's availability is read once (no hot-plug).
final class BlueZRadio: BLERadio {
    private let adapter: Result<BlueZAdapter, PeerSyncError>
    private struct State {
        var advertising = false
    }
    private let state = LockedValue(State())

    init() {
        adapter = Result { () throws(PeerSyncError) in try BlueZAdapter.openDefault() }
    }

    var unavailability: PeerSyncError? {
        if case .failure(let error) = adapter { return error }
        return nil
    }

    func availabilityUpdates() -> AsyncStream<PeerSyncError?> {
        let (stream, continuation) = AsyncStream<PeerSyncError?>.makeStream()
        continuation.yield(unavailability)
        return stream
    }

    func advertise(_ advertisement: BLEAdvertisement, server: GATTServer) async throws -> any BLEAdvertisingSet {
        let adapter = try adapter.get()
        let (advertisingData, scanResponse) = try advertisement.encoded()
        let claimed = state.withLock { state -> Bool in
            if state.advertising { return false }
            state.advertising = true
            return true
        }
        guard claimed else {
            throw PeerSyncError(.discoveryFailed, "this Bluetooth adapter already advertises a publication (legacy advertising carries one)")
        }
        do {
            let listener = try adapter.listenATT()
            let acceptor = Task {
                while let bearer = try? await listener.accept() {
                    Task { await server.serve(bearer) }
                }
            }
            do {
                try await adapter.startAdvertising(advertisingData: advertisingData, scanResponse: scanResponse)
            } catch {
                listener.close()
                acceptor.cancel()
                throw error
            }
            return BlueZAdvertisingSet(radio: self, adapter: adapter, listener: listener, acceptor: acceptor, server: server)
        } catch {
            state.withLock { $0.advertising = false }
            throw error
        }
    }

    fileprivate func advertisingStopped() {
        state.withLock { $0.advertising = false }
    }

    func scan() async throws -> AsyncThrowingStream<BLESighting, any Error> {
        let reports = try await adapter.get().scan()
        let (sightings, continuation) = AsyncThrowingStream<BLESighting, any Error>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let pump = Task {
            // The last advertising data and scan response of each address: a sighting needs both.
            var advertisingData: [String: [UInt8]] = [:]
            var scanResponses: [String: [UInt8]] = [:]
            do {
                for try await report in reports {
                    if report.isScanResponse { scanResponses[report.address] = report.data } else { advertisingData[report.address] = report.data }
                    if let type = BlueZAdapter.AddressType(rawValue: report.addressType + 1) {
                        BlueZAdapter.recordAddressType(type, of: report.address)
                    }
                    guard let data = advertisingData[report.address],
                          let advertisement = try? BLEAdvertisement(advertisingData: data, scanResponse: scanResponses[report.address] ?? [])
                    else { continue }
                    continuation.yield(BLESighting(address: report.address, advertisement: advertisement))
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in pump.cancel() }
        return sightings
    }

    func connectATT(to address: String) async throws -> SeqPacketSocket {
        try await adapter.get().connectATT(address: address, addressType: BlueZAdapter.addressType(of: address))
    }
}

/// The one advertisement of a ``BlueZRadio``.
final class BlueZAdvertisingSet: BLEAdvertisingSet {
    let address = "local adapter"
    private let radio: BlueZRadio
    private let adapter: BlueZAdapter
    private let listener: BlueZAdapter.Listener
    private let acceptor: Task<Void, Never>
    private let server: GATTServer
    private let stopped = LockedValue(false)

    fileprivate init(radio: BlueZRadio, adapter: BlueZAdapter, listener: BlueZAdapter.Listener, acceptor: Task<Void, Never>,
                     server: GATTServer) {
        self.radio = radio
        self.adapter = adapter
        self.listener = listener
        self.acceptor = acceptor
        self.server = server
    }

    func stop() async {
        guard stopped.withLock({ let was = $0; $0 = true; return !was }) else { return }
        try? await adapter.stopAdvertising()
        listener.close()
        acceptor.cancel()
        server.stop()
        radio.advertisingStopped()
    }
}
