import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport

/// An in-process network of simulated Bluetooth LE devices: each ``connector(address:)`` is a
/// device that listens on PSMs and connects to the others' over a ``SimulatedBLELink`` (real
/// `AF_UNIX` seqpacket sockets, shaped). What ``BLETransport`` runs over in tests, benchmarks
/// and anywhere without a Bluetooth radio.
///
/// Made with a ``SimulatedBLEAir`` (``init(conditions:air:)``), the network is that air's data
/// channels: a device is also reachable at the address its advertisements are seen at (see
/// ``SimulatedBLEAir/deviceAddress(advertisingAt:)``), and while the air is off no channel
/// opens (``cutAllLinks(reason:)`` ends the open ones).
///
/// Both channel ends get the link's MTU as send and receive MTU. Threading: every member from
/// any task.
public final class SimulatedL2CAPNetwork: Sendable {
    /// The shape of every link this network makes (changeable; new links take the new value).
    public var conditions: BLELinkConditions {
        get { state.withLock { $0.conditions } }
        set { state.withLock { $0.conditions = newValue } }
    }

    private struct State {
        var conditions: BLELinkConditions
        /// Listeners by device address, then PSM.
        var listeners: [String: [UInt16: SimulatedL2CAPListener]] = [:]
        /// Every link made so far, in order.
        var links: [SimulatedBLELink] = []
    }

    private let state: LockedValue<State>
    /// The air whose advertising addresses lead to devices here, and whose being off refuses channels.
    public let air: SimulatedBLEAir?

    /// The first PSM handed out when a listener asks for any: the LE dynamic range 0x0080–0x00FF.
    static let dynamicPSMs: ClosedRange<UInt16> = 0x0080...0x00FF

    /// A network whose channels are shaped by `conditions` (default: a BLE-like link). With `air`,
    /// only devices advertising on it can be reached, at the address their advertisement is seen
    /// at, and no channel opens while the air is off.
    public init(conditions: BLELinkConditions = .bluetoothLE, air: SimulatedBLEAir? = nil) {
        state = LockedValue(State(conditions: conditions))
        self.air = air
    }

    /// A device of this network at `address` (any non-empty name; a Bluetooth address reads best).
    public func connector(address: String) -> SimulatedL2CAPConnector {
        SimulatedL2CAPConnector(network: self, localAddress: address)
    }

    /// Every link made so far, in order, ended ones included (their statistics stay readable).
    public var links: [SimulatedBLELink] {
        state.withLock { $0.links }
    }

    /// Loses every link that is up (``SimulatedBLELink/cut(reason:)``), as when the radio goes away.
    public func cutAllLinks(reason: String = "every link of the simulated network was cut") {
        for link in links where !link.hasEnded { link.cut(reason: reason) }
    }

    // MARK: For the connector and listener

    func connect(from source: String, to address: String, psm: UInt16) throws(PeerSyncError) -> L2CAPChannel {
        if let air, air.isOff {
            throw PeerSyncError(.connectionRefused, "the simulated Bluetooth radio is off", context: ["address": address])
        }
        let device = air?.deviceAddress(advertisingAt: address)
        let (listener, conditions) = state.withLock { s in
            (s.listeners[address]?[psm] ?? device.flatMap { s.listeners[$0]?[psm] }, s.conditions)
        }
        guard let listener else {
            throw PeerSyncError(.connectionRefused, "no simulated BLE device listens on that PSM",
                                context: ["address": address, "psm": "\(psm)"])
        }
        let (link, central, peripheral) = try SimulatedBLELink.open(conditions: conditions)
        let incoming = L2CAPChannel(socket: peripheral, sendMTU: conditions.mtu, receiveMTU: conditions.mtu,
                                    remoteAddress: source, psm: psm)
        guard listener.offer(incoming) else {
            central.close()
            peripheral.close()
            throw PeerSyncError(.connectionRefused, "the simulated BLE device's listener is closed or its backlog is full",
                                context: ["address": address, "psm": "\(psm)"])
        }
        state.withLock { $0.links.append(link) }
        return L2CAPChannel(socket: central, sendMTU: conditions.mtu, receiveMTU: conditions.mtu,
                            remoteAddress: address, psm: psm)
    }

    func bind(_ listener: SimulatedL2CAPListener, address: String, psm requested: UInt16?) throws(PeerSyncError) -> UInt16 {
        try state.withLock { s throws(PeerSyncError) -> UInt16 in
            let taken = s.listeners[address] ?? [:]
            let psm: UInt16
            if let requested {
                guard taken[requested] == nil else {
                    throw PeerSyncError(.addressInUse, "the PSM is already bound on this simulated BLE device",
                                        context: ["address": address, "psm": "\(requested)"])
                }
                psm = requested
            } else {
                guard let free = Self.dynamicPSMs.first(where: { taken[$0] == nil }) else {
                    throw PeerSyncError(.addressInUse, "every dynamic LE PSM is bound on this simulated BLE device",
                                        context: ["address": address])
                }
                psm = free
            }
            s.listeners[address, default: [:]][psm] = listener
            return psm
        }
    }

    func unbind(_ listener: SimulatedL2CAPListener, address: String, psm: UInt16) {
        state.withLock { s in
            if s.listeners[address]?[psm] === listener { s.listeners[address]?[psm] = nil }
        }
    }
}

/// One device of a ``SimulatedL2CAPNetwork``.
public struct SimulatedL2CAPConnector: L2CAPConnector {
    /// The simulated network this connector dials and listens on.
    public let network: SimulatedL2CAPNetwork
    public let localAddress: String

    /// Opens a shaped link to the listener on `psm` at `address`. Throws `.connectionRefused`
    /// when none listens there (the timeout is not needed: it answers at once).
    public func connect(to address: String, psm: UInt16, timeout: Duration) async throws -> L2CAPChannel {
        try network.connect(from: localAddress, to: address, psm: psm)
    }

    /// Binds `psm` (nil: the first free one of 0x0080–0x00FF) on this device.
    public func listen(psm: UInt16?) async throws -> any L2CAPChannelListener {
        try SimulatedL2CAPListener(network: network, address: localAddress, psm: psm)
    }
}

/// A listener of a simulated device: channels wait in a backlog of 128 (beyond, connects are refused).
final class SimulatedL2CAPListener: L2CAPChannelListener {
    private let network: SimulatedL2CAPNetwork
    private let address: String
    /// The PSM bound; set once, in `init`.
    private let bound = LockedValue<UInt16>(0)
    var psm: UInt16 { bound.withLock { $0 } }
    private let backlog = AsyncMessageQueue<L2CAPChannel>(maxCount: 128)

    init(network: SimulatedL2CAPNetwork, address: String, psm: UInt16?) throws(PeerSyncError) {
        self.network = network
        self.address = address
        let chosen = try network.bind(self, address: address, psm: psm)
        bound.withLock { $0 = chosen }
    }

    /// Queues an incoming channel; false when closed or full.
    func offer(_ channel: L2CAPChannel) -> Bool {
        (try? backlog.trySend(channel)) ?? false
    }

    func accept() async throws -> L2CAPChannel? {
        try await backlog.receive()
    }

    func close() async {
        network.unbind(self, address: address, psm: psm)
        for waiting in backlog.finish(discardingBuffered: true) { waiting.socket.close() }
    }
}
