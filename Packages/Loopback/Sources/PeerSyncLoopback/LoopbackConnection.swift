import PeerSyncCore
import PeerSyncTransport

/// One end of an in-process connection made by ``LoopbackTransport``. Keeps the
/// `MessageConnection` contract; see there for sending, receiving and closing.
///
/// Loopback specifics: ``kind`` is `TransportKind.loopback`; there is never a peer
/// certificate; ``close(code:reason:)`` waits at most the transport's `closeTimeout` for the
/// peer's answer, then drops the link. ``abort()`` drops the link at once, as a vanished peer
/// would. Releasing the last reference to an open connection also drops the link.
public final class LoopbackConnection: MessageConnection {
    let link: Link
    let side: Int

    /// The host name of this end (the connecting transport's ``LoopbackTransport/host``, or the
    /// listened endpoint's host).
    public let localHost: String
    /// The host name of the other end.
    public let remoteHost: String
    /// The endpoint the client asked for, path included (on both ends).
    public let requestedEndpoint: Endpoint
    public let remoteAddress: String?

    init(link: Link, side: Int, localHost: String, remoteHost: String, requestedEndpoint: Endpoint, remoteAddress: String) {
        self.link = link
        self.side = side
        self.localHost = localHost
        self.remoteHost = remoteHost
        self.requestedEndpoint = requestedEndpoint
        self.remoteAddress = remoteAddress
    }

    deinit {
        link.released(side)
    }

    public var kind: TransportKind { .loopback }
    public var peerCertificateChain: [[UInt8]] { [] }
    public var maxMessageSize: Int { link.maxMessageSize }
    public var closeInfo: CloseInfo? { link.ends[side].state.withLock { $0.closeInfo } }
    /// The conditions simulated on this connection's link.
    public var conditions: LinkConditions { link.conditions }

    public func send(_ message: TransportMessage) async throws {
        try await link.send(from: side, message)
    }

    public func receive() async throws -> TransportMessage? {
        try await link.receive(at: side)
    }

    public func close(code: CloseCode, reason: String) async {
        await link.close(from: side, code: code, reason: reason)
    }

    /// Drops the link without a close handshake, like a crashed peer or a pulled cable: both
    /// ends' pending and later operations fail with `PeerSyncError.Code.connectionReset`
    /// (after the messages they already received), and ``closeInfo`` becomes
    /// `CloseCode.abnormalClosure`. Does nothing on a connection that has ended.
    public func abort() {
        link.breakLink("the connection was aborted by \(side == 0 ? "the client" : "the server")")
    }
}
