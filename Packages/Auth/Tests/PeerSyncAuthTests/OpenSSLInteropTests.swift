import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncTestSupport
import Testing

/// Our TLS server against `openssl s_client`, our TLS client against `openssl s_server`,
/// over real TCP on 127.0.0.1.
@Suite(.timeLimit(.minutes(1))) struct OpenSSLInteropTests {
    /// Writes the fixtures' PEM files into `dir`.
    static func writeFiles(_ f: Fixtures, _ dir: TempDir) throws {
        func put(_ name: String, _ text: String) throws { try text.write(toFile: dir.file(name), atomically: true, encoding: .utf8) }
        try put("root.pem", f.root.certificate.pemString)
        try put("server.pem", f.valid.certificatesPEM())
        try put("server.key", try f.valid.privateKeyPEM(password: nil))
        try put("client.pem", f.client.certificatesPEM())
        try put("client.key", try f.client.privateKeyPEM(password: "client-secret"))
        try put("untrusted-client.pem", f.clientUntrusted.certificatesPEM())
        try put("untrusted-client.key", try f.clientUntrusted.privateKeyPEM(password: nil))
    }

    /// Accepts one connection, runs our TLS server on it: reads a line, answers `pong`.
    static func serveOne(_ listener: BlockingTCPListener, _ config: TLSConfiguration) async -> Result<TLSStream, PeerSyncError> {
        let tcp: BlockingTCPStream
        do { tcp = try await listener.accept() } catch { return .failure(PeerSyncError(.io, "accept: \(error)")) }
        var config = config
        config.handshakeTimeout = .seconds(15)
        let result = await capture { () async throws(PeerSyncError) in try await TLSStream.handshake(over: tcp, configuration: config) }
        guard let tls = result.value else { return result }
        var line: [UInt8] = []
        while !line.contains(UInt8(ascii: "\n")) {
            guard let chunk = try? await tls.read(maxBytes: 100) else { break }
            line += chunk
        }
        if line == Array("ping\n".utf8) { try? await tls.write(Array("pong\n".utf8)) }
        await tls.close()
        return result
    }

    /// Runs `openssl s_client` against our server; returns our server's result and s_client's output.
    static func sClient(_ extra: [String], server config: TLSConfiguration, dir: TempDir) async throws
        -> (server: Result<TLSStream, PeerSyncError>, output: String) {
        let listener = try BlockingTCPListener()
        async let served = serveOne(listener, config)
        let client = try ChildProcess(openssl: ["s_client", "-connect", "127.0.0.1:\(listener.port)", "-quiet"] + extra,
                                      directory: dir.path)
        client.send("ping\n")
        _ = await client.waitForOutput(containing: "pong", timeout: 15)
        _ = await client.waitForExit(timeout: .seconds(5))
        await client.stop()
        listener.shutdown()   // wakes the accept if s_client never connected
        return (await served, client.text)
    }

    static let verifyServer = ["-servername", "localhost", "-CAfile", "root.pem", "-verify_return_error",
                               "-verify_hostname", "localhost"]

    @Test func sClientVerifiesOurServerOverTLS13() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, output) = try await Self.sClient(Self.verifyServer, server: .server(identity: f.valid), dir: dir)
        #expect(output.contains("pong"), "\(output)")
        let tls = try server.get()
        #expect(tls.protocolVersion == .v1_3)
        #expect(tls.serverName == "localhost")
        #expect(tls.peerCertificateChain.isEmpty)
    }

    @Test func sClientOverTLS12() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, output) = try await Self.sClient(Self.verifyServer + ["-tls1_2"], server: .server(identity: f.valid), dir: dir)
        #expect(output.contains("pong"), "\(output)")
        #expect(try server.get().protocolVersion == .v1_2)
    }

    @Test func sClientTLS11IsRefused() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, output) = try await Self.sClient(["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"],
                                                      server: .server(identity: f.valid), dir: dir)
        #expect(!output.contains("pong"))
        #expect(server.error?.code == .tlsHandshakeFailed, "\(String(describing: server.error))")
    }

    @Test func sClientPresentsAClientCertificate() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let auth = ListenerCertificateAuthenticator(rootCerts: [f.root.certificate])
        for version in ["-tls1_3", "-tls1_2"] {
            let (server, output) = try await Self.sClient(
                Self.verifyServer + [version, "-cert", "client.pem", "-key", "client.key", "-pass", "pass:client-secret"],
                server: auth.tlsConfiguration(identity: f.valid), dir: dir)
            #expect(output.contains("pong"), "\(version): \(output)")
            #expect(try server.get().peerCertificateChain.first == f.client.certificate)
        }
    }

    @Test func sClientWithoutTheRequiredCertificateIsRejected() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let auth = ListenerCertificateAuthenticator(rootCerts: [f.root.certificate])
        let (server, output) = try await Self.sClient(Self.verifyServer, server: auth.tlsConfiguration(identity: f.valid), dir: dir)
        #expect(!output.contains("pong"))
        #expect(server.error?.trustFailure == .noCertificate, "\(String(describing: server.error))")
        #expect(output.contains("alert"), "s_client reports the alert: \(output)")
    }

    @Test func sClientWithAnUntrustedCertificateIsRejected() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let auth = ListenerCertificateAuthenticator(rootCerts: [f.root.certificate])
        let (server, output) = try await Self.sClient(
            Self.verifyServer + ["-cert", "untrusted-client.pem", "-key", "untrusted-client.key"],
            server: auth.tlsConfiguration(identity: f.valid), dir: dir)
        #expect(!output.contains("pong"))
        #expect(server.error?.trustFailure == .unknownCA, "\(String(describing: server.error))")
    }

    // MARK: Our client against s_server

    /// Starts `openssl s_server -rev` on a kernel-chosen port; returns it and the port.
    static func sServer(_ extra: [String], dir: TempDir, accepts: Int = 1) async throws -> (ChildProcess, UInt16) {
        let server = try ChildProcess(openssl: ["s_server", "-accept", "127.0.0.1:0", "-rev", "-naccept", "\(accepts)"] + extra,
                                      directory: dir.path)
        guard let text = await server.waitForOutput(containing: "ACCEPT 127.0.0.1:", timeout: 15),
              let range = text.range(of: "ACCEPT 127.0.0.1:") else {
            await server.stop()
            throw PeerSyncError(.io, "s_server did not start: \(server.text)")
        }
        let port = UInt16(text[range.upperBound...].prefix(while: { $0.isNumber })) ?? 0
        return (server, port)
    }

    /// Connects our client; on success sends `hello\n` and expects s_server's reversed line.
    /// Never throws, so callers always reach `server.stop()`.
    static func talk(port: UInt16, _ config: TLSConfiguration) async -> Result<TLSStream, PeerSyncError> {
        let tcp: BlockingTCPStream
        do { tcp = try await BlockingTCPStream.connect(port: port) } catch {
            return .failure(PeerSyncError(.io, "connect: \(error)"))
        }
        let result = await capture { () async throws(PeerSyncError) in try await TLSStream.handshake(over: tcp, configuration: config) }
        guard let tls = result.value else { return result }
        let exchange = await capture { () async throws(PeerSyncError) -> String in
            try await tls.write(Array("hello\n".utf8))
            var received: [UInt8] = []
            while !received.contains(UInt8(ascii: "\n")) {
                guard let chunk = try await tls.read(maxBytes: 100) else { break }
                received += chunk
            }
            return String(decoding: received, as: UTF8.self)
        }
        await tls.close()
        switch exchange {
        case .success(let text):
            #expect(text.contains("olleh"), "s_server -rev answer: \(text)")
            return result
        case .failure(let error):
            return .failure(error)
        }
    }

    @Test func ourClientVerifiesSServer() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, port) = try await Self.sServer(["-cert", "server.pem", "-key", "server.key"], dir: dir)
        let result = await Self.talk(port: port, .client(serverName: "localhost", serverTrust: .roots([f.root.certificate])))
        await server.stop()
        let tls = try result.get()
        #expect(tls.protocolVersion == .v1_3)
        #expect(tls.peerCertificateChain.first == f.valid.certificate)
    }

    @Test func ourClientAgainstTLS12OnlySServer() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, port) = try await Self.sServer(["-cert", "server.pem", "-key", "server.key", "-tls1_2"], dir: dir)
        let result = await Self.talk(port: port, .client(serverName: "localhost", serverTrust: .roots([f.root.certificate])))
        await server.stop()
        #expect(try result.get().protocolVersion == .v1_2)
    }

    @Test func ourClientCertificateAcceptedBySServer() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (server, port) = try await Self.sServer(["-cert", "server.pem", "-key", "server.key", "-Verify", "2",
                                                     "-CAfile", "root.pem", "-verify_return_error"], dir: dir)
        let auth = ClientCertificateAuthenticator(identity: f.client)
        let result = await Self.talk(port: port, auth.tlsConfiguration(serverName: "localhost",
                                                                          serverTrust: .roots([f.root.certificate])))
        _ = await server.waitForOutput(containing: "client", timeout: 2)
        await server.stop()
        #expect(result.value != nil, "\(String(describing: result.error)) / \(server.text)")
    }

    @Test func sServerRequiringACertificateRejectsUsWithoutOne() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        for version in [TLSVersion.v1_3, .v1_2] {
            let (server, port) = try await Self.sServer(["-cert", "server.pem", "-key", "server.key", "-Verify", "2",
                                                         "-CAfile", "root.pem", "-verify_return_error"], dir: dir)
            var config = TLSConfiguration.client(serverName: "localhost", serverTrust: .roots([f.root.certificate]))
            config.maximumVersion = version
            let result = await Self.talk(port: port, config)
            await server.stop()
            #expect(result.error?.code == .certificateRejected, "\(version): \(String(describing: result.error))")
        }
    }

    @Test func selfSignedCertificateMadeByOpenSSL() async throws {
        let f = try Fixtures.get(), dir = try TempDir()
        defer { dir.cleanup() }
        try Self.writeFiles(f, dir)
        let (status, output) = try await runOpenSSL(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                                     "-nodes", "-keyout", "ext.key", "-out", "ext.pem", "-days", "2",
                                                     "-subj", "/CN=external", "-addext", "subjectAltName=DNS:localhost"],
                                                    directory: dir.path)
        #expect(status == 0, "\(output)")
        let cert = try Certificate(pem: try String(contentsOfFile: dir.file("ext.pem"), encoding: .utf8))
        #expect(cert.isSelfSigned)
        #expect(cert.commonName == "external")
        let (server, port) = try await Self.sServer(["-cert", "ext.pem", "-key", "ext.key"], dir: dir, accepts: 3)
        let accepted1 = await Self.talk(port: port, .client(serverName: "localhost", serverTrust: .selfSignedOnly))
        let accepted2 = await Self.talk(port: port, .client(serverName: "localhost", serverTrust: .pinned(cert)))
        let rejected = await Self.talk(port: port, .client(serverName: "localhost", serverTrust: .roots([f.root.certificate])))
        await server.stop()
        #expect(accepted1.value?.peerCertificate == cert, "\(String(describing: accepted1.error))")
        #expect(accepted2.value?.peerCertificate == cert, "\(String(describing: accepted2.error))")
        #expect(rejected.error?.trustFailure == .selfSignedNotAllowed, "\(String(describing: rejected.error))")
    }
}
