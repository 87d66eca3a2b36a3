internal import COpenSSL
import PeerSyncCore

/// An owned `SSL_CTX*`, freed in `deinit`: the settings one ``SSLHandle`` is created from.
///
/// Used by one thread while it is configured and the `SSL` is created (the `SSL` keeps its
/// own reference), so it needs no lock. Methods throw ``PeerSyncError/Code/cryptoFailure``
/// when OpenSSL fails, except where they say otherwise.
final class SSLContext {
    let pointer: OpaquePointer

    /// A context for `role` with PeerSync's fixed options: no renegotiation, no compression,
    /// the server's cipher preference, no session tickets.
    init(role: TLSConfiguration.Role) throws(PeerSyncError) {
        OpenSSL.clearErrors()
        let method = role == .client ? TLS_client_method() : TLS_server_method()
        pointer = try OpenSSL.check(SSL_CTX_new(method), "SSL_CTX_new")
        _ = SSL_CTX_set_options(pointer, peersync_ssl_default_options())
    }

    deinit { SSL_CTX_free(pointer) }

    /// Limits the protocol versions that may be negotiated.
    func setProtocolVersions(minimum: TLSVersion, maximum: TLSVersion) throws(PeerSyncError) {
        try OpenSSL.check(Int32(peersync_SSL_CTX_set_min_proto_version(pointer, Int32(minimum.rawValue))),
                          "SSL_CTX_set_min_proto_version")
        try OpenSSL.check(Int32(peersync_SSL_CTX_set_max_proto_version(pointer, Int32(maximum.rawValue))),
                          "SSL_CTX_set_max_proto_version")
    }

    /// Turns off session caching and TLS 1.3 tickets: every connection runs a full handshake.
    func disableSessionResumption() throws(PeerSyncError) {
        _ = peersync_SSL_CTX_set_session_cache_off(pointer)
        try OpenSSL.check(SSL_CTX_set_num_tickets(pointer, 0), "SSL_CTX_set_num_tickets")
    }

    /// Presents `leaf` (with `chain`, its issuers) and proves possession of `key`.
    /// - Throws: ``PeerSyncError/Code/invalidCertificate`` when OpenSSL refuses the pair
    ///   (e.g. the key does not match the certificate).
    func useIdentity(leaf: X509Handle, key: PrivateKey, chain: [X509Handle]) throws(PeerSyncError) {
        let stack = try X509Stack(chain)
        try OpenSSL.check(SSL_CTX_use_cert_and_key(pointer, leaf.pointer, key.pointer, stack.pointer, 1),
                          "the identity's certificate and key cannot be used for TLS", code: .invalidCertificate)
    }

    /// Verifies the peer's certificate with the connection's ``TLSHandshakeDelegate`` (not
    /// with OpenSSL's own checks). `requireCertificate` (servers): a client without one fails
    /// the handshake; a server always asks for one then.
    func verifyPeerWithDelegate(requireCertificate: Bool) {
        let mode = requireCertificate ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER
        SSL_CTX_set_verify(pointer, mode, nil)
        SSL_CTX_set_cert_verify_callback(pointer, certificateVerifyCallback, nil)
    }

    /// Servers: asks clients for no certificate.
    func requestNoPeerCertificate() {
        SSL_CTX_set_verify(pointer, SSL_VERIFY_NONE, nil)
    }

    /// Clients without a certificate: tells the delegate when the server asks for one
    /// (``TLSHandshakeDelegate/serverRequestedClientCertificate()``) and sends none.
    func reportCertificateRequests() {
        SSL_CTX_set_client_cert_cb(pointer, clientCertificateRequestedCallback)
    }
}
