import PeerSyncCore

/// A message-oriented, bidirectional, ordered, reliable connection to one peer: what every
/// transport (loopback, WebSocket, BLE, a user's own) produces, and what BLIP runs over.
///
/// Contract (checked by `PeerSyncTransportTesting.TransportConformanceSuite`):
///
/// **Sending.** ``send(_:)`` returns once the transport has accepted the message (buffered
/// within its bounded memory or handed to the link); that is not proof of delivery. It
/// suspends while the peer is not reading and the buffers are full (backpressure), so memory
/// stays bounded however fast a caller sends. Several tasks may send at once: every message
/// arrives whole, never interleaved with another; messages sent one after the other by one task
/// arrive in that order. A message larger than ``maxMessageSize`` throws
/// `PeerSyncError.Code.tooLarge` and the connection stays usable. After the connection closed
/// (either side, or the link broke) `send` throws `PeerSyncError.Code.connectionClosed`
/// (or `PeerSyncError.Code.connectionReset` if it broke). A send that is in progress when
/// the connection closes either completes or throws; it never hangs. A send cancelled while
/// suspended throws `PeerSyncError.Code.cancelled`; the message is then either not sent or
/// sent whole (never a fragment), and the connection stays usable.
///
/// **Receiving.** ``receive()`` returns the next message, suspending until one arrives. It
/// returns `nil` once the connection closed with a close handshake: after the peer's close
/// (all messages the peer sent before closing are received first) or after this side called
/// ``close(code:reason:)`` (messages not yet received are then discarded). It throws
/// `PeerSyncError.Code.connectionReset` (or another `PeerSyncError`) when the connection
/// broke without a close handshake — for example the peer vanished — after the messages that
/// fully arrived before. Once it returned `nil` or threw, it does so again on every call.
/// Several tasks may call it; each message goes to exactly one.
///
/// **Closing.** ``close(code:reason:)`` starts the close handshake: messages already accepted
/// by `send` go out first, then the close; the peer's `receive` returns `nil` and its
/// ``closeInfo`` holds this code and reason; the peer answers the close automatically. `close`
/// returns once the peer answered, or after a transport-specific timeout after which the link
/// is dropped; it is idempotent and safe to call concurrently with anything, including the
/// peer closing at the same time. Closing is never an error. Codes that may not be sent
/// (``CloseCode/isSendable`` false) are sent as ``CloseCode/normal``; reasons are truncated to
/// ``CloseInfo/maxReasonBytes`` UTF-8 bytes.
///
/// **Metadata** (``remoteAddress``, ``peerCertificateChain``, ``kind``, ``maxMessageSize``) is
/// fixed when the connection is made. Dropping the last reference to an open connection
/// drops the link without a close handshake (the peer sees `PeerSyncError.Code.connectionReset`).
public protocol MessageConnection: AnyObject, Sendable {
    /// Sends one message. See the type's contract for suspension, ordering and errors.
    func send(_ message: TransportMessage) async throws

    /// The next incoming message; `nil` after a clean close. See the type's contract.
    func receive() async throws -> TransportMessage?

    /// Closes the connection with a close handshake. Idempotent; never throws.
    func close(code: CloseCode, reason: String) async

    /// How the connection ended, once it has: the code and reason of the close that ended it
    /// (this side's own if this side closed first, the peer's if the peer did), or
    /// ``CloseCode/abnormalClosure`` with an explanation if it broke. `nil` while open.
    var closeInfo: CloseInfo? { get }

    /// The peer's address as text (`127.0.0.1:52114`, `[::1]:4984`, `loopback://peerA`), if known.
    var remoteAddress: String? { get }

    /// The peer's certificate chain, DER-encoded, leaf first; empty when the link has no TLS or
    /// the peer presented none.
    var peerCertificateChain: [[UInt8]] { get }

    /// Which kind of link this is.
    var kind: TransportKind { get }

    /// The largest message, in bytes, this connection sends and receives.
    var maxMessageSize: Int { get }
}

extension MessageConnection {
    /// The incoming messages as an `AsyncSequence` built on ``receive()``: it ends after a clean
    /// close and throws when the connection broke.
    public var messages: TransportMessageSequence { TransportMessageSequence(connection: self) }

    /// Sends a binary message.
    public func send(_ bytes: [UInt8]) async throws { try await send(.binary(bytes)) }

    /// Sends a text message.
    public func send(text: String) async throws { try await send(.text(text)) }

    /// Closes with ``CloseCode/normal`` and no reason.
    public func close() async { await close(code: .normal, reason: "") }

    /// Whether the connection has ended (``closeInfo`` is set).
    public var isClosed: Bool { closeInfo != nil }
}

/// The incoming messages of a ``MessageConnection``; see ``MessageConnection/messages``.
public struct TransportMessageSequence: AsyncSequence, Sendable {
    public typealias Element = TransportMessage
    public typealias Failure = any Error

    let connection: any MessageConnection

    public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
        let connection: any MessageConnection
        public mutating func next() async throws -> TransportMessage? { try await connection.receive() }
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(any Error) -> TransportMessage? {
            try await connection.receive()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(connection: connection) }
}
