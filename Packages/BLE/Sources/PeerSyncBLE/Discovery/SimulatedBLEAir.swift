import PeerSyncCore
import PeerSyncPosix

/// The shared "air" of simulated Bluetooth LE radios in one process: advertisements of one
/// radio reach the scanners of the others, and an ATT connection to an advertiser is a real
/// `AF_UNIX` `SOCK_SEQPACKET` pair (`SeqPacketSocket.pair()`) whose far end the
/// advertiser's ``GATTServer`` serves — the same code that runs over L2CAP CID 4 on a radio.
///
/// Faithful in what discovery depends on: advertising data goes through its 31-byte encoding
/// and back (``BLEAdvertisement/encoded()``), each advertisement is re-sent every
/// ``advertisingInterval`` while it lasts (so scanners notice one that stops), a radio never
/// hears itself, and switching the air off (``powerOff(reason:)``, an adapter going away)
/// stops advertising and scanning and drops every ATT link. Not simulated: radio range,
/// RSSI, collisions, lost advertising PDUs.
///
/// ```swift
/// let air = SimulatedBLEAir()
/// let alice = BLEDiscovery(air: air, hostName: "alice")
/// let bob = BLEDiscovery(air: air, hostName: "bob")
/// ```
///
/// Threading: every method from any thread; none blocks beyond a short lock.
public final class SimulatedBLEAir: Sendable {
    /// How often each advertisement is re-sent to the scanners. Default 50 ms.
    public let advertisingInterval: Duration

    struct Advertising {
        let radio: Int
        let advertisingData: [UInt8]
        let scanResponse: [UInt8]
        let server: GATTServer
        /// The advertising radio's device address (its L2CAP connector's), if it has one.
        let device: String?
    }

    struct Scanner {
        let radio: Int
        let sink: AsyncThrowingStream<BLESighting, any Error>.Continuation
    }

    struct State {
        var nextID = 0
        var advertising: [String: Advertising] = [:]
        var scanners: [Int: Scanner] = [:]
        var watchers: [Int: AsyncStream<PeerSyncError?>.Continuation] = [:]
        var off: PeerSyncError?
        var ticker: Task<Void, Never>?

        mutating func makeID() -> Int {
            nextID += 1
            return nextID
        }
    }

    // Guards every advertisement, scanner and watcher; streams are fed and connections
    // dropped after it is released.
    let state = LockedValue(State())

    /// - Parameter advertisingInterval: how often advertisements are re-sent (> 0).
    public init(advertisingInterval: Duration = .milliseconds(50)) {
        self.advertisingInterval = advertisingInterval > .zero ? advertisingInterval : .milliseconds(50)
    }

    deinit {
        state.withLock { $0.ticker }?.cancel()
    }

    /// Switches every radio off (as an adapter being powered down or unplugged): radios report
    /// unavailable (`PeerSyncError.Code.discoveryUnavailable`, `reason`), advertisements stop
    /// reaching scanners, new advertisements and connections fail, and every ATT link drops.
    /// Advertising sets are kept and resume with ``powerOn()``.
    public func powerOff(reason: String = "the simulated Bluetooth adapter was switched off") {
        let error = PeerSyncError(.discoveryUnavailable, reason)
        let (servers, watchers) = state.withLock { state in
            state.off = error
            return (state.advertising.values.map(\.server), Array(state.watchers.values))
        }
        for server in servers { server.dropConnections() }
        for watcher in watchers { watcher.yield(error) }
    }

    /// Switches the radios back on: advertising and scanning resume.
    public func powerOn() {
        let watchers = state.withLock { state -> [AsyncStream<PeerSyncError?>.Continuation] in
            guard state.off != nil else { return [] }
            state.off = nil
            return Array(state.watchers.values)
        }
        for watcher in watchers { watcher.yield(nil) }
        transmit()
    }

    /// A new radio on this air.
    func makeRadio() -> Int {
        state.withLock { $0.makeID() }
    }

    var unavailability: PeerSyncError? { state.withLock { $0.off } }

    func availabilityUpdates() -> AsyncStream<PeerSyncError?> {
        let (stream, continuation) = AsyncStream<PeerSyncError?>.makeStream(bufferingPolicy: .unbounded)
        let id = state.withLock { state -> Int in
            let id = state.makeID()
            state.watchers[id] = continuation
            continuation.yield(state.off)
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.watchers.removeValue(forKey: id) } }
        return stream
    }

    func advertise(_ advertisement: BLEAdvertisement, server: GATTServer, from radio: Int, device: String?) throws -> String {
        let (advertisingData, scanResponse) = try advertisement.encoded()
        let address = try state.withLock { state throws(PeerSyncError) -> String in
            if let off = state.off { throw off }
            let id = state.makeID()
            let address = "5E:" + [id >> 24, id >> 16, id >> 8, id].map { byte in
                let hex = String(byte & 0xFF, radix: 16, uppercase: true)
                return hex.count == 1 ? "0" + hex : hex
            }.joined(separator: ":") + ":01"
            state.advertising[address] = Advertising(radio: radio, advertisingData: advertisingData,
                                                     scanResponse: scanResponse, server: server, device: device)
            return address
        }
        startTicker()
        transmit()
        return address
    }

    /// The device address of the radio advertising at `address` (given to
    /// ``BLEDiscovery/init(air:hostName:deviceAddress:configuration:)``), if it advertises and has
    /// one: how a ``SimulatedL2CAPNetwork`` made with this air reaches a device at the address
    /// a scan saw, as a real L2CAP connection to an advertiser's address reaches its device.
    public func deviceAddress(advertisingAt address: String) -> String? {
        state.withLock { $0.advertising[address]?.device }
    }

    /// Whether the air is off (``powerOff(reason:)``).
    public var isOff: Bool { state.withLock { $0.off != nil } }

    func stopAdvertising(_ address: String) {
        let server = state.withLock { $0.advertising.removeValue(forKey: address)?.server }
        server?.stop()
    }

    func scan(from radio: Int) -> AsyncThrowingStream<BLESighting, any Error> {
        let (stream, continuation) = AsyncThrowingStream<BLESighting, any Error>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id = state.withLock { state -> Int in
            let id = state.makeID()
            state.scanners[id] = Scanner(radio: radio, sink: continuation)
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.scanners.removeValue(forKey: id) } }
        startTicker()
        transmit()
        return stream
    }

    func connectATT(to address: String, from radio: Int) throws -> SeqPacketSocket {
        let (client, server) = try SeqPacketSocket.pair()
        let target = state.withLock { state -> Result<GATTServer, PeerSyncError> in
            if let off = state.off { return .failure(off) }
            guard let advertising = state.advertising[address], advertising.radio != radio else {
                return .failure(PeerSyncError(.connectionRefused, "no device advertises at \(address)"))
            }
            return .success(advertising.server)
        }
        switch target {
        case .failure(let error):
            client.close()
            server.close()
            throw error
        case .success(let gatt):
            Task { await gatt.serve(server) }
            return client
        }
    }

    /// Sends every advertisement once to every scanner of another radio (nothing while off).
    private func transmit() {
        let deliveries = state.withLock { state -> [(AsyncThrowingStream<BLESighting, any Error>.Continuation, [BLESighting])] in
            guard state.off == nil else { return [] }
            let sightings = state.advertising.compactMap { address, advertising -> (Int, BLESighting)? in
                guard let decoded = try? BLEAdvertisement(advertisingData: advertising.advertisingData,
                                                          scanResponse: advertising.scanResponse) else { return nil }
                return (advertising.radio, BLESighting(address: address, advertisement: decoded))
            }
            return state.scanners.values.map { scanner in
                (scanner.sink, sightings.filter { $0.0 != scanner.radio }.map(\.1))
            }
        }
        for (sink, sightings) in deliveries {
            for sighting in sightings { sink.yield(sighting) }
        }
    }

    private func startTicker() {
        let interval = advertisingInterval
        state.withLock { state in
            guard state.ticker == nil else { return }
            state.ticker = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    guard let self else { return }
                    self.transmit()
                }
            }
        }
    }
}

/// A ``BLERadio`` on a ``SimulatedBLEAir``.
struct SimulatedBLERadio: BLERadio {
    let air: SimulatedBLEAir
    let id: Int
    /// The device's L2CAP address, if it has one (see ``SimulatedBLEAir/deviceAddress(advertisingAt:)``).
    let device: String?

    init(air: SimulatedBLEAir, device: String? = nil) {
        self.air = air
        self.id = air.makeRadio()
        self.device = device
    }

    var unavailability: PeerSyncError? { air.unavailability }

    func availabilityUpdates() -> AsyncStream<PeerSyncError?> { air.availabilityUpdates() }

    func advertise(_ advertisement: BLEAdvertisement, server: GATTServer) async throws -> any BLEAdvertisingSet {
        SimulatedAdvertisingSet(air: air, address: try air.advertise(advertisement, server: server, from: id, device: device))
    }

    func scan() async throws -> AsyncThrowingStream<BLESighting, any Error> { air.scan(from: id) }

    func connectATT(to address: String) async throws -> SeqPacketSocket { try air.connectATT(to: address, from: id) }
}

struct SimulatedAdvertisingSet: BLEAdvertisingSet {
    let air: SimulatedBLEAir
    let address: String

    func stop() async { air.stopAdvertising(address) }
}
