/// One whole message on a ``MessageConnection``: binary or UTF-8 text, as in WebSocket.
///
/// Transports deliver messages whole and in order; they never split or merge them.
public enum TransportMessage: Sendable, Hashable {
    /// A binary message.
    case binary([UInt8])
    /// A text message (UTF-8 on the wire).
    case text(String)

    /// The payload size in bytes (UTF-8 bytes for text). This is the size that is compared with
    /// ``MessageConnection/maxMessageSize`` and counted against queue limits.
    public var byteCount: Int {
        switch self {
        case .binary(let bytes): bytes.count
        case .text(let string): string.utf8.count
        }
    }

    /// Whether this is a text message.
    public var isText: Bool {
        if case .text = self { return true }
        return false
    }

    /// The payload as bytes (UTF-8 for text).
    public var bytes: [UInt8] {
        switch self {
        case .binary(let bytes): bytes
        case .text(let string): Array(string.utf8)
        }
    }

    /// The text of a text message, `nil` for binary messages.
    public var text: String? {
        if case .text(let string) = self { return string }
        return nil
    }
}

extension TransportMessage: CustomStringConvertible {
    /// `binary(12 bytes)` or `text(5 bytes)`: the size, never the payload (which may be secret).
    public var description: String {
        "\(isText ? "text" : "binary")(\(byteCount) bytes)"
    }
}
