// The error codes of PeerSyncWebSocketCodec (HTTP/1.1 and RFC 6455 decoding and handshakes).

import PeerSyncCore

extension PeerSyncError.Code {
    /// A WebSocket text message or close reason that is not valid UTF-8 (close code 1007).
    public static let invalidUTF8 = Self(rawValue: "invalidUTF8")
    /// A malformed HTTP/1.1 message (HTTP status 400 on the server side).
    public static let malformedHTTP = Self(rawValue: "malformedHTTP")
    /// An HTTP header block larger than the configured limit (HTTP status 431).
    public static let httpHeadersTooLarge = Self(rawValue: "httpHeadersTooLarge")
    /// An HTTP version other than 1.0 / 1.1 (HTTP status 505).
    public static let httpVersionNotSupported = Self(rawValue: "httpVersionNotSupported")
    /// An HTTP request using a feature this server does not implement, e.g. a transfer coding
    /// other than `chunked` (HTTP status 501).
    public static let httpNotImplemented = Self(rawValue: "httpNotImplemented")
    /// The WebSocket opening handshake failed: the server answered with a status other than
    /// 101, or the 101 answer is invalid (missing or wrong `Sec-WebSocket-Accept`, ...).
    /// `context["status"]` holds the HTTP status when there was one.
    public static let webSocketHandshakeFailed = Self(rawValue: "webSocketHandshakeFailed")
    /// The client asked for subprotocols and the server accepted none of them (or chose one
    /// the client did not offer).
    public static let webSocketSubprotocolRejected = Self(rawValue: "webSocketSubprotocolRejected")
    /// The server answered `401 Unauthorized` and no credentials were configured, or the
    /// retry with credentials was refused again.
    public static let webSocketUnauthorized = Self(rawValue: "webSocketUnauthorized")
}
