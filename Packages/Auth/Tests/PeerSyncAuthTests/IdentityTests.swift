import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing

@Suite(.timeLimit(.minutes(1))) struct IdentityTests {
    @Test func selfSignedIdentityCarriesItsAttributes() throws {
        let expiration = Date(timeIntervalSinceNow: 10 * 86400)
        let identity = try TLSIdentity.createIdentity(
            for: [.serverAuth, .clientAuth],
            attributes: [certAttrCommonName: "peer-1", certAttrOrganization: "Acme", certAttrOrganizationUnit: "Sync",
                         certAttrLocality: "Lyon", certAttrStateOrProvince: "ARA", certAttrCountry: "FR",
                         certAttrEmailAddress: "ops@example.com", certAttrHostname: "peer1.local",
                         certAttrIPAddress: "10.0.0.7", certAttrURL: "https://example.com/p1"],
            expiration: expiration)
        let cert = identity.certificate
        #expect(identity.certs.count == 1)
        #expect(cert.commonName == "peer-1")
        #expect(cert.subjectName.contains("O=Acme"))
        #expect(cert.subjectName.contains("OU=Sync"))
        #expect(cert.subjectName.contains("L=Lyon"))
        #expect(cert.subjectName.contains("C=FR"))
        #expect(cert.issuerName == cert.subjectName)
        #expect(Set(cert.subjectAlternativeNames) == [.dnsName("peer1.local"), .ipAddress("10.0.0.7"),
                                                       .email("ops@example.com"), .uri("https://example.com/p1")])
        #expect(cert.isSelfSigned)
        #expect(!cert.isCertificateAuthority)
        #expect(cert.keyUsages == [.serverAuth, .clientAuth])
        #expect(abs(identity.expiration.timeIntervalSince(expiration)) < 2)
        #expect(cert.isValid())
        #expect(cert.peerID.count == 64)
        #expect(identity.peerID == cert.peerID)
        #expect(cert.serialNumber.count >= 30)
    }

    @Test(arguments: zip([KeyUsages.serverAuth, .clientAuth, [.serverAuth, .clientAuth]], ["server", "client", "both"]))
    func keyUsagesAreRecorded(_ usages: KeyUsages, _ name: String) throws {
        let identity = try TLSIdentity.createIdentity(for: usages, attributes: [certAttrCommonName: name])
        #expect(identity.certificate.keyUsages == usages)
        #expect(identity.certificate.keyUsages.description == name)
    }

    @Test func issuerSignsIdentities() throws {
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "My CA"])
        #expect(ca.certificate.isCertificateAuthority)
        #expect(ca.certificate.isSelfSigned)
        let leaf = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "leaf"], issuer: ca)
        #expect(leaf.certs == [leaf.certificate, ca.certificate])
        #expect(leaf.certificate.issuerName == ca.certificate.subjectName)
        #expect(leaf.certificate.issuerCommonName == "My CA")
        #expect(!leaf.certificate.isSelfSigned)
        #expect(!leaf.certificate.isCertificateAuthority)
    }

    @Test func rsaKeys() throws {
        let identity = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "rsa"],
                                                      keyType: .rsa(bits: 2048))
        #expect(try identity.privateKeyPEM(password: nil).contains("BEGIN PRIVATE KEY"))
        #expect(throws: PeerSyncError.self) {
            try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "weak"], keyType: .rsa(bits: 1024))
        }
    }

    @Test func badCreationInputIsRejected() throws {
        let leaf = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "not a CA"])
        let cases: [() throws -> TLSIdentity] = [
            { try TLSIdentity.createIdentity(for: [], attributes: [certAttrCommonName: "x"]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [:]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: ""]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x", "favouriteColour": "red"]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x", certAttrIPAddress: "not-an-ip"]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x", certAttrHostname: "a,DNS:b"]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x", certAttrCountry: "France"]) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x"],
                                             expiration: Date(timeIntervalSinceNow: -86400)) },
            { try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x"], issuer: leaf) },
        ]
        for (i, make) in cases.enumerated() {
            #expect(throws: PeerSyncError.self, "case \(i)") { _ = try make() }
            do { _ = try make() } catch { #expect((error as? PeerSyncError)?.code == .invalidArgument, "case \(i): \(error)") }
        }
    }

    @Test func pemRoundTripWithEncryptedKey() throws {
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "CA"])
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "c"], issuer: ca)
        let certsPEM = identity.certificatesPEM()
        #expect(!certsPEM.contains("PRIVATE KEY"))
        let keyPEM = try identity.privateKeyPEM(password: "s3cret")
        #expect(keyPEM.contains("BEGIN ENCRYPTED PRIVATE KEY"))
        // Certificates given in any order: the leaf is the one matching the key.
        let shuffled = Array(try Certificate.certificates(fromPEM: certsPEM).reversed())
        let back = try TLSIdentity(certificates: shuffled, privateKeyPEM: keyPEM, password: "s3cret")
        #expect(back.certs == identity.certs)
        #expect(try back.privateKeyPEM(password: nil) == identity.privateKeyPEM(password: nil))

        let wrong = #expect(throws: PeerSyncError.self) { try TLSIdentity(certificates: shuffled, privateKeyPEM: keyPEM, password: "nope") }
        #expect(wrong?.code == .wrongPassword)
        let missing = #expect(throws: PeerSyncError.self) { try TLSIdentity(certificates: shuffled, privateKeyPEM: keyPEM) }
        #expect(missing?.code == .wrongPassword)

        // importIdentity detects PEM.
        let combined = certsPEM + keyPEM
        let imported = try TLSIdentity.importIdentity(withData: Array(combined.utf8), password: "s3cret")
        #expect(imported.certs == identity.certs)
    }

    @Test func keyMustMatchACertificate() throws {
        let a = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "a"])
        let b = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "b"])
        let error = #expect(throws: PeerSyncError.self) {
            try TLSIdentity(certificates: a.certs, privateKeyPEM: try b.privateKeyPEM(password: nil))
        }
        #expect(error?.code == .invalidCertificate)
        let none = #expect(throws: PeerSyncError.self) {
            try TLSIdentity(certificates: [], privateKeyPEM: try b.privateKeyPEM(password: nil))
        }
        #expect(none?.code == .invalidCertificate)
    }

    @Test func pkcs12RoundTrip() throws {
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "CA"])
        let identity = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth], attributes: [certAttrCommonName: "p12"],
                                                      issuer: ca)
        let p12 = try identity.exportPKCS12(password: "pw")
        let back = try TLSIdentity.importIdentity(withData: p12, password: "pw")
        #expect(back.certs == identity.certs)
        #expect(try back.privateKeyPEM(password: nil) == identity.privateKeyPEM(password: nil))

        let wrong = #expect(throws: PeerSyncError.self) { try TLSIdentity.importIdentity(withData: p12, password: "bad") }
        #expect(wrong?.code == .wrongPassword)
        let empty = #expect(throws: PeerSyncError.self) { try identity.exportPKCS12(password: "") }
        #expect(empty?.code == .invalidArgument)
    }

    @Test func garbageNeverParses() throws {
        var generator = SystemRandomNumberGenerator()
        for length in [0, 1, 2, 10, 100, 1000] {
            let junk = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(throws: PeerSyncError.self) { try Certificate(derBytes: junk) }
            #expect(throws: PeerSyncError.self) { try TLSIdentity.importIdentity(withData: junk, password: "x") }
        }
        // A valid certificate with bytes appended, or truncated.
        let der = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x"]).certificate.derBytes
        #expect(throws: PeerSyncError.self) { try Certificate(derBytes: der + [0]) }
        #expect(throws: PeerSyncError.self) { try Certificate(derBytes: Array(der.dropLast(5))) }
        // Bad PEM.
        #expect(throws: PeerSyncError.self) { try Certificate(pem: "-----BEGIN CERTIFICATE-----\nAAAA\n") }
        #expect(throws: PeerSyncError.self) { try Certificate(pem: "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n") }
        #expect(throws: PeerSyncError.self) { try Certificate(pem: "no pem here") }
        #expect(try Certificate.certificates(fromPEM: "") == [])
        let error = #expect(throws: PeerSyncError.self) { try Certificate(derBytes: [0x30, 0x03, 0x02, 0x01, 0x01]) }
        #expect(error?.code == .invalidCertificate)
    }

    @Test func pemAndDEREncodingsAgree() throws {
        let cert = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "pem"]).certificate
        let pem = cert.pemString
        #expect(pem.hasPrefix("-----BEGIN CERTIFICATE-----\n"))
        #expect(pem.split(separator: "\n").dropFirst().dropLast().allSatisfy { $0.count <= 64 })
        #expect(try Certificate(pem: pem) == cert)
        #expect(try Certificate(derBytes: cert.derBytes).hashValue == cert.hashValue)
    }

    // MARK: Against the openssl command-line tool

    @Test func opensslAgreesWithOurCertificates() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "CLI CA"])
        let leaf = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "leaf",
                                                                                  certAttrHostname: "localhost"], issuer: ca)
        try ca.certificate.pemString.write(toFile: dir.file("ca.pem"), atomically: true, encoding: .utf8)
        try leaf.certificate.pemString.write(toFile: dir.file("leaf.pem"), atomically: true, encoding: .utf8)

        let (verify, verifyOutput) = try await runOpenSSL(["verify", "-CAfile", "ca.pem", "-purpose", "sslserver",
                                                          "-verify_hostname", "localhost", "leaf.pem"], directory: dir.path)
        #expect(verify == 0, "\(verifyOutput)")
        #expect(verifyOutput.contains("leaf.pem: OK"))

        let (_, fingerprint) = try await runOpenSSL(["x509", "-in", "leaf.pem", "-noout", "-fingerprint", "-sha256"],
                                                    directory: dir.path)
        let hex = fingerprint.split(separator: "=").last.map { $0.replacingOccurrences(of: ":", with: "") }?
            .trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
        #expect(hex == leaf.peerID, "the peer ID is the SHA-256 fingerprint")

        let (_, text) = try await runOpenSSL(["x509", "-in", "leaf.pem", "-noout", "-text"], directory: dir.path)
        #expect(text.contains("TLS Web Server Authentication"))
        #expect(!text.contains("TLS Web Client Authentication"))
        #expect(text.contains("CA:FALSE"))
        #expect(text.contains("DNS:localhost"))
        #expect(text.contains("ASN1 OID: prime256v1"))
    }

    @Test func opensslReadsOurPKCS12AndWeReadItsOwn() async throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "p12-interop"])
        try Data(try identity.exportPKCS12(password: "pw")).write(to: URL(fileURLWithPath: dir.file("ours.p12")))
        let (status, output) = try await runOpenSSL(["pkcs12", "-in", "ours.p12", "-passin", "pass:pw", "-nokeys"],
                                                    directory: dir.path)
        #expect(status == 0, "\(output)")
        #expect(output.contains("subject=CN = p12-interop"))

        // A PKCS#12 and an encrypted PEM key made by openssl itself.
        let (made, madeOutput) = try await runOpenSSL(
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-keyout", "k.pem", "-out", "c.pem",
             "-days", "3", "-subj", "/CN=made-by-openssl", "-passout", "pass:kpw"], directory: dir.path)
        #expect(made == 0, "\(madeOutput)")
        let (exported, exportOutput) = try await runOpenSSL(
            ["pkcs12", "-export", "-in", "c.pem", "-inkey", "k.pem", "-passin", "pass:kpw", "-out", "theirs.p12",
             "-passout", "pass:ppw"], directory: dir.path)
        #expect(exported == 0, "\(exportOutput)")
        let p12 = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir.file("theirs.p12"))))
        let fromP12 = try TLSIdentity.importIdentity(withData: p12, password: "ppw")
        #expect(fromP12.certificate.commonName == "made-by-openssl")
        let pem = try String(contentsOfFile: dir.file("c.pem"), encoding: .utf8) + String(contentsOfFile: dir.file("k.pem"), encoding: .utf8)
        let fromPEM = try TLSIdentity.importIdentity(withData: Array(pem.utf8), password: "kpw")
        #expect(fromPEM.certificate == fromP12.certificate)
    }
}
