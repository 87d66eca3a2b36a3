// The one place where OpenSSL's return codes and error queue become typed `PeerSyncError`s.
//
// The files of this folder are PeerSyncAuth's only OpenSSL code: owned handles (`X509Handle`,
// `PrivateKey`, `MemoryBIO`, `X509Stack`, `SSLContext`, `SSLHandle`, ...) and small Swift
// methods. Every call whose result can signal failure is checked with `OpenSSL.check`, or
// turned into an error with `OpenSSL.error` when the caller already knows it failed.
internal import COpenSSL
import PeerSyncCore

/// One entry of OpenSSL's per-thread error queue, as Swift values.
struct OpenSSLError: Sendable, Hashable {
    /// OpenSSL's library number (`ERR_GET_LIB`).
    let library: Int32
    /// OpenSSL's reason number within the library (`ERR_GET_REASON`).
    let reason: Int32
    /// OpenSSL's reason string, e.g. `header too long`; empty when it has none.
    let reasonText: String
    /// OpenSSL's whole line, e.g. `error:0680007B:asn1 encoding routines::header too long`.
    let text: String

    /// True when the TLS library (libssl) raised it, rather than libcrypto.
    var isFromTLSLibrary: Bool { library == ERR_LIB_SSL }

    /// The TLS alert the peer sent, when this entry reports one (RFC 8446 §6 numbers).
    var receivedTLSAlert: Int32? {
        let offset = Int32(SSL_AD_REASON_OFFSET)
        guard isFromTLSLibrary, reason > offset, reason < offset + 256 else { return nil }
        return reason - offset
    }

    /// True when a TLS server required a client certificate and the client sent none.
    var isMissingPeerCertificate: Bool {
        isFromTLSLibrary && reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE
    }
}

/// Error checking for OpenSSL calls.
///
/// OpenSSL keeps its error queue per thread: a call and the check of its result happen in the
/// same synchronous stretch of code (never across an `await`). The wrappers clear the queue
/// before a call whose failure they inspect, and every error built here drains it, so one
/// failure never leaks into the next call's error.
enum OpenSSL {
    /// Empties the calling thread's error queue, returning its entries (oldest first).
    static func drainErrors() -> [OpenSSLError] {
        var out: [OpenSSLError] = []
        while true {
            let e = ERR_get_error()
            if e == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(e, &buffer, buffer.count)
            let text = buffer.withUnsafeBufferPointer { ptr in
                String(decoding: UnsafeRawBufferPointer(ptr).prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            let reasonText = ERR_reason_error_string(e).map { String(cString: $0) } ?? ""
            out.append(OpenSSLError(library: peersync_ERR_GET_LIB(e), reason: peersync_ERR_GET_REASON(e),
                                    reasonText: reasonText, text: text))
        }
        return out
    }

    /// Discards stale entries before a call whose failure will be inspected.
    static func clearErrors() { ERR_clear_error() }

    /// The error for a failed OpenSSL operation — the one function that turns OpenSSL's error
    /// queue into a ``PeerSyncError``.
    ///
    /// The cause is the newest entry of `queued` (default: the calling thread's queue, which is
    /// drained). The message is `what`, followed by `": "` and OpenSSL's reason string unless
    /// `what` already contains it; the context gets OpenSSL's whole line under `openssl`.
    /// With an empty queue the error is `what` alone.
    static func error(_ code: PeerSyncError.Code, _ what: String, context: [String: String] = [:],
                      queued: [OpenSSLError]? = nil) -> PeerSyncError {
        let entries = queued ?? drainErrors()
        var ctx = context
        var message = what
        if let cause = entries.last {
            ctx["openssl"] = cause.text
            if !cause.reasonText.isEmpty, !what.contains(cause.reasonText) {
                message += ": " + cause.reasonText
            }
        }
        return PeerSyncError(code, message, context: ctx)
    }

    /// Checks an `int` result: success when `succeeded(rc)` (default: `rc == 1`, OpenSSL's
    /// usual convention); otherwise throws ``error(_:_:context:queued:)`` with `code`.
    @discardableResult
    static func check(_ rc: Int32, _ what: @autoclosure () -> String, code: PeerSyncError.Code = .cryptoFailure,
                      succeeded: (Int32) -> Bool = { $0 == 1 }) throws(PeerSyncError) -> Int32 {
        if succeeded(rc) { return rc }
        throw error(code, what())
    }

    /// Checks a pointer result: throws ``error(_:_:context:queued:)`` with `code` when it is NULL.
    @discardableResult
    static func check<T>(_ pointer: T?, _ what: @autoclosure () -> String,
                         code: PeerSyncError.Code = .cryptoFailure) throws(PeerSyncError) -> T {
        if let pointer { return pointer }
        throw error(code, what())
    }
}
