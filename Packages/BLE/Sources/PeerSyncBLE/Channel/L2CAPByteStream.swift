import PeerSyncCore
import PeerSyncPosix

/// A `ByteStream` over a Bluetooth LE L2CAP connection-oriented channel: a connected
/// `SOCK_SEQPACKET` socket whose every packet is one L2CAP SDU of at most the channel's MTU.
/// TLS (`TLSStream.handshake(over:)`) and WebSocket framing run over it as over TCP.
///
/// - **Writing** cuts the bytes into packets of at most ``fragmentSize`` bytes, sent in order;
///   a write suspends while the socket's buffer is full (the channel's credits are spent), so
///   back-pressure reaches the writer, and returns once every packet was handed to the socket.
/// - **Reading** returns the bytes of the next packet (up to `maxBytes`; the rest of a longer
///   packet is kept for the next read): packet boundaries carry no meaning in a byte stream.
///   A packet longer than ``receiveMTU`` breaks the peer's side of the contract: the read
///   throws `PeerSyncError.Code.protocolError` (a real L2CAP socket never delivers one).
/// - **Ending**: ``shutdownOutput()`` shuts down the sending side (`shutdown(SHUT_WR)`: on an
///   `AF_UNIX` pair the peer reads the end of the stream and may still send; a BlueZ L2CAP
///   socket disconnects the whole channel, L2CAP has no half-close); ``close()`` closes the
///   socket, and pending reads and writes end with `PeerSyncError.Code.closed`. The peer's
///   close or shutdown reads as the end of the stream (`nil`).
///
/// Threading: the `ByteStream` contract — any task; at most one `read` and one `write` at a
/// time, which may run concurrently. Errors: those of `SeqPacketSocket` (`.connectionReset`
/// when the link broke, `.closed`, `.cancelled`). A write cancelled or failing halfway leaves
/// the stream cut: close it.
public final class L2CAPByteStream: ByteStream {
    /// The L2CAP SDU overhead the default fragment size leaves room for: an LE credit-based
    /// channel's first K-frame of an SDU carries a 2-byte SDU length, so with the MTU equal to
    /// the link's PDU payload (247 on a 251-byte LE data-length link) an SDU of `MTU - 2` bytes
    /// travels in exactly one link-layer packet, where an SDU of `MTU` bytes would need two.
    public static let sduOverhead = 2

    /// The default fragment size for a channel whose send MTU is `mtu`: `mtu - ``sduOverhead```
    /// (at least 1). For the usual 247-byte LE channel: 245.
    public static func defaultFragmentSize(forMTU mtu: Int) -> Int { max(1, mtu - sduOverhead) }

    /// The socket of the channel (owned by the stream from ``init(socket:fragmentSize:receiveMTU:remoteAddress:)`` on).
    public let socket: SeqPacketSocket
    /// The largest packet a write sends.
    public let fragmentSize: Int
    /// The largest packet the peer may send (the channel's receive MTU).
    public let receiveMTU: Int
    /// The peer's Bluetooth address (or a simulated device's name), if known.
    public let remoteAddress: String?

    /// The unread rest of the last packet, for the one reader.
    private let pending = LockedValue<ArraySlice<UInt8>>([])

    /// Takes ownership of `socket`, a connected channel. Throws
    /// `PeerSyncError.Code.invalidArgument` when `fragmentSize` or `receiveMTU` is below 1.
    public init(socket: SeqPacketSocket, fragmentSize: Int, receiveMTU: Int,
                remoteAddress: String? = nil) throws(PeerSyncError) {
        guard fragmentSize >= 1, receiveMTU >= 1 else {
            throw PeerSyncError(.invalidArgument, "an L2CAP stream needs a fragment size and a receive MTU of at least 1 byte",
                                context: ["fragmentSize": "\(fragmentSize)", "receiveMTU": "\(receiveMTU)"])
        }
        self.socket = socket
        self.fragmentSize = fragmentSize
        self.receiveMTU = receiveMTU
        self.remoteAddress = remoteAddress
    }

    /// A stream over `channel`, cutting writes into `fragmentSize`-byte packets (default
    /// ``defaultFragmentSize(forMTU:)`` of the channel's send MTU; never above the send MTU).
    public convenience init(channel: L2CAPChannel, fragmentSize: Int? = nil) throws(PeerSyncError) {
        let size = min(fragmentSize ?? Self.defaultFragmentSize(forMTU: channel.sendMTU), channel.sendMTU)
        try self.init(socket: channel.socket, fragmentSize: size, receiveMTU: channel.receiveMTU,
                      remoteAddress: channel.remoteAddress)
    }

    /// The next bytes: the rest of a packet a previous read left, else the next packet (up to
    /// `maxBytes`; the remainder is kept for the next read); nil once the peer closed the channel.
    /// Throws `.invalidArgument` for `maxBytes` ≤ 0, `.protocolError` for a packet over the
    /// receive MTU, and the socket's errors. One read at a time.
    public func read(maxBytes: Int) async throws -> [UInt8]? {
        guard maxBytes > 0 else { throw PeerSyncError(.invalidArgument, "read(maxBytes:) needs maxBytes > 0") }
        if let rest = takePending(maxBytes) { return rest }
        // One byte more than the MTU, to tell a packet of exactly the MTU from a longer one.
        guard let packet = try await socket.receive(maxBytes: receiveMTU + 1) else { return nil }
        guard packet.count <= receiveMTU else {
            throw PeerSyncError(.protocolError, "the peer sent an L2CAP packet larger than the channel's receive MTU",
                                context: ["receiveMTU": "\(receiveMTU)", "address": remoteAddress ?? "?"])
        }
        if packet.count <= maxBytes { return packet }
        pending.withLock { $0 = packet[maxBytes...] }
        return Array(packet[..<maxBytes])
    }

    /// Up to `maxBytes` of the kept rest of a packet, or nil when nothing is kept.
    private func takePending(_ maxBytes: Int) -> [UInt8]? {
        pending.withLock { rest -> [UInt8]? in
            guard !rest.isEmpty else { return nil }
            let taken = rest.prefix(maxBytes)
            rest = rest.dropFirst(taken.count)
            return Array(taken)
        }
    }

    /// Sends `bytes` as packets of at most the fragment size, in order, suspending while the
    /// channel has no credits; throws the socket's errors (a closed or broken channel). One write
    /// at a time.
    public func write(_ bytes: [UInt8]) async throws {
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + fragmentSize, bytes.count)
            try await socket.send(Array(bytes[offset..<end]))
            offset = end
        }
    }

    public func shutdownOutput() async {
        socket.shutdownOutput()
    }

    /// Closes the channel's socket; pending reads and writes end. Idempotent.
    public func close() async {
        socket.close()
    }
}
