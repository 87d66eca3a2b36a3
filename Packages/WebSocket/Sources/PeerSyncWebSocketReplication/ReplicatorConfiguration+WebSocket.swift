import PeerSyncAuth
import PeerSyncReplicator

// The settings only the WebSocket connector reads, with Couchbase Lite's names, kept in the
// configuration's connector options so that PeerSyncReplicator knows nothing of TLS or HTTP.

enum PinnedServerCertificateOption: ReplicatorConnectorOptionKey {
    static let defaultValue: Certificate? = nil
}

enum AcceptOnlySelfSignedServerCertificateOption: ReplicatorConnectorOptionKey {
    static let defaultValue = ReplicatorConfiguration.defaultSelfSignedCertificateOnly
}

enum HeadersOption: ReplicatorConnectorOptionKey {
    static let defaultValue: [String: String]? = nil
}

enum NetworkInterfaceOption: ReplicatorConnectorOptionKey {
    static let defaultValue: String? = nil
}

extension ReplicatorConfiguration {
    /// The default of ``acceptOnlySelfSignedServerCertificate``: false (Couchbase Lite's
    /// `defaultSelfSignedCertificateOnly`).
    public static let defaultSelfSignedCertificateOnly = false

    /// The certificate the server must present (`wss://` only; Couchbase Lite's
    /// `pinnedServerCertificate`): the connection is refused unless the server's leaf
    /// certificate is exactly this one, whoever signed it. Wins over
    /// ``acceptOnlySelfSignedServerCertificate`` and the CA roots. Default nil.
    public var pinnedServerCertificate: Certificate? {
        get { connectorOptions[PinnedServerCertificateOption.self] }
        set { connectorOptions[PinnedServerCertificateOption.self] = newValue }
    }

    /// Accept only a self-signed server certificate (`wss://` only; Couchbase Lite's
    /// `acceptOnlySelfSignedServerCertificate`), as a listener with an anonymous identity
    /// presents; a CA-issued one is refused. Ignored when ``pinnedServerCertificate`` is set.
    /// Default ``defaultSelfSignedCertificateOnly`` (false): the server is verified against CA
    /// roots.
    public var acceptOnlySelfSignedServerCertificate: Bool {
        get { connectorOptions[AcceptOnlySelfSignedServerCertificateOption.self] }
        set { connectorOptions[AcceptOnlySelfSignedServerCertificateOption.self] = newValue }
    }

    /// Extra HTTP headers of the WebSocket upgrade request (Couchbase Lite's `headers`), sent
    /// in name order. An `Authorization` header is replaced by a `BasicAuthenticator`'s; a
    /// `SessionAuthenticator`'s cookie is appended to a `Cookie` header. Default nil: no extra
    /// header (an empty dictionary is the same).
    public var headers: [String: String]? {
        get { connectorOptions[HeadersOption.self] }
        set { connectorOptions[HeadersOption.self] = newValue }
    }

    /// The network interface to connect through (Couchbase Lite's `networkInterface`): a name
    /// such as `lo`/`eth0` or a local IP address. The client socket is bound to its address
    /// before connecting; an unknown interface stops the replicator with `.invalidArgument`.
    /// Default nil: the system chooses.
    public var networkInterface: String? {
        get { connectorOptions[NetworkInterfaceOption.self] }
        set { connectorOptions[NetworkInterfaceOption.self] = newValue }
    }
}
