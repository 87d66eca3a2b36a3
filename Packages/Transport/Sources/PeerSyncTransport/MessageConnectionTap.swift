/// A ``MessageConnection`` that shows every message it carries to an observer — for counting
/// bytes on the wire, tracing or tests — and otherwise forwards everything, unchanged, to the
/// connection it wraps.
///
/// ```swift
/// let tapped = MessageConnectionTap(connection, onSend: { sent += $0.byteCount })
/// ```
///
/// Contract: `onSend` runs after the wrapped connection accepted the message (a send that
/// throws is not reported); `onReceive` runs for each message received, before it is returned.
/// Both may run on any task, concurrently with each other, so they must be thread-safe and
/// quick (they run inline on the I/O path). Closing, close information, the peer's address
/// and certificates, the kind and the size limit are those of the wrapped connection.
public final class MessageConnectionTap: MessageConnection {
    /// The wrapped connection.
    public let base: any MessageConnection
    private let onSend: @Sendable (TransportMessage) -> Void
    private let onReceive: @Sendable (TransportMessage) -> Void

    /// Wraps `base`, calling `onSend` and `onReceive` (default: do nothing) as the type describes.
    public init(_ base: any MessageConnection,
                onSend: @escaping @Sendable (TransportMessage) -> Void = { _ in },
                onReceive: @escaping @Sendable (TransportMessage) -> Void = { _ in }) {
        self.base = base
        self.onSend = onSend
        self.onReceive = onReceive
    }

    public func send(_ message: TransportMessage) async throws {
        try await base.send(message)
        onSend(message)
    }

    public func receive() async throws -> TransportMessage? {
        let message = try await base.receive()
        if let message { onReceive(message) }
        return message
    }

    public func close(code: CloseCode, reason: String) async { await base.close(code: code, reason: reason) }
    public var closeInfo: CloseInfo? { base.closeInfo }
    public var remoteAddress: String? { base.remoteAddress }
    public var peerCertificateChain: [[UInt8]] { base.peerCertificateChain }
    public var kind: TransportKind { base.kind }
    public var maxMessageSize: Int { base.maxMessageSize }
}
