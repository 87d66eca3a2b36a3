import Foundation
import PeerSyncAuth
import PeerSyncCore
import Testing

@Suite(.timeLimit(.minutes(1))) struct KeyStoreTests {
    static func mode(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test func saveLoadListDelete() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = TLSKeyStore(directory: dir.file("nested/identities"))
        #expect(try store.labels() == [])
        #expect(try store.identity(withLabel: "missing") == nil)

        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "CA"])
        let identity = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth], attributes: [certAttrCommonName: "me"],
                                                      issuer: ca)
        try store.save(identity, label: "me")
        try store.save(ca, label: "ca")
        #expect(try store.labels() == ["ca", "me"])

        let loaded = try #require(try store.identity(withLabel: "me"))
        #expect(loaded.certs == identity.certs)
        #expect(try loaded.privateKeyPEM(password: nil) == identity.privateKeyPEM(password: nil))

        // Layout and protection.
        #expect(try Self.mode(store.directory) == 0o700)
        for name in ["me.pem", "me.key.pem", ".keystore-secret"] {
            #expect(try Self.mode(store.directory + "/" + name) == 0o600, "\(name)")
        }
        let keyText = try String(contentsOfFile: store.directory + "/me.key.pem", encoding: .utf8)
        #expect(keyText.contains("BEGIN ENCRYPTED PRIVATE KEY"))
        let certText = try String(contentsOfFile: store.directory + "/me.pem", encoding: .utf8)
        #expect(!certText.contains("PRIVATE KEY"))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: store.directory).filter { $0.contains(".tmp-") }
        #expect(leftovers.isEmpty)

        // The encrypted key opens with the secret file's content and nothing else.
        let secret = try String(contentsOfFile: store.directory + "/.keystore-secret", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(secret.count == 64)
        #expect(throws: PeerSyncError.self) {
            try TLSIdentity(certificates: identity.certs, privateKeyPEM: keyText, password: "guess")
        }
        #expect(try TLSIdentity(certificates: identity.certs, privateKeyPEM: keyText, password: secret).peerID == identity.peerID)

        let duplicate = #expect(throws: PeerSyncError.self) { try store.save(identity, label: "me") }
        #expect(duplicate?.code == .identityExists)
        try store.save(ca, label: "me", overwrite: true)
        #expect(try store.identity(withLabel: "me")?.certificate == ca.certificate)

        try store.deleteIdentity(withLabel: "me")
        #expect(try store.labels() == ["ca"])
        #expect(!FileManager.default.fileExists(atPath: store.directory + "/me.key.pem"))
        let missing = #expect(throws: PeerSyncError.self) { try store.deleteIdentity(withLabel: "me") }
        #expect(missing?.code == .notFound)
    }

    @Test(arguments: ["", ".hidden", "../escape", "a/b", "x.key", "spaces here", String(repeating: "a", count: 101), "é"])
    func badLabelsAreRejected(_ label: String) throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = TLSKeyStore(directory: dir.path)
        let identity = try TLSIdentity.createIdentity(for: .serverAuth, attributes: [certAttrCommonName: "x"])
        let error = #expect(throws: PeerSyncError.self) { try store.save(identity, label: label) }
        #expect(error?.code == .invalidArgument)
        #expect(throws: PeerSyncError.self) { try store.identity(withLabel: label) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    @Test func explicitPassphraseReplacesTheSecretFile() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = TLSKeyStore(directory: dir.path, passphrase: "correct horse")
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "p"])
        try store.save(identity, label: "p")
        #expect(!FileManager.default.fileExists(atPath: dir.file(".keystore-secret")))
        #expect(try store.identity(withLabel: "p")?.peerID == identity.peerID)
        let wrong = #expect(throws: PeerSyncError.self) {
            try TLSKeyStore(directory: dir.path, passphrase: "battery staple").identity(withLabel: "p")
        }
        #expect(wrong?.code == .wrongPassword)
    }

    @Test func corruptFilesGiveClearErrors() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = TLSKeyStore(directory: dir.path)
        let identity = try TLSIdentity.createIdentity(for: .clientAuth, attributes: [certAttrCommonName: "c"])
        try store.save(identity, label: "c")
        try "garbage".write(toFile: dir.file("c.pem"), atomically: true, encoding: .utf8)
        #expect(throws: PeerSyncError.self) { try store.identity(withLabel: "c") }
        try store.save(identity, label: "d")
        try FileManager.default.removeItem(atPath: dir.file("d.key.pem"))
        let missingKey = #expect(throws: PeerSyncError.self) { try store.identity(withLabel: "d") }
        #expect(missingKey?.code == .corrupt)
    }

    @Test func cblStyleConveniences() throws {
        let dir = try TempDir()
        defer { dir.cleanup() }
        let store = TLSKeyStore(directory: dir.path)
        let created = try TLSIdentity.createIdentity(for: [.serverAuth, .clientAuth], attributes: [certAttrCommonName: "peer"],
                                                     label: "peer", in: store)
        #expect(try TLSIdentity.identity(withLabel: "peer", in: store)?.peerID == created.peerID)
        let p12 = try created.exportPKCS12(password: "pw")
        let imported = try TLSIdentity.importIdentity(withData: p12, password: "pw", label: "copy", in: store)
        #expect(imported.peerID == created.peerID)
        try TLSIdentity.deleteIdentity(withLabel: "peer", in: store)
        #expect(try store.labels() == ["copy"])
    }

    @Test func defaultDirectoryFollowsXDG() {
        #expect(TLSKeyStore.defaultDirectory(environment: ["XDG_DATA_HOME": "/data", "HOME": "/home/u"])
                == "/data/peersync/identities")
        #expect(TLSKeyStore.defaultDirectory(environment: ["HOME": "/home/u"]) == "/home/u/.local/share/peersync/identities")
        #expect(TLSKeyStore.defaultDirectory(environment: ["XDG_DATA_HOME": "relative", "HOME": "/home/u"])
                == "/home/u/.local/share/peersync/identities")
    }
}
