// The codec's error codes and their WebSocket close code / HTTP status.
// Part of the pure codec module (no I/O; PeerSyncCore only), fuzzed by Tools/fuzz/run.

import PeerSyncCore

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
