// The codec's error codes and their WebSocket close code / HTTP status.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

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

extension PeerSyncError {
    /// The WebSocket close code that reports this decoding error to the peer:
    /// 1009 for `.tooLarge`, 1007 for `.invalidUTF8`, 1002 for every other protocol error.
    public var webSocketCloseCode: UInt16 {
        switch code {
        case .tooLarge: 1009
        case .invalidUTF8: 1007
        default: 1002
        }
    }

    /// The HTTP status that reports this parsing error to an HTTP client:
    /// 431 for oversized headers, 413 for an oversized body, 505 for a bad version, 501 for an
    /// unsupported feature, else 400.
    public var httpStatus: Int {
        switch code {
        case .httpHeadersTooLarge: 431
        case .tooLarge: 413
        case .httpVersionNotSupported: 505
        case .httpNotImplemented: 501
        default: 400
        }
    }
}
