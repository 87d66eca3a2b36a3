import PeerSyncCore
import PeerSyncPosix

/// One connected L2CAP connection-oriented channel: its seqpacket socket and MTUs.
public struct L2CAPChannel: Sendable {
    /// The connected `SOCK_SEQPACKET` socket; whoever takes the channel owns it.
    public let socket: SeqPacketSocket
    /// The largest SDU this side may send (BlueZ: `BT_SNDMTU`).
    public let sendMTU: Int
    /// The largest SDU the peer may send (BlueZ: `BT_RCVMTU`).
    public let receiveMTU: Int
    /// The peer's Bluetooth address (`AA:BB:CC:DD:EE:FF`) or, on a simulated network, its name.
    public let remoteAddress: String
    /// The PSM of the channel (the listener's).
    public let psm: UInt16

    /// A channel over a connected `socket`, which it now owns; the values are taken as given.
    public init(socket: SeqPacketSocket, sendMTU: Int, receiveMTU: Int, remoteAddress: String, psm: UInt16) {
        self.socket = socket
        self.sendMTU = sendMTU
        self.receiveMTU = receiveMTU
        self.remoteAddress = remoteAddress
        self.psm = psm
    }
}

/// Opens and accepts L2CAP connection-oriented channels (LE credit-based, `SOCK_SEQPACKET`):
/// the one thing ``BLETransport`` needs from the Bluetooth stack. Two implementations: a
/// simulated network of shaped `AF_UNIX` links (``SimulatedL2CAPNetwork``), and the BlueZ one
/// over real `AF_BLUETOOTH` sockets.
///
/// Contract: ``connect(to:psm:timeout:)`` returns a connected channel or throws a
/// `PeerSyncError` — `.connectionRefused` when nothing listens on that PSM, `.timeout`,
/// `.invalidArgument` for a malformed address or PSM; ``listen(psm:)`` binds `psm` (nil: a free
/// dynamic LE PSM, 0x0080–0x00FF) or throws `.addressInUse`. Every method may be called from
/// any task, concurrently.
public protocol L2CAPConnector: Sendable {
    /// This side's Bluetooth address (or simulated name): the host of the endpoints it listens on.
    var localAddress: String { get }

    /// Opens a channel to `psm` on the device at `address`.
    func connect(to address: String, psm: UInt16, timeout: Duration) async throws -> L2CAPChannel

    /// Starts accepting channels on `psm` (nil: a free dynamic PSM).
    func listen(psm: UInt16?) async throws -> any L2CAPChannelListener
}

/// Accepts L2CAP channels on one PSM.
///
/// Contract: ``accept()`` returns the next channel, suspending until one arrives, and `nil`
/// once the listener is closed (channels still waiting are then closed). ``close()`` frees the
/// PSM (later connects are refused), is idempotent, and leaves accepted channels open.
public protocol L2CAPChannelListener: AnyObject, Sendable {
    /// The PSM bound.
    var psm: UInt16 { get }
    /// The next incoming channel, or nil once closed.
    func accept() async throws -> L2CAPChannel?
    /// Stops listening. Idempotent.
    func close() async
}
