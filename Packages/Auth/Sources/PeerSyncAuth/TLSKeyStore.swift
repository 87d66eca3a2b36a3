import Foundation
import PeerSyncCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A directory that keeps identities under labels — the keychain Couchbase Lite uses on
/// Apple platforms, which Linux lacks.
///
/// Layout and protection scheme:
/// - `<label>.pem`: the certificate chain, leaf first (public data).
/// - `<label>.key.pem`: the private key as encrypted PKCS#8 PEM: AES-256-CBC under PBES2 with
///   PBKDF2-HMAC-SHA256 (OpenSSL 3 defaults), keyed by the keystore passphrase.
/// - `.keystore-secret`: the passphrase, 32 random bytes as hex, created on first use, unless
///   the store was opened with an explicit `passphrase` (then no secret file is used).
/// - Every file is created `0600` and written atomically (temporary file + rename); a
///   directory the store creates gets `0700`. An existing directory's mode is left alone.
///
/// With the secret file next to the keys, encryption protects a key file that leaks on its
/// own (a backup, a copy); the file permissions protect the directory. Pass a `passphrase`
/// kept elsewhere for protection against someone who can read the whole directory.
///
/// Labels are 1–100 characters of `A–Z a–z 0–9 . _ -`, not starting with `.` and not ending
/// in `.key`. Methods are synchronous file-system calls: call them off latency-sensitive
/// tasks. Concurrent use from several processes is safe for reads; two writers of the same
/// label race (the last rename wins).
public struct TLSKeyStore: Sendable {
    /// The directory path.
    public let directory: String
    private let passphrase: String?

    /// A store in `directory` (created on the first save). `passphrase` replaces the
    /// `.keystore-secret` file.
    public init(directory: String, passphrase: String? = nil) {
        self.directory = directory
        self.passphrase = passphrase
    }

    /// The default store: `$XDG_DATA_HOME/peersync/identities`, or
    /// `~/.local/share/peersync/identities`.
    public static var `default`: TLSKeyStore { TLSKeyStore(directory: defaultDirectory()) }

    /// The default directory for the given environment.
    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            return xdg + "/peersync/identities"
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/share/peersync/identities"
    }

    /// Checks a label; throws `PeerSyncError.Code.invalidArgument`.
    public static func validate(label: String) throws(PeerSyncError) {
        let allowed = label.unicodeScalars.allSatisfy { c in
            (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") || c == "." || c == "_" || c == "-"
        }
        guard !label.isEmpty, label.count <= 100, allowed, !label.hasPrefix("."), !label.hasSuffix(".key") else {
            throw PeerSyncError(.invalidArgument,
                                "an identity label is 1-100 characters of A-Z a-z 0-9 . _ -, not starting with '.' or ending in '.key'",
                                context: ["label": String(label.prefix(100))])
        }
    }

    private func certPath(_ label: String) -> String { directory + "/" + label + ".pem" }
    private func keyPath(_ label: String) -> String { directory + "/" + label + ".key.pem" }
    private var secretPath: String { directory + "/.keystore-secret" }

    /// Saves `identity` under `label`.
    /// - Throws: `PeerSyncError.Code.identityExists` when the label is taken and
    ///   `overwrite` is false; `PeerSyncError.Code.io` on file-system errors.
    public func save(_ identity: TLSIdentity, label: String, overwrite: Bool = false) throws(PeerSyncError) {
        try TLSKeyStore.validate(label: label)
        try createDirectory()
        if !overwrite, FileManager.default.fileExists(atPath: certPath(label)) {
            throw PeerSyncError(.identityExists, "an identity with this label already exists", context: ["label": label])
        }
        let keyPEM = try identity.privateKeyPEM(password: try secret(create: true))
        // Key first: the certificate file is what marks the label as present.
        try FileIO.writeAtomically(Array(keyPEM.utf8), to: keyPath(label))
        try FileIO.writeAtomically(Array(identity.certificatesPEM().utf8), to: certPath(label))
    }

    /// The identity saved under `label`, or `nil` if there is none.
    /// - Throws: `PeerSyncError.Code.wrongPassword` when the key does not decrypt with this
    ///   store's passphrase, `PeerSyncError.Code.invalidCertificate` for corrupt files.
    public func identity(withLabel label: String) throws(PeerSyncError) -> TLSIdentity? {
        try TLSKeyStore.validate(label: label)
        guard let certText = try FileIO.readText(certPath(label)) else { return nil }
        guard let keyText = try FileIO.readText(keyPath(label)) else {
            throw PeerSyncError(.corrupt, "the identity's private key file is missing", context: ["label": label])
        }
        let certificates = try Certificate.certificates(fromPEM: certText)
        do {
            return try TLSIdentity(certificates: certificates, privateKeyPEM: keyText, password: try secret(create: false))
        } catch {
            throw error.with("label", label)
        }
    }

    /// The certificate chain saved under `label` (leaf first), read without the private key:
    /// no passphrase is needed, so it suits listing and showing identities. `nil` if there is
    /// none.
    /// - Throws: `PeerSyncError.Code.invalidArgument` for a malformed label,
    ///   `PeerSyncError.Code.invalidCertificate` for a malformed certificate file,
    ///   `PeerSyncError.Code.io` or `PeerSyncError.Code.corrupt` when it cannot be read.
    public func certificates(withLabel label: String) throws(PeerSyncError) -> [Certificate]? {
        try TLSKeyStore.validate(label: label)
        guard let certText = try FileIO.readText(certPath(label)) else { return nil }
        return try Certificate.certificates(fromPEM: certText)
    }

    /// Deletes the identity saved under `label`.
    /// - Throws: `PeerSyncError.Code.notFound` if there is none.
    public func deleteIdentity(withLabel label: String) throws(PeerSyncError) {
        try TLSKeyStore.validate(label: label)
        guard FileManager.default.fileExists(atPath: certPath(label)) else {
            throw PeerSyncError(.notFound, "no identity with this label", context: ["label": label])
        }
        try FileIO.remove(certPath(label))
        try FileIO.remove(keyPath(label))
    }

    /// The labels of all saved identities, sorted. An absent directory holds none.
    public func labels() throws(PeerSyncError) -> [String] {
        guard FileManager.default.fileExists(atPath: directory) else { return [] }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw PeerSyncError(.io, "cannot list the keystore directory", context: ["path": directory])
        }
        return names.filter { $0.hasSuffix(".pem") && !$0.hasSuffix(".key.pem") && !$0.hasPrefix(".") }
            .map { String($0.dropLast(4)) }
            .filter { (try? TLSKeyStore.validate(label: $0)) != nil }
            .sorted()
    }

    // MARK: Internals

    private func createDirectory() throws(PeerSyncError) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw PeerSyncError(.io, "the keystore path is not a directory", context: ["path": directory])
            }
            return
        }
        let parent = (directory as NSString).deletingLastPathComponent
        if !parent.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            } catch {
                throw PeerSyncError(.io, "cannot create the keystore's parent directory", context: ["path": parent])
            }
        }
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw FileIO.errnoError("cannot create the keystore directory", directory)
        }
    }

    /// The passphrase for private keys: the explicit one, or the secret file's content
    /// (created when `create` is true and it does not exist yet).
    private func secret(create: Bool) throws(PeerSyncError) -> String {
        if let passphrase { return passphrase }
        if let text = try FileIO.readText(secretPath) {
            let secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard secret.count >= 32 else {
                throw PeerSyncError(.corrupt, "the keystore secret file is too short", context: ["path": secretPath])
            }
            return secret
        }
        guard create else {
            throw PeerSyncError(.corrupt, "the keystore secret file is missing", context: ["path": secretPath])
        }
        let fresh = try randomBytes(32).hexString + "\n"
        // Publish with link(2): if another process created it first, use theirs.
        let temp = secretPath + ".tmp-\(UUID().uuidString)"
        try FileIO.writeNew(Array(fresh.utf8), to: temp)
        defer { unlink(temp) }
        if link(temp, secretPath) != 0 && errno != EEXIST {
            throw FileIO.errnoError("cannot create the keystore secret file", secretPath)
        }
        return try secret(create: false)
    }
}

/// Small POSIX file helpers with typed errors.
enum FileIO {
    static func errnoError(_ what: String, _ path: String) -> PeerSyncError {
        let code = errno
        return PeerSyncError(.io, "\(what): \(String(cString: strerror(code)))", context: ["path": path])
    }

    /// Creates `path` (must not exist) with mode 0600 and writes `bytes`, synced.
    static func writeNew(_ bytes: [UInt8], to path: String) throws(PeerSyncError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 { throw errnoError("cannot create file", path) }
        defer { _ = close(fd) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw errnoError("cannot write file", path)
            }
            offset += n
        }
        if fsync(fd) != 0 { throw errnoError("cannot sync file", path) }
    }

    /// Writes a 0600 file via a temporary file and rename.
    static func writeAtomically(_ bytes: [UInt8], to path: String) throws(PeerSyncError) {
        let temp = path + ".tmp-\(UUID().uuidString)"
        do throws(PeerSyncError) {
            try writeNew(bytes, to: temp)
            if rename(temp, path) != 0 { throw errnoError("cannot rename file into place", path) }
        } catch {
            unlink(temp)
            throw error
        }
    }

    /// The file's text, or `nil` if it does not exist.
    static func readText(_ path: String) throws(PeerSyncError) -> String? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PeerSyncError(.io, "cannot read file", context: ["path": path])
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw PeerSyncError(.corrupt, "file is not UTF-8 text", context: ["path": path])
        }
        return text
    }

    static func remove(_ path: String) throws(PeerSyncError) {
        if unlink(path) != 0 && errno != ENOENT { throw errnoError("cannot delete file", path) }
    }
}

extension TLSIdentity {
    /// Creates an identity (see ``createIdentity(for:attributes:expiration:issuer:notBefore:keyType:)``)
    /// and saves it in `keyStore` under `label`.
    public static func createIdentity(for keyUsages: KeyUsages, attributes: [String: String], expiration: Date? = nil,
                                      issuer: TLSIdentity? = nil, label: String,
                                      in keyStore: TLSKeyStore = .default) throws(PeerSyncError) -> TLSIdentity {
        try TLSKeyStore.validate(label: label)
        let identity = try createIdentity(for: keyUsages, attributes: attributes, expiration: expiration, issuer: issuer)
        try keyStore.save(identity, label: label)
        return identity
    }

    /// The identity saved under `label` in `keyStore`, or `nil`.
    public static func identity(withLabel label: String, in keyStore: TLSKeyStore = .default) throws(PeerSyncError) -> TLSIdentity? {
        try keyStore.identity(withLabel: label)
    }

    /// Deletes the identity saved under `label`; throws `PeerSyncError.Code.notFound` if absent.
    public static func deleteIdentity(withLabel label: String, in keyStore: TLSKeyStore = .default) throws(PeerSyncError) {
        try keyStore.deleteIdentity(withLabel: label)
    }

    /// Imports PKCS#12 or PEM data (see ``importIdentity(withData:password:)``) and saves it
    /// under `label`.
    public static func importIdentity(withData data: [UInt8], password: String?, label: String,
                                      in keyStore: TLSKeyStore = .default) throws(PeerSyncError) -> TLSIdentity {
        try TLSKeyStore.validate(label: label)
        let identity = try importIdentity(withData: data, password: password)
        try keyStore.save(identity, label: label)
        return identity
    }
}
