import PeerSyncCore
import PeerSyncPosix

/// The ``L2CAPConnector`` of a real Bluetooth adapter: LE connection-oriented channels on
/// `AF_BLUETOOTH` `SOCK_SEQPACKET` sockets through `BlueZAdapter` (`connectL2CAP`,
/// `listenL2CAP`), non-blocking on PeerSyncPosix's reactor, with the MTUs the kernel
/// negotiated (`BT_SNDMTU`, `BT_RCVMTU`). What ``BLETransport`` runs over on a radio.
///
/// **Compiled, never run on a radio** (the kernels PeerSync is tested on have no Bluetooth).
/// Without Bluetooth the connector is created all the same; ``localAddress`` is empty and
/// ``connect(to:psm:timeout:)`` and ``listen(psm:)`` throw
/// `PeerSyncError/Code/bluetoothUnavailable` ("Bluetooth is not available on this system: …"),
/// which a test asserts. Nothing is simulated on that path.
///
/// Addresses are `AA:BB:CC:DD:EE:FF`; the address type (public or random) is the one the
/// adapter's scans saw for that address (``BLEDiscovery`` on BlueZ scans), public otherwise.
///
/// Threading: every member from any task; nothing blocks a thread.
public final class BlueZL2CAPConnector: L2CAPConnector {
    private let adapter: Result<BlueZAdapter, PeerSyncError>
    /// This adapter's address, or "" when there is no usable adapter.
    public let localAddress: String

    /// Opens the system's default adapter. Never throws: without Bluetooth every later call
    /// throws `PeerSyncError/Code/bluetoothUnavailable` (see ``unavailability``).
    public init() {
        adapter = Result { () throws(PeerSyncError) in try BlueZAdapter.openDefault() }
        localAddress = (try? adapter.get().address()) ?? ""
    }

    /// Nil when the adapter is usable; else the error every call throws.
    public var unavailability: PeerSyncError? {
        if case .failure(let error) = adapter { return error }
        return nil
    }

    /// Opens an LE channel to `psm` of the device at `address`, within `timeout`. Throws
    /// `.bluetoothUnavailable` without Bluetooth, `.invalidArgument` for a malformed address or
    /// PSM, `.connectionRefused` when nothing listens there, `.timeout`.
    public func connect(to address: String, psm: UInt16, timeout: Duration) async throws -> L2CAPChannel {
        let adapter = try adapter.get()
        guard (1...255).contains(psm) else {
            throw PeerSyncError(.invalidArgument, "an LE PSM is 1–255, got \(psm)", context: ["psm": "\(psm)"])
        }
        let type = BlueZAdapter.addressType(of: address)
        let socket = try await adapter.connectL2CAP(address: address, addressType: type, psm: psm, timeout: timeout)
        do {
            let mtus = try BlueZAdapter.channelMTUs(of: socket)
            return L2CAPChannel(socket: socket, sendMTU: mtus.send, receiveMTU: mtus.receive, remoteAddress: address, psm: psm)
        } catch {
            socket.close()
            throw error
        }
    }

    /// Listens on `psm` (nil: a dynamic PSM the kernel picks). Throws `.bluetoothUnavailable`
    /// without Bluetooth, `.addressInUse` for a PSM taken.
    public func listen(psm: UInt16?) async throws -> any L2CAPChannelListener {
        BlueZL2CAPListener(try adapter.get().listenL2CAP(psm: psm))
    }
}

/// A listening LE PSM of a ``BlueZL2CAPConnector``.
final class BlueZL2CAPListener: L2CAPChannelListener {
    private let listener: BlueZAdapter.Listener
    private let closed = LockedValue(false)

    init(_ listener: BlueZAdapter.Listener) {
        self.listener = listener
    }

    var psm: UInt16 { listener.psm }

    /// The next channel; nil once closed. A channel whose MTUs cannot be read is dropped.
    func accept() async throws -> L2CAPChannel? {
        while !closed.withLock({ $0 }) {
            let socket: SeqPacketSocket
            do {
                socket = try await listener.accept()
            } catch {
                if closed.withLock({ $0 }) { return nil }
                throw error
            }
            guard let mtus = try? BlueZAdapter.channelMTUs(of: socket) else {
                socket.close()
                continue
            }
            let remote = (try? BlueZAdapter.peerAddress(of: socket)) ?? ""
            return L2CAPChannel(socket: socket, sendMTU: mtus.send, receiveMTU: mtus.receive, remoteAddress: remote, psm: psm)
        }
        return nil
    }

    func close() async {
        closed.withLock { $0 = true }
        listener.close()
    }
}
