/// A connection close status code. The numbers are those of RFC 6455 §7.4 (WebSocket), which
/// every PeerSync transport uses, so a replicator sees the same codes over any link.
/// Applications may use 4000–4999 for their own meanings.
public struct CloseCode: RawRepresentable, Sendable, Hashable, ExpressibleByIntegerLiteral,
    CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(integerLiteral value: UInt16) { self.rawValue = value }

    /// 1000: the purpose of the connection is fulfilled.
    public static let normal = CloseCode(rawValue: 1000)
    /// 1001: the endpoint is going away (server shutdown, app closing, listener closed).
    public static let goingAway = CloseCode(rawValue: 1001)
    /// 1002: the peer broke the protocol.
    public static let protocolError = CloseCode(rawValue: 1002)
    /// 1003: a message of a type that cannot be accepted (e.g. text where only binary is).
    public static let unsupportedData = CloseCode(rawValue: 1003)
    /// 1005: no status code was present in the peer's close. Never sent.
    public static let noStatusReceived = CloseCode(rawValue: 1005)
    /// 1006: the connection ended without a close handshake (peer vanished, link broke). Never
    /// sent; reported locally in ``CloseInfo``.
    public static let abnormalClosure = CloseCode(rawValue: 1006)
    /// 1007: a message's payload was inconsistent with its type (e.g. invalid UTF-8 text).
    public static let invalidPayload = CloseCode(rawValue: 1007)
    /// 1008: a message violated the receiver's policy.
    public static let policyViolation = CloseCode(rawValue: 1008)
    /// 1009: a message was larger than the receiver accepts.
    public static let messageTooBig = CloseCode(rawValue: 1009)
    /// 1010: the client expected an extension the server did not negotiate.
    public static let mandatoryExtension = CloseCode(rawValue: 1010)
    /// 1011: the peer hit an unexpected condition.
    public static let internalError = CloseCode(rawValue: 1011)
    /// 1015: the TLS handshake failed. Never sent.
    public static let tlsHandshakeFailure = CloseCode(rawValue: 1015)

    /// Whether this code may be sent in a close message (RFC 6455 §7.4.1–7.4.2): 1000–1003,
    /// 1007–1011 (and 1012–1014, registered later), 3000–4999. Transports replace a code that
    /// may not be sent with ``normal`` when asked to close with it.
    public var isSendable: Bool {
        switch rawValue {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }

    public var description: String {
        let names: [UInt16: String] = [1000: "normal", 1001: "goingAway", 1002: "protocolError",
                                       1003: "unsupportedData", 1005: "noStatusReceived",
                                       1006: "abnormalClosure", 1007: "invalidPayload",
                                       1008: "policyViolation", 1009: "messageTooBig",
                                       1010: "mandatoryExtension", 1011: "internalError",
                                       1015: "tlsHandshakeFailure"]
        if let name = names[rawValue] { return "\(rawValue) (\(name))" }
        return "\(rawValue)"
    }
}

/// How a connection ended: the close code and reason. See ``MessageConnection/closeInfo``.
public struct CloseInfo: Sendable, Hashable, CustomStringConvertible {
    /// The close code. ``CloseCode/abnormalClosure`` when the connection broke without a close
    /// handshake.
    public var code: CloseCode
    /// The reason text, at most ``maxReasonBytes`` UTF-8 bytes.
    public var reason: String

    /// The longest reason, in UTF-8 bytes, a close can carry (a WebSocket control frame holds 125
    /// bytes, 2 of which are the code). Every transport truncates longer reasons to this.
    public static let maxReasonBytes = 123

    /// Creates close info. `reason` is truncated with ``truncatedReason(_:)``.
    public init(code: CloseCode, reason: String = "") {
        self.code = code
        self.reason = CloseInfo.truncatedReason(reason)
    }

    /// Whether the connection ended with a close handshake (any code but
    /// ``CloseCode/abnormalClosure``).
    public var wasClean: Bool { code != .abnormalClosure }

    /// `reason` cut to at most ``maxReasonBytes`` UTF-8 bytes, at a character boundary.
    public static func truncatedReason(_ reason: String) -> String {
        if reason.utf8.count <= maxReasonBytes { return reason }
        var result = ""
        var bytes = 0
        for character in reason {
            let size = character.utf8.count
            if bytes + size > maxReasonBytes { break }
            result.append(character)
            bytes += size
        }
        return result
    }

    public var description: String {
        reason.isEmpty ? "\(code)" : "\(code): \(reason)"
    }
}
