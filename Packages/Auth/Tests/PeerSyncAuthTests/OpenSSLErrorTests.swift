import Foundation
@testable import PeerSyncAuth
import PeerSyncCore
import Testing

/// The one conversion of OpenSSL failures into `PeerSyncError`s (`OpenSSL.error` and the
/// `OpenSSL.check` overloads): the right code, OpenSSL's reason in the message, and an error
/// queue that is empty afterwards.
@Suite(.timeLimit(.minutes(1))) struct OpenSSLErrorTests {
    /// Checks a converted OpenSSL failure: `code`; the message `what: <OpenSSL's reason>`, that
    /// reason ending OpenSSL's whole line in `context["openssl"]`; an empty error queue after.
    static func expectConverted(_ error: PeerSyncError?, _ code: PeerSyncError.Code, what: String,
                                sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(error?.code == code, sourceLocation: sourceLocation)
        let message = error?.message ?? ""
        let reason = message.hasPrefix(what + ": ") ? String(message.dropFirst(what.count + 2)) : ""
        #expect(!reason.isEmpty, "\(String(describing: error))", sourceLocation: sourceLocation)
        #expect(error?.context["openssl"]?.hasSuffix(reason) == true, "\(String(describing: error))",
                sourceLocation: sourceLocation)
        #expect(OpenSSL.drainErrors().isEmpty, sourceLocation: sourceLocation)
    }

    @Test func malformedDERIsAnInvalidCertificateWithOpenSSLsReason() {
        // SEQUENCE { INTEGER 1 }: well-formed DER, not a certificate.
        let error = #expect(throws: PeerSyncError.self) { try Certificate(derBytes: [0x30, 0x03, 0x02, 0x01, 0x01]) }
        Self.expectConverted(error, .invalidCertificate, what: "not a DER X.509 certificate")
    }

    @Test func pemWithAMalformedCertificateIsAnInvalidCertificateWithOpenSSLsReason() {
        let pem = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n"   // the DER above
        let error = #expect(throws: PeerSyncError.self) { try Certificate(pem: pem) }
        Self.expectConverted(error, .invalidCertificate, what: "not a DER X.509 certificate")
    }

    @Test func anAttributeOpenSSLRefusesIsAnInvalidArgumentWithItsReason() {
        // Two UTF-8 bytes pass our length check, but a country is two printable characters.
        let error = #expect(throws: PeerSyncError.self) {
            try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x", certAttrCountry: "é"])
        }
        Self.expectConverted(error, .invalidArgument, what: "certificate attribute 'C' is not valid")
    }

    @Test func aWrongKeyPasswordIsWrongPasswordWithOpenSSLsReason() throws {
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "key"])
        let keyPEM = try identity.privateKeyPEM(password: "right")
        let error = #expect(throws: PeerSyncError.self) {
            try TLSIdentity(certificates: identity.certs, privateKeyPEM: keyPEM, password: "wrong")
        }
        Self.expectConverted(error, .wrongPassword, what: "the password does not decrypt the private key")
    }

    /// OpenSSL queues nothing when a PKCS#12 MAC does not verify: the message stands alone.
    @Test func aWrongPKCS12PasswordIsWrongPassword() throws {
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "p12"])
        let p12 = try identity.exportPKCS12(password: "right")
        let error = #expect(throws: PeerSyncError.self) { try TLSIdentity.importIdentity(withData: p12, password: "wrong") }
        #expect(error?.code == .wrongPassword)
        #expect(error?.message.hasPrefix("the password does not open the PKCS#12 file") == true)
        #expect(OpenSSL.drainErrors().isEmpty)
    }

    /// A failure drains the queue: the next failing call reports only its own cause, a check
    /// with nothing queued reports no OpenSSL cause at all, and the next call succeeds.
    @Test func oneFailureDoesNotLeakIntoTheNextCall() throws {
        let first = #expect(throws: PeerSyncError.self) { try Certificate(derBytes: [0x30, 0x03, 0x02, 0x01, 0x01]) }
        let firstCause = try #require(first?.context["openssl"])

        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "next"])
        let second = #expect(throws: PeerSyncError.self) {
            try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "x", certAttrCountry: "é"])
        }
        #expect(second?.code == .invalidArgument)
        let secondCause = try #require(second?.context["openssl"])
        #expect(secondCause != firstCause)

        _ = #expect(throws: PeerSyncError.self) { try Certificate(derBytes: [0x30, 0x03, 0x02, 0x01, 0x01]) }
        let clean = #expect(throws: PeerSyncError.self) { try OpenSSL.check(Int32(0), "an operation that failed") }
        #expect(clean == PeerSyncError(.cryptoFailure, "an operation that failed"))

        #expect(try Certificate(derBytes: identity.certificate.derBytes) == identity.certificate)
    }

    @Test func theConversionTakesTheNewestEntryOfTheQueue() {
        let older = OpenSSLError(library: 13, reason: 1, reasonText: "older reason", text: "error:0D000001:older")
        let newer = OpenSSLError(library: 13, reason: 2, reasonText: "newer reason", text: "error:0D000002:newer")
        let error = OpenSSL.error(.invalidCertificate, "parsing failed", context: ["path": "/x"], queued: [older, newer])
        #expect(error == PeerSyncError(.invalidCertificate, "parsing failed: newer reason",
                                       context: ["path": "/x", "openssl": "error:0D000002:newer"]))
        // A message that already names the reason does not repeat it.
        let named = OpenSSL.error(.tlsError, "TLS failed (newer reason)", queued: [newer])
        #expect(named.message == "TLS failed (newer reason)")
        // Nothing queued: the message alone.
        #expect(OpenSSL.error(.cryptoFailure, "RAND_bytes", queued: []) == PeerSyncError(.cryptoFailure, "RAND_bytes"))
    }

    @Test func pointerChecksThrowTheGivenCode() {
        let missing: Int? = nil
        let error = #expect(throws: PeerSyncError.self) {
            try OpenSSL.check(missing, "lookup", code: .invalidArgument)
        }
        #expect(error?.code == .invalidArgument)
        #expect((try? OpenSSL.check(Optional(7), "lookup")) == 7)
    }
}
