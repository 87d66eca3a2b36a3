import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing

@Suite struct AuthenticatorTests {
    @Test func basicHeaderMatchesRFC7617() {
        #expect(BasicAuthorization.headerValue(username: "Aladdin", password: "open sesame")
                == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        #expect(BasicAuthenticator(username: "Aladdin", password: "open sesame").authorizationHeaderValue
                == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
    }

    @Test func basicHeaderRoundTrips() throws {
        for (user, pass) in [("user", "pass"), ("ünïcode", "pässwörd:with:colons"), ("", "empty-user"), ("u", "")] {
            let parsed = try #require(BasicAuthorization.parse(BasicAuthorization.headerValue(username: user, password: pass)))
            #expect(parsed.username == user)
            #expect(parsed.password == pass)
        }
    }

    @Test func basicHeaderParsingIsTolerantButStrict() {
        #expect(BasicAuthorization.parse("basic dXNlcjpwYXNz")?.username == "user")
        #expect(BasicAuthorization.parse("  BASIC   dXNlcjpwYXNz  ")?.password == "pass")
        #expect(BasicAuthorization.parse("Basic dXNlcjpwYXNzMQ")?.password == "pass1")   // missing padding
        for bad in ["", "Basic", "Basic ", "Bearer dXNlcjpwYXNz", "Basic !!!!", "Basic dXNlcnBhc3M=", "Basic a",
                    "Basic dXNl cjpwYXNz", "Basic " + String(repeating: "A", count: 9000), "Basic //79"] {
            #expect(BasicAuthorization.parse(bad) == nil, "\(bad.prefix(40))")
        }
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals("secret", "secret"))
        #expect(!constantTimeEquals("secret", "secreT"))
        #expect(!constantTimeEquals("secret", "secret "))
        #expect(!constantTimeEquals("", "x"))
        #expect(constantTimeEquals("", ""))
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(!constantTimeEquals([0], []))
    }

    @Test func listenerPasswordAuthenticator() {
        let auth = ListenerPasswordAuthenticator.matching(username: "alice", password: "wonderland")
        #expect(auth.authenticate(username: "alice", password: "wonderland"))
        #expect(!auth.authenticate(username: "alice", password: "Wonderland"))
        #expect(!auth.authenticate(username: "bob", password: "wonderland"))
        #expect(auth.authenticate(authorizationHeaderValue: BasicAuthenticator(username: "alice", password: "wonderland")
            .authorizationHeaderValue))
        #expect(!auth.authenticate(authorizationHeaderValue: nil))
        #expect(!auth.authenticate(authorizationHeaderValue: "Bearer token"))

        let custom = ListenerPasswordAuthenticator { user, pass in user == "x" && pass.count > 3 }
        #expect(custom.authenticate(username: "x", password: "long"))
        #expect(!custom.authenticate(username: "x", password: "no"))
    }

    @Test func certificateAuthenticatorsMapToTLSConfiguration() throws {
        let f = try Fixtures.get()
        let client = ClientCertificateAuthenticator(identity: f.client)
        let config = client.tlsConfiguration(serverName: "localhost", serverTrust: .roots([f.root.certificate]))
        #expect(config.role == .client)
        #expect(config.identity?.peerID == f.client.peerID)
        #expect(config.serverTrust == .roots([f.root.certificate]))

        let roots = ListenerCertificateAuthenticator(rootCerts: [f.root.certificate]).tlsConfiguration(identity: f.valid)
        #expect(roots.role == .server)
        guard case .roots(let certs) = roots.clientCertificateValidation else {
            Issue.record("expected root validation")
            return
        }
        #expect(certs == [f.root.certificate])
        let callback = ListenerCertificateAuthenticator { certs in certs.count == 1 }
        guard case .callback(let accept) = callback.clientCertificateValidation else {
            Issue.record("expected callback validation")
            return
        }
        #expect(accept([f.client.certificate]))
        #expect(!accept([]))
    }
}
