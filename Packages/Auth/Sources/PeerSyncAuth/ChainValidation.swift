import PeerSyncCore

extension Certificate {
    /// Validates a peer's certificate chain (leaf first) outside a TLS handshake, exactly as a
    /// listener validates a client certificate with ``ClientCertificateValidation/roots(_:)``:
    /// X.509 path validation to one of `roots` (each a trust anchor; the other certificates of
    /// `chain` may be intermediates), the validity period, and client-auth usage. For callers
    /// whose transport hands them the chain to judge (the mesh's `MeshLinkContext.authenticate`).
    ///
    /// Returns nil when the chain is trusted, else the failure (`PeerSyncError.Code.untrustedCertificate`
    /// with a `PeerSyncError.trustFailure` reason, e.g. `.unknownCA`, `.expired`,
    /// `.noCertificate`). Pure: any thread, no I/O.
    public static func validationFailure(ofChain chain: [Certificate], roots: [Certificate]) -> PeerSyncError? {
        guard let leaf = chain.first else {
            return .untrusted(.noCertificate, "the peer presented no certificate", context: [:])
        }
        do throws(PeerSyncError) {
            let leafHandle = try leaf.handle()
            var untrusted: [X509Handle] = []
            for certificate in chain { untrusted.append(try certificate.handle()) }
            return TrustEvaluator.evaluate(chain: chain, leaf: leafHandle, untrusted: untrusted,
                                           mode: .client(.roots(roots))).failure
        } catch {
            return error
        }
    }
}
