import Foundation
import PeerSyncCore

// Certificate attribute keys (Couchbase Lite's `certAttr...` constants) for
// `TLSIdentity.createIdentity(for:attributes:...)`. The first group goes into the subject
// name, the second into the subject alternative name extension.

/// Common name (CN). Required.
public let certAttrCommonName = "CN"
/// Pseudonym.
public let certAttrPseudonym = "pseudonym"
/// Given name (GN).
public let certAttrGivenName = "GN"
/// Surname (SN).
public let certAttrSurname = "SN"
/// Organization (O).
public let certAttrOrganization = "O"
/// Organizational unit (OU).
public let certAttrOrganizationUnit = "OU"
/// Postal address.
public let certAttrPostalAddress = "postalAddress"
/// Locality (L), e.g. a city.
public let certAttrLocality = "locality"
/// Postal code.
public let certAttrPostalCode = "postalCode"
/// State or province (ST).
public let certAttrStateOrProvince = "ST"
/// Country (C), a two-letter ISO 3166 code.
public let certAttrCountry = "C"
/// E-mail address (subject alternative name `email:`).
public let certAttrEmailAddress = "rfc822Name"
/// DNS host name (subject alternative name `DNS:`); TLS clients check it against the host.
public let certAttrHostname = "dNSName"
/// URL (subject alternative name `URI:`).
public let certAttrURL = "uniformResourceIdentifier"
/// IPv4 or IPv6 address (subject alternative name `IP:`).
public let certAttrIPAddress = "iPAddress"

/// The key algorithm of a new identity.
public enum KeyType: Sendable, Hashable {
    /// ECDSA on NIST P-256 (the default: small, fast, universally supported by TLS 1.2/1.3).
    case p256
    /// RSA with the given modulus size (2048...8192).
    case rsa(bits: Int)
}

/// A certificate chain and its private key: what a TLS endpoint presents to its peer
/// (Couchbase Lite's `TLSIdentity`).
///
/// ``certs`` is leaf first, followed by the issuers (CA-issued identities carry their issuer
/// chain, so peers that trust the root can build the path). The private key never leaves the
/// value except through ``privateKeyPEM(password:)`` and `exportPKCS12(password:)`.
/// Values are immutable and thread-safe.
public struct TLSIdentity: Sendable {
    /// The certificate chain, leaf first.
    public let certs: [Certificate]
    let privateKey: PrivateKey

    /// The leaf certificate.
    public var certificate: Certificate { certs[0] }
    /// When the leaf certificate expires.
    public var expiration: Date { certificate.notAfter }
    /// The peer ID: hexadecimal SHA-256 of the leaf certificate.
    public var peerID: String { certificate.peerID }

    init(certs: [Certificate], privateKey: PrivateKey) {
        self.certs = certs
        self.privateKey = privateKey
    }

    // MARK: Creation

    /// The default lifetime of a new identity when `expiration` is nil: 365 days.
    public static let defaultLifetime: TimeInterval = 365 * 24 * 3600

    /// Creates an identity with a new key pair: self-signed, or signed by `issuer`.
    ///
    /// - Parameters:
    ///   - keyUsages: `.serverAuth`, `.clientAuth` or both (mesh peers need both). Must not be empty.
    ///   - attributes: subject attributes keyed by the `certAttr...` constants;
    ///     ``certAttrCommonName`` is required. Unknown keys are an error.
    ///   - expiration: end of validity; default ``defaultLifetime`` from now.
    ///   - issuer: a CA identity (see ``createIssuer(attributes:expiration:issuer:notBefore:keyType:)``)
    ///     that signs the new certificate; `nil` makes it self-signed.
    ///   - notBefore: start of validity; default 60 seconds ago (tolerates clock skew).
    ///   - keyType: default ``KeyType/p256``.
    /// - Throws: `PeerSyncError.Code.invalidArgument` for bad attributes, dates or issuer;
    ///   `PeerSyncError.Code.cryptoFailure` if OpenSSL fails.
    public static func createIdentity(for keyUsages: KeyUsages, attributes: [String: String],
                                      expiration: Date? = nil, issuer: TLSIdentity? = nil,
                                      notBefore: Date? = nil, keyType: KeyType = .p256) throws(PeerSyncError) -> TLSIdentity {
        guard !keyUsages.isEmpty else {
            throw PeerSyncError(.invalidArgument, "an identity needs at least one key usage (server, client or both)")
        }
        return try build(usages: keyUsages, isCA: false, attributes: attributes, expiration: expiration,
                         issuer: issuer, notBefore: notBefore, keyType: keyType)
    }

    /// Creates a certificate authority identity (basicConstraints `CA:TRUE`, key usage
    /// `keyCertSign`): self-signed (a root) or, with `issuer`, an intermediate CA. Use it as
    /// the `issuer` of ``createIdentity(for:attributes:expiration:issuer:notBefore:keyType:)``
    /// and give its certificate to peers as a trusted root.
    public static func createIssuer(attributes: [String: String], expiration: Date? = nil,
                                    issuer: TLSIdentity? = nil, notBefore: Date? = nil,
                                    keyType: KeyType = .p256) throws(PeerSyncError) -> TLSIdentity {
        try build(usages: [], isCA: true, attributes: attributes, expiration: expiration,
                  issuer: issuer, notBefore: notBefore, keyType: keyType)
    }

    private static let subjectKeys: [String: String] = [
        certAttrCommonName: "CN", certAttrPseudonym: "pseudonym", certAttrGivenName: "GN",
        certAttrSurname: "SN", certAttrOrganization: "O", certAttrOrganizationUnit: "OU",
        certAttrPostalAddress: "postalAddress", certAttrLocality: "L", certAttrPostalCode: "postalCode",
        certAttrStateOrProvince: "ST", certAttrCountry: "C",
    ]
    private static let altNameKeys: [String: String] = [
        certAttrEmailAddress: "email", certAttrHostname: "DNS", certAttrURL: "URI", certAttrIPAddress: "IP",
    ]
    /// Subject fields in a stable order.
    private static let subjectOrder = [certAttrCountry, certAttrStateOrProvince, certAttrLocality,
                                       certAttrPostalCode, certAttrPostalAddress, certAttrOrganization,
                                       certAttrOrganizationUnit, certAttrSurname, certAttrGivenName,
                                       certAttrPseudonym, certAttrCommonName]

    private static func build(usages: KeyUsages, isCA: Bool, attributes: [String: String], expiration: Date?,
                              issuer: TLSIdentity?, notBefore: Date?, keyType: KeyType) throws(PeerSyncError) -> TLSIdentity {
        // Validate input before any OpenSSL work.
        for key in attributes.keys where subjectKeys[key] == nil && altNameKeys[key] == nil {
            throw PeerSyncError(.invalidArgument, "unknown certificate attribute '\(key)'")
        }
        guard let cn = attributes[certAttrCommonName], !cn.isEmpty else {
            throw PeerSyncError(.invalidArgument, "certificate attributes need a common name (certAttrCommonName)")
        }
        for (key, value) in attributes {
            guard !value.isEmpty, value.utf8.count <= 1024 else {
                throw PeerSyncError(.invalidArgument, "certificate attribute '\(key)' is empty or too long")
            }
            if altNameKeys[key] != nil, value.contains(where: { $0 == "," || $0.isNewline || $0 == "\0" }) {
                throw PeerSyncError(.invalidArgument, "certificate attribute '\(key)' must not contain commas or line breaks")
            }
            if key == certAttrIPAddress, !IPAddress.isLiteral(value) {
                throw PeerSyncError(.invalidArgument, "'\(value)' is not an IP address")
            }
            if key == certAttrCountry, value.utf8.count != 2 {
                throw PeerSyncError(.invalidArgument, "the country attribute must be a two-letter code")
            }
        }
        let start = notBefore ?? Date(timeIntervalSinceNow: -60)
        let end = expiration ?? Date(timeIntervalSinceNow: defaultLifetime)
        guard end > start else {
            throw PeerSyncError(.invalidArgument, "expiration must be later than the start of validity")
        }
        if let issuer {
            guard issuer.certificate.isCertificateAuthority else {
                throw PeerSyncError(.invalidArgument, "the issuer identity is not a certificate authority",
                                    context: ["issuer": issuer.certificate.subjectName])
            }
        }

        let key = try PrivateKey.generate(keyType)
        let builder = try X509Builder()
        // Serial: 128 random bits, positive.
        var serialBytes = try randomBytes(16)
        serialBytes[0] = (serialBytes[0] & 0x7F) | 0x01
        try builder.setSerialNumber(serialBytes)
        try builder.setValidity(notBefore: start, notAfter: end)
        for attr in subjectOrder {
            guard let value = attributes[attr], let field = subjectKeys[attr] else { continue }
            try builder.addSubjectEntry(field: field, value: value, attribute: attr)
        }
        try builder.setPublicKey(key)
        try builder.setIssuer(try issuer?.certificate.handle())

        var extensions: [(X509ExtensionKind, String)] = []
        if isCA {
            extensions.append((.basicConstraints, "critical,CA:TRUE"))
            extensions.append((.keyUsage, "critical,keyCertSign,cRLSign,digitalSignature"))
        } else {
            extensions.append((.basicConstraints, "critical,CA:FALSE"))
            extensions.append((.keyUsage, key.isRSA ? "critical,digitalSignature,keyEncipherment"
                                                    : "critical,digitalSignature"))
            var eku: [String] = []
            if usages.contains(.serverAuth) { eku.append("serverAuth") }
            if usages.contains(.clientAuth) { eku.append("clientAuth") }
            extensions.append((.extendedKeyUsage, eku.joined(separator: ",")))
        }
        extensions.append((.subjectKeyIdentifier, "hash"))
        if issuer != nil { extensions.append((.authorityKeyIdentifier, "keyid:always")) }
        let altNames = altNameKeys.keys.sorted().compactMap { attr -> String? in
            guard let value = attributes[attr], let prefix = altNameKeys[attr] else { return nil }
            return "\(prefix):\(value)"
        }
        if !altNames.isEmpty { extensions.append((.subjectAlternativeName, altNames.joined(separator: ","))) }
        for (kind, value) in extensions {
            try builder.addExtension(kind, value)
        }

        let leaf = try Certificate(handle: try builder.sign(with: issuer?.privateKey ?? key))
        return TLSIdentity(certs: [leaf] + (issuer?.certs ?? []), privateKey: key)
    }

    // MARK: Import

    /// Builds an identity from certificates and a PEM private key (PKCS#8, encrypted PKCS#8
    /// or traditional EC/RSA). The certificate matching the key becomes the leaf; the others
    /// are ordered leaf → root as far as their names allow.
    /// - Throws: `PeerSyncError.Code.invalidCertificate` when no certificate matches the key,
    ///   `PeerSyncError.Code.wrongPassword` when the key cannot be decrypted.
    public init(certificates: [Certificate], privateKeyPEM: String, password: String? = nil) throws(PeerSyncError) {
        let key = try PrivateKey.fromPEM(privateKeyPEM, password: password)
        self = try TLSIdentity.assemble(certificates: certificates, key: key)
    }

    /// Imports an identity from PKCS#12 bytes (password-protected) or from PEM text holding
    /// the certificate chain and the private key (encrypted with `password`, or not). The
    /// format is detected from the bytes (Couchbase Lite's `importIdentity(withData:password:)`).
    public static func importIdentity(withData data: [UInt8], password: String?) throws(PeerSyncError) -> TLSIdentity {
        let prefix = data.prefix(64).drop(while: { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 })
        if prefix.starts(with: Array("-----BEGIN".utf8)) {
            guard let text = String(validating: data, as: UTF8.self) else {
                throw PeerSyncError(.invalidCertificate, "PEM text is not valid UTF-8")
            }
            let certificates = try Certificate.certificates(fromPEM: text)
            return try TLSIdentity(certificates: certificates, privateKeyPEM: text, password: password)
        }
        return try importPKCS12(data, password: password ?? "")
    }

    private static func importPKCS12(_ data: [UInt8], password: String) throws(PeerSyncError) -> TLSIdentity {
        guard !data.isEmpty, data.count < 16 << 20 else {
            throw PeerSyncError(.invalidCertificate, "PKCS#12 data is empty or larger than 16 MiB")
        }
        let contents = try PKCS12File.parse(data, password: password)
        guard let key = contents.key else { throw PeerSyncError(.invalidCertificate, "the PKCS#12 file holds no private key") }
        var certificates: [Certificate] = []
        for handle in contents.certificates { certificates.append(try Certificate(handle: handle)) }
        return try assemble(certificates: certificates, key: key)
    }

    private static func assemble(certificates: [Certificate], key: PrivateKey) throws(PeerSyncError) -> TLSIdentity {
        var leafIndex: Int? = nil
        for (i, cert) in certificates.enumerated() where key.matches(try cert.handle()) {
            leafIndex = i
            break
        }
        guard let leafIndex else {
            throw PeerSyncError(.invalidCertificate, certificates.isEmpty ? "no certificate was given with the private key"
                                                                          : "no certificate matches the private key")
        }
        var remaining = certificates
        var chain = [remaining.remove(at: leafIndex)]
        // Follow issuer names leaf → root; unrelated extra certificates are kept at the end.
        while let last = chain.last, !last.isSelfSigned,
              let next = remaining.firstIndex(where: { $0.subjectName == last.issuerName }) {
            chain.append(remaining.remove(at: next))
        }
        var seen = Set<Certificate>()
        chain = (chain + remaining).filter { seen.insert($0).inserted }
        return TLSIdentity(certs: chain, privateKey: key)
    }

    // MARK: Export

    /// The certificate chain as PEM text (leaf first). Never includes the private key.
    public func certificatesPEM() -> String { certs.map(\.pemString).joined() }

    /// The private key as PKCS#8 PEM, encrypted with AES-256-CBC under `password`
    /// (PBES2/PBKDF2-HMAC-SHA256). `nil` writes it unencrypted: handle such text like a password.
    public func privateKeyPEM(password: String?) throws(PeerSyncError) -> String {
        try privateKey.pem(password: password)
    }

    /// A PKCS#12 file with the key and the whole chain, protected by `password`
    /// (OpenSSL 3 defaults: AES-256-CBC, PBKDF2, HMAC-SHA256 MAC). `friendlyName` labels the
    /// key bag (default: the leaf's common name).
    public func exportPKCS12(password: String, friendlyName: String? = nil) throws(PeerSyncError) -> [UInt8] {
        guard !password.isEmpty else {
            throw PeerSyncError(.invalidArgument, "a PKCS#12 export needs a non-empty password")
        }
        let chain = try chainHandles()
        return try PKCS12File.create(password: password, friendlyName: friendlyName ?? certificate.commonName ?? "identity",
                                     key: privateKey, leaf: chain.leaf, extras: chain.issuers)
    }

    /// Writes ``exportPKCS12(password:friendlyName:)``'s file to `path`, replacing any file
    /// there: created with mode `0600` (readable by the owner only), written to a temporary
    /// file and renamed into place, so no reader ever sees a partial file. A synchronous
    /// file-system call.
    /// - Throws: as ``exportPKCS12(password:friendlyName:)``; `PeerSyncError.Code.io` when
    ///   the file cannot be written.
    public func exportPKCS12(toFile path: String, password: String, friendlyName: String? = nil) throws(PeerSyncError) {
        let bytes = try exportPKCS12(password: password, friendlyName: friendlyName)
        try FileIO.writeAtomically(bytes, to: path)
    }

    /// OpenSSL handles for the chain: the leaf and the certificates after it.
    func chainHandles() throws(PeerSyncError) -> (leaf: X509Handle, issuers: [X509Handle]) {
        var issuers: [X509Handle] = []
        for cert in certs.dropFirst() { issuers.append(try cert.handle()) }
        return (try certificate.handle(), issuers)
    }
}
