import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing

/// Server trust on the client: every certificate case under every policy, over real
/// handshakes. `nil` = accepted, otherwise the expected rejection reason.
@Suite(.timeLimit(.minutes(1))) struct ServerTrustMatrixTests {
    enum Policy: String, CaseIterable, CustomStringConvertible {
        case pinnedLeaf, pinnedOther, pinnedRoot, selfSignedOnly, roots, systemRoots
        var description: String { rawValue }

        func trust(_ f: Fixtures, leaf: Certificate) -> ServerTrust {
            switch self {
            case .pinnedLeaf: return .pinned(leaf)
            case .pinnedOther: return .pinned(f.unrelated.certificate)
            case .pinnedRoot: return .pinned(f.root.certificate)
            case .selfSignedOnly: return .selfSignedOnly
            case .roots: return .roots([f.root.certificate])
            case .systemRoots: return .systemRoots
            }
        }
    }

    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let identity: @Sendable (Fixtures) -> TLSIdentity
        /// Expected outcome per policy, in `Policy.allCases` order.
        let expected: [CertificateTrustFailure?]
        var description: String { name }
    }

    static let cases: [Case] = [
        //                                                          pinnedLeaf pinnedOther   pinnedRoot    selfSignedOnly        roots                  systemRoots
        Case(name: "CA-issued, valid", identity: { $0.valid },
             expected: [nil, .pinMismatch, nil, .caIssuedNotAllowed, nil, .unknownCA]),
        Case(name: "CA-issued, expired", identity: { $0.expired },
             expected: [nil, .pinMismatch, nil, .caIssuedNotAllowed, .expired, .unknownCA]),
        Case(name: "CA-issued, not yet valid", identity: { $0.notYetValid },
             expected: [nil, .pinMismatch, nil, .caIssuedNotAllowed, .notYetValid, .unknownCA]),
        Case(name: "CA-issued, wrong hostname", identity: { $0.wrongHost },
             expected: [nil, .pinMismatch, nil, .caIssuedNotAllowed, .hostnameMismatch, .unknownCA]),
        Case(name: "issued by an untrusted root", identity: { $0.untrustedCA },
             expected: [nil, .pinMismatch, .pinMismatch, .caIssuedNotAllowed, .unknownCA, .unknownCA]),
        Case(name: "CA-issued without serverAuth usage", identity: { $0.noServerUsage },
             expected: [nil, .pinMismatch, nil, .caIssuedNotAllowed, .missingKeyUsage, .unknownCA]),
        Case(name: "self-signed", identity: { $0.selfSigned },
             expected: [nil, .pinMismatch, .pinMismatch, nil, .selfSignedNotAllowed, .selfSignedNotAllowed]),
        Case(name: "self-signed, expired", identity: { $0.selfSignedExpired },
             expected: [nil, .pinMismatch, .pinMismatch, .expired, .selfSignedNotAllowed, .selfSignedNotAllowed]),
        Case(name: "self-signed, wrong hostname", identity: { $0.selfSignedWrongHost },
             expected: [nil, .pinMismatch, .pinMismatch, nil, .selfSignedNotAllowed, .selfSignedNotAllowed]),
    ]

    @Test(arguments: cases)
    func serverCertificate(_ testCase: Case) async throws {
        let f = try Fixtures.get()
        let identity = testCase.identity(f)
        for (policy, expected) in zip(Policy.allCases, testCase.expected) {
            let client = TLSConfiguration.client(serverName: "localhost", serverTrust: policy.trust(f, leaf: identity.certificate))
            let result = await handshakePair(client: client, server: .server(identity: identity))
            if let expected {
                let error = result.client.error
                #expect(error?.code == .untrustedCertificate, "\(testCase) / \(policy): \(String(describing: error))")
                #expect(error?.trustFailure == expected, "\(testCase) / \(policy): \(String(describing: error))")
                #expect(error?.isCertificateTrustFailure == true)
                #expect(result.server.error != nil, "\(testCase) / \(policy): the server must not complete")
            } else {
                let stream = result.client.value
                #expect(stream != nil, "\(testCase) / \(policy): \(String(describing: result.client.error))")
                #expect(stream?.peerCertificateChain.first == identity.certificate)
                #expect(result.server.value != nil)
                if let stream { await stream.close() }
                if let server = result.server.value { await server.close() }
            }
        }
    }

    @Test func explicitlyTrustedSelfSignedRoot() async throws {
        let f = try Fixtures.get()
        var result = await handshakePair(client: .client(serverName: "localhost", serverTrust: .roots([f.selfSigned.certificate])),
                                         server: .server(identity: f.selfSigned))
        #expect(result.client.value != nil, "\(String(describing: result.client.error))")
        result = await handshakePair(client: .client(serverName: "localhost",
                                                     serverTrust: .roots([f.selfSignedWrongHost.certificate])),
                                     server: .server(identity: f.selfSignedWrongHost))
        #expect(result.client.error?.trustFailure == .hostnameMismatch)
    }

    @Test func ipAddressHostCheck() async throws {
        let f = try Fixtures.get()
        let good = await handshakePair(client: .client(serverName: "127.0.0.1", serverTrust: .roots([f.root.certificate])),
                                       server: .server(identity: f.validIP))
        #expect(good.client.value != nil, "\(String(describing: good.client.error))")
        #expect(good.server.value?.serverName == nil, "an IP address is never sent as SNI")
        let bad = await handshakePair(client: .client(serverName: "127.0.0.2", serverTrust: .roots([f.root.certificate])),
                                      server: .server(identity: f.validIP))
        #expect(bad.client.error?.trustFailure == .hostnameMismatch)
    }

    @Test func noHostnameSkipsTheHostCheck() async throws {
        let f = try Fixtures.get()
        let result = await handshakePair(client: .client(serverName: nil, serverTrust: .roots([f.root.certificate])),
                                         server: .server(identity: f.wrongHost))
        #expect(result.client.value != nil)
    }

    @Test func intermediateCAInTheChain() async throws {
        let f = try Fixtures.get()
        let intermediate = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Intermediate"], issuer: f.root)
        let leaf = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "leaf",
                                                                                  certAttrHostname: "localhost"],
                                                  issuer: intermediate)
        #expect(leaf.certs.count == 3)
        for trust in [ServerTrust.roots([f.root.certificate]), .roots([intermediate.certificate]),
                      .pinned(intermediate.certificate), .pinned(f.root.certificate)] {
            let result = await handshakePair(client: .client(serverName: "localhost", serverTrust: trust),
                                             server: .server(identity: leaf))
            #expect(result.client.value?.peerCertificateChain == leaf.certs, "\(trust): \(String(describing: result.client.error))")
        }
    }

    /// `serverCertificateCallback` replaces every other check: an expired certificate with the
    /// wrong host name passes when the callback says so, a valid one fails when it says no, and
    /// the callback sees the server's chain.
    @Test func serverCertificateCallbackDecides() async throws {
        let f = try Fixtures.get()
        let seen = LockedValue<[[Certificate]]>([])
        for (identity, accept) in [(f.selfSignedExpired, true), (f.wrongHost, true), (f.valid, false)] {
            var client = TLSConfiguration.client(serverName: "localhost", serverTrust: .systemRoots)
            client.serverCertificateCallback = { chain in seen.withLock { $0.append(chain) }; return accept }
            let result = await handshakePair(client: client, server: .server(identity: identity))
            if accept {
                #expect(result.client.value?.peerCertificateChain.first == identity.certificate,
                        "\(identity.certificate): \(String(describing: result.client.error))")
            } else {
                #expect(result.client.error?.trustFailure == .rejectedByCallback, "\(String(describing: result.client.error))")
            }
            if let stream = result.client.value { await stream.close() }
            if let server = result.server.value { await server.close() }
        }
        #expect(seen.withLock { $0.map { $0.first } } == [f.selfSignedExpired.certificate, f.wrongHost.certificate,
                                                          f.valid.certificate])
    }

    /// A server that appends the pinned CA to its chain without being issued by it must
    /// not pass the pin.
    @Test func pinnedCAMustActuallySignTheLeaf() async throws {
        let f = try Fixtures.get()
        let pem = f.untrustedCA.certificatesPEM() + f.root.certificate.pemString
        let forged = try TLSIdentity(certificates: try Certificate.certificates(fromPEM: pem),
                                     privateKeyPEM: try f.untrustedCA.privateKeyPEM(password: nil))
        #expect(forged.certs.contains(f.root.certificate))
        let result = await handshakePair(client: .client(serverName: "localhost", serverTrust: .pinned(f.root.certificate)),
                                         server: .server(identity: forged))
        #expect(result.client.error?.trustFailure == .pinMismatch)
    }
}

/// Client certificates on the listener (mutual TLS).
@Suite(.timeLimit(.minutes(1))) struct ClientCertificateMatrixTests {
    enum Validator: String, CaseIterable, CustomStringConvertible {
        case roots, acceptingCallback, rejectingCallback
        var description: String { rawValue }
    }

    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let identity: @Sendable (Fixtures) -> TLSIdentity?
        let expected: [CertificateTrustFailure?]   // per Validator.allCases
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "CA-issued client cert", identity: { $0.client }, expected: [nil, nil, .rejectedByCallback]),
        Case(name: "missing clientAuth usage", identity: { $0.clientServerOnly },
             expected: [.missingKeyUsage, nil, .rejectedByCallback]),
        Case(name: "untrusted issuer", identity: { $0.clientUntrusted }, expected: [.unknownCA, nil, .rejectedByCallback]),
        Case(name: "expired", identity: { $0.clientExpired }, expected: [.expired, nil, .rejectedByCallback]),
        Case(name: "self-signed", identity: { $0.clientSelfSigned },
             expected: [.selfSignedNotAllowed, nil, .rejectedByCallback]),
        Case(name: "no client certificate", identity: { _ in nil },
             expected: [.noCertificate, .noCertificate, .noCertificate]),
    ]

    final class Seen: Sendable {
        let chains = LockedValue<[[Certificate]]>([])
    }

    @Test(arguments: cases, [TLSVersion.v1_3, .v1_2])
    func clientCertificate(_ testCase: Case, version: TLSVersion) async throws {
        let f = try Fixtures.get()
        let identity = testCase.identity(f)
        for (validator, expected) in zip(Validator.allCases, testCase.expected) {
            let seen = Seen()
            let authenticator: ListenerCertificateAuthenticator
            switch validator {
            case .roots: authenticator = ListenerCertificateAuthenticator(rootCerts: [f.root.certificate])
            case .acceptingCallback:
                authenticator = ListenerCertificateAuthenticator { certs in seen.chains.withLock { $0.append(certs) }; return true }
            case .rejectingCallback:
                authenticator = ListenerCertificateAuthenticator { certs in seen.chains.withLock { $0.append(certs) }; return false }
            }
            var client = TLSConfiguration.client(serverName: "localhost", serverTrust: .roots([f.root.certificate]),
                                                 identity: identity)
            client.maximumVersion = version
            let result = await handshakePair(client: client, server: authenticator.tlsConfiguration(identity: f.valid))
            let label = "\(testCase) / \(validator) / \(version)"
            if let expected {
                #expect(result.server.error?.code == .untrustedCertificate, "\(label): \(String(describing: result.server.error))")
                #expect(result.server.error?.trustFailure == expected, "\(label): \(String(describing: result.server.error))")
                // The client learns it from the alert: during the handshake (TLS 1.2) or on its first read (TLS 1.3).
                var clientError = result.client.error
                if let stream = result.client.value {
                    clientError = await capture { () async throws(PeerSyncError) in try await stream.read(maxBytes: 10) }.error
                    await stream.close()
                }
                #expect(clientError?.code == .certificateRejected, "\(label): \(String(describing: clientError))")
                #expect(clientError?.isCertificateTrustFailure == true)
            } else {
                let server = result.server.value
                #expect(server != nil, "\(label): \(String(describing: result.server.error))")
                #expect(server?.peerCertificateChain.first == identity?.certificate)
                #expect(server?.protocolVersion == version)
                if validator == .acceptingCallback {
                    #expect(seen.chains.withLock { $0 } == [identity?.certs ?? []])
                }
                if let server, let client = result.client.value {
                    try await client.write([1, 2, 3])
                    #expect(try await readExactly(server, 3) == [1, 2, 3])
                    await client.close()
                    await server.close()
                }
            }
        }
    }
}
