import Foundation
import PeerSyncCore

/// Extended key usages of a certificate (Couchbase Lite's `KeyUsages`): what a TLS peer may
/// use the certificate for. Mesh peers act as both client and server, so they need both.
public struct KeyUsages: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// TLS client authentication (`id-kp-clientAuth`).
    public static let clientAuth = KeyUsages(rawValue: 1 << 0)
    /// TLS server authentication (`id-kp-serverAuth`).
    public static let serverAuth = KeyUsages(rawValue: 1 << 1)

    public var description: String {
        switch self {
        case [.clientAuth, .serverAuth]: return "both"
        case .clientAuth: return "client"
        case .serverAuth: return "server"
        default: return "none"
        }
    }
}

/// A subject alternative name of a certificate.
public enum SubjectAlternativeName: Sendable, Hashable, CustomStringConvertible {
    /// A DNS host name (`DNS:`).
    case dnsName(String)
    /// Textual IPv4 or IPv6 address.
    case ipAddress(String)
    /// An e-mail address (`email:`).
    case email(String)
    /// A URI (`URI:`).
    case uri(String)

    public var description: String {
        switch self {
        case .dnsName(let v): return "DNS:\(v)"
        case .ipAddress(let v): return "IP:\(v)"
        case .email(let v): return "email:\(v)"
        case .uri(let v): return "URI:\(v)"
        }
    }
}

/// An X.509 certificate as a value: its DER bytes and the facts parsed from them.
///
/// Equality and hashing use the DER bytes. Creating one validates the encoding; bad input
/// throws `PeerSyncError.Code.invalidCertificate`. The SHA-256 digest of the DER encoding
/// is the certificate's ``peerID`` (Couchbase Lite's peer ID of a multipeer replicator).
public struct Certificate: Sendable, Hashable, CustomStringConvertible {
    /// The DER encoding.
    public let derBytes: [UInt8]
    /// The subject as an RFC 2253 string, e.g. `CN=alice,O=Example`.
    public let subjectName: String
    /// The issuer as an RFC 2253 string.
    public let issuerName: String
    /// The subject's common name (CN), if any.
    public let commonName: String?
    /// The issuer's common name (CN), if any.
    public let issuerCommonName: String?
    /// Start of the validity period.
    public let notBefore: Date
    /// End of the validity period (Couchbase Lite's identity `expiration`).
    public let notAfter: Date
    /// Subject alternative names (DNS names, IP addresses, e-mail addresses, URIs).
    public let subjectAlternativeNames: [SubjectAlternativeName]
    /// The serial number as uppercase hexadecimal.
    public let serialNumber: String
    /// True when issuer and subject are the same and the certificate's signature verifies
    /// with its own public key.
    public let isSelfSigned: Bool
    /// True when the certificate may sign other certificates (basicConstraints CA).
    public let isCertificateAuthority: Bool
    /// The TLS usages the certificate allows. A certificate without an extended-key-usage
    /// extension allows both.
    public let keyUsages: KeyUsages
    /// SHA-256 of ``derBytes``.
    public let sha256Digest: [UInt8]

    /// Parses a DER-encoded certificate.
    public init(derBytes: [UInt8]) throws(PeerSyncError) {
        let handle = try X509Handle(der: derBytes)
        try self.init(handle: handle, der: derBytes)
    }

    /// Parses one PEM `CERTIFICATE` block (the first one if there are several).
    public init(pem: String) throws(PeerSyncError) {
        let all = try Certificate.certificates(fromPEM: pem)
        guard let first = all.first else {
            throw PeerSyncError(.invalidCertificate, "no CERTIFICATE block in the PEM text")
        }
        self = first
    }

    init(handle: X509Handle) throws(PeerSyncError) {
        try self.init(handle: handle, der: handle.der)
    }

    private init(handle: X509Handle, der: [UInt8]) throws(PeerSyncError) {
        derBytes = der
        subjectName = try handle.subjectName()
        issuerName = try handle.issuerName()
        commonName = handle.subjectCommonName
        issuerCommonName = handle.issuerCommonName
        notBefore = try handle.notBefore()
        notAfter = try handle.notAfter()
        subjectAlternativeNames = handle.subjectAlternativeNames
        serialNumber = try handle.serialNumberHex()
        isSelfSigned = handle.isSelfSigned
        isCertificateAuthority = handle.isCertificateAuthority
        if handle.hasInvalidExtensions {
            throw PeerSyncError(.invalidCertificate, "the certificate has invalid or duplicate extensions")
        }
        keyUsages = handle.extendedKeyUsages ?? [.clientAuth, .serverAuth]
        sha256Digest = try sha256(der)
    }

    /// Parses every `CERTIFICATE` block of PEM text, in order. Other blocks (keys) are skipped.
    /// Throws when a certificate block is malformed; returns `[]` when there is none.
    public static func certificates(fromPEM text: String) throws(PeerSyncError) -> [Certificate] {
        try PEM.blocks(in: text).filter { $0.label == "CERTIFICATE" }.map { (block) throws(PeerSyncError) in
            try Certificate(derBytes: block.der)
        }
    }

    /// The peer ID: lowercase hexadecimal SHA-256 of the DER encoding.
    public var peerID: String { sha256Digest.hexString }

    /// PEM text (`-----BEGIN CERTIFICATE-----`, 64-column base64, trailing newline).
    public var pemString: String { PEM.encode(label: "CERTIFICATE", der: derBytes) }

    /// True when `now` lies within the validity period.
    public func isValid(at date: Date = Date()) -> Bool { notBefore <= date && date <= notAfter }

    public var description: String {
        "Certificate(\(subjectName), issuer: \(issuerName), until: \(notAfter), peerID: \(peerID.prefix(16))…)"
    }

    public static func == (lhs: Certificate, rhs: Certificate) -> Bool { lhs.derBytes == rhs.derBytes }
    public func hash(into hasher: inout Hasher) { hasher.combine(derBytes) }

    /// An OpenSSL handle for this certificate (re-parsed; the bytes were validated at init).
    func handle() throws(PeerSyncError) -> X509Handle { try X509Handle(der: derBytes) }
}

/// PEM armour (RFC 7468) in Swift: splitting blocks and encoding.
enum PEM {
    struct Block {
        var label: String
        var der: [UInt8]
    }

    /// The blocks of PEM text. Throws ``PeerSyncError/Code/invalidCertificate`` on a block
    /// without an end line or with invalid base64. Encrypted traditional keys (with headers)
    /// are returned with empty `der`.
    static func blocks(in text: String) throws(PeerSyncError) -> [Block] {
        var out: [Block] = []
        var current: (label: String, body: String, hasHeaders: Bool)? = nil
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = rawLine.trimmingCharacters(in: .whitespacesAndNewlines)
            if let open = current {
                if line.hasPrefix("-----END ") {
                    let label = String(line.dropFirst(9).dropLast(5))
                    guard line.hasSuffix("-----"), label == open.label else {
                        throw PeerSyncError(.invalidCertificate, "PEM block \(open.label) has a mismatched end line")
                    }
                    if open.hasHeaders {
                        out.append(Block(label: label, der: []))
                    } else {
                        guard let data = Data(base64Encoded: open.body), !data.isEmpty else {
                            throw PeerSyncError(.invalidCertificate, "PEM block \(label) holds invalid base64")
                        }
                        out.append(Block(label: label, der: [UInt8](data)))
                    }
                    current = nil
                } else if line.contains(":") {
                    current?.hasHeaders = true
                } else {
                    current?.body += line
                }
            } else if line.hasPrefix("-----BEGIN "), line.hasSuffix("-----"), line.count > 16 {
                current = (String(line.dropFirst(11).dropLast(5)), "", false)
            }
        }
        if let open = current {
            throw PeerSyncError(.invalidCertificate, "PEM block \(open.label) has no end line")
        }
        return out
    }

    static func encode(label: String, der: [UInt8]) -> String {
        let base64 = Data(der).base64EncodedString()
        var out = "-----BEGIN \(label)-----\n"
        var index = base64.startIndex
        while index < base64.endIndex {
            let end = base64.index(index, offsetBy: 64, limitedBy: base64.endIndex) ?? base64.endIndex
            out += base64[index..<end] + "\n"
            index = end
        }
        out += "-----END \(label)-----\n"
        return out
    }
}

/// Textual IP addresses <-> bytes, without platform socket headers.
enum IPAddress {
    static func text(_ bytes: [UInt8]) -> String? {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        if bytes.count == 16 {
            var groups: [String] = []
            for i in stride(from: 0, to: 16, by: 2) {
                groups.append(String(UInt16(bytes[i]) << 8 | UInt16(bytes[i + 1]), radix: 16))
            }
            return groups.joined(separator: ":")
        }
        return nil
    }

    /// True for dotted IPv4 or any text containing `:` (IPv6): such names are never sent as
    /// SNI and are checked against IP SANs.
    static func isLiteral(_ host: String) -> Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { part in
            !part.isEmpty && part.count <= 3 && part.allSatisfy(\.isASCII) && part.allSatisfy(\.isNumber)
                && (Int(part) ?? 256) <= 255
        }
    }
}
