internal import COpenSSL
import PeerSyncCore

/// The decisions OpenSSL asks for during a handshake, made outside the wrapper layer (by
/// ``TrustSession``). Called synchronously from OpenSSL's callbacks, on the thread running the
/// handshake step.
protocol TLSHandshakeDelegate: AnyObject, Sendable {
    /// Judges the peer's certificate: `leaf` (nil when the peer sent none) and `presented`,
    /// every certificate the peer sent (the leaf included), in order. Returns
    /// ``X509VerificationCode/ok`` to trust it, or the verification error OpenSSL reports to
    /// the peer (it picks the TLS alert from it).
    func verifyPeer(leaf: X509Handle?, presented: [X509Handle]) -> X509VerificationCode

    /// A client without a certificate learns that the server asked for one.
    func serverRequestedClientCertificate()
}

/// Holds the delegate for the SSL's app data (ex_data index 0), which stores one pointer.
final class HandshakeDelegateBox {
    let delegate: any TLSHandshakeDelegate
    init(_ delegate: any TLSHandshakeDelegate) { self.delegate = delegate }

    /// The box stored in `ssl`'s app data, if any.
    static func of(_ ssl: OpaquePointer) -> HandshakeDelegateBox? {
        SSL_get_ex_data(ssl, 0).map { Unmanaged<HandshakeDelegateBox>.fromOpaque($0).takeUnretainedValue() }
    }
}

/// OpenSSL's `SSL_CTX_set_cert_verify_callback` hook: finds the connection's delegate through
/// the SSL object's app data and lets it decide. A file-scope function (no captures), as C
/// callbacks must be.
func certificateVerifyCallback(_ storeContext: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
    guard let storeContext else { return 0 }
    guard let ssl = X509_STORE_CTX_get_ex_data(storeContext, SSL_get_ex_data_X509_STORE_CTX_idx()),
          let box = HandshakeDelegateBox.of(OpaquePointer(ssl)) else {
        X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
        return 0
    }
    let leaf = X509_STORE_CTX_get0_cert(storeContext).map(X509Handle.init(retaining:))
    let presented = X509Stack.handles(of: X509_STORE_CTX_get0_untrusted(storeContext))
    let verdict = box.delegate.verifyPeer(leaf: leaf, presented: presented)
    X509_STORE_CTX_set_error(storeContext, verdict.rawValue)
    return verdict.isOK ? 1 : 0
}

/// OpenSSL's `SSL_CTX_set_client_cert_cb` hook, installed on clients without an identity:
/// it is called only when the server requests a certificate. It tells the delegate and
/// supplies no certificate.
func clientCertificateRequestedCallback(_ ssl: OpaquePointer?, _ certificate: UnsafeMutablePointer<OpaquePointer?>?,
                                        _ key: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    if let ssl, let box = HandshakeDelegateBox.of(ssl) {
        box.delegate.serverRequestedClientCertificate()
    }
    return 0
}
