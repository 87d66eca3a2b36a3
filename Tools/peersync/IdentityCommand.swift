import Foundation
import PeerSyncAuth
import PeerSyncCore

/// `peersync identity ...`: create, list, export, import and delete TLS identities in a
/// keystore directory (`TLSKeyStore`), through PeerSyncAuth's public API only.
///
/// ```
/// peersync identity create --label L [--keystore DIR] [--self-signed | --issuer LABEL | --ca]
///                          [--usage server|client|both] [--cn NAME] [--days N]
///                          [--hostname NAME] [--ip ADDRESS]
/// peersync identity list [--keystore DIR]
/// peersync identity export --label L [--keystore DIR] (--pem | --p12 FILE --password P)
/// peersync identity import FILE --label L [--keystore DIR] [--password P]
/// peersync identity delete --label L [--keystore DIR]
/// ```
/// `--ca` creates an issuer (certificate authority) for `--issuer`; `--hostname`/`--ip` add
/// subject alternative names a TLS client checks. Defaults: self-signed, usage `both`, CN =
/// label, 365 days, keystore `TLSKeyStore.defaultDirectory()`. `export --pem`
/// prints the certificate chain only, never the key. `import` reads PKCS#12 or PEM.
///
/// Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.
enum IdentityCommand {
    /// The subcommands (each has a ``CommandHelp`` entry).
    static let subcommands = ["create", "list", "export", "import", "delete"]

    /// Runs the command; `args` are the words after `identity` (a leading `identity` is
    /// skipped). Prints to standard output and standard error.
    static func run(_ args: [String]) -> Int32 {
        run(args, output: { FileHandle.standardOutput.write(Data($0.utf8)) },
            errorOutput: { FileHandle.standardError.write(Data($0.utf8)) })
    }

    /// Runs the command with explicit output sinks (each call receives whole lines,
    /// newline included).
    static func run(_ args: [String], output: (String) -> Void, errorOutput: (String) -> Void) -> Int32 {
        var words = args
        if words.first == "identity" { words.removeFirst() }
        guard let sub = words.first else {
            errorOutput("peersync identity: missing subcommand\n" + usage)
            return 2
        }
        words.removeFirst()
        do {
            switch sub {
            case "create": try create(try Options(words, flags: ["--self-signed", "--ca"],
                                                   values: ["--label", "--keystore", "--issuer", "--usage", "--cn",
                                                            "--days", "--hostname", "--ip"]), output)
            case "list": try list(try Options(words, flags: [], values: ["--keystore"]), output)
            case "export": try export(try Options(words, flags: ["--pem"],
                                                   values: ["--label", "--keystore", "--p12", "--password"]), output)
            case "import": try importIdentity(try Options(words, flags: [], values: ["--label", "--keystore", "--password"],
                                                          positional: 1), output)
            case "delete": try delete(try Options(words, flags: [], values: ["--label", "--keystore"]), output)
            case "help", "--help", "-h":
                output(usage)
                return 0
            default:
                throw UsageError("unknown subcommand '\(sub)'")
            }
            return 0
        } catch let error as UsageError {
            errorOutput("peersync identity: \(error.message)\n" + usage)
            return 2
        } catch let error as PeerSyncError {
            errorOutput("peersync identity: \(oneLine(error.description))\n")
            return 1
        } catch {
            errorOutput("peersync identity: \(oneLine(String(describing: error)))\n")
            return 1
        }
    }

    /// Every identity subcommand's usage (from ``CommandHelp``), newline-terminated.
    static var usage: String { (CommandHelp.usage(for: ["identity"]) ?? "") + "\n" }

    // MARK: Subcommands

    private static func create(_ o: Options, _ output: (String) -> Void) throws {
        let label = try o.required("--label")
        let modes = [o.flags.contains("--self-signed"), o.values["--issuer"] != nil, o.flags.contains("--ca")]
        guard modes.filter({ $0 }).count <= 1 else {
            throw UsageError("--self-signed, --issuer and --ca exclude each other")
        }
        var usages: KeyUsages = [.serverAuth, .clientAuth]
        if let usage = o.values["--usage"] {
            switch usage {
            case "server": usages = .serverAuth
            case "client": usages = .clientAuth
            case "both": usages = [.serverAuth, .clientAuth]
            default: throw UsageError("--usage must be server, client or both")
            }
            if o.flags.contains("--ca") { throw UsageError("--usage does not apply to --ca") }
        }
        var days = 365
        if let text = o.values["--days"] {
            guard let n = Int(text), (1...36500).contains(n) else { throw UsageError("--days must be 1...36500") }
            days = n
        }
        var attributes = [certAttrCommonName: o.values["--cn"] ?? label]
        if let host = o.values["--hostname"] { attributes[certAttrHostname] = host }
        if let ip = o.values["--ip"] { attributes[certAttrIPAddress] = ip }
        let store = o.keyStore
        try TLSKeyStore.validate(label: label)
        if try store.labels().contains(label) {
            throw PeerSyncError(.identityExists, "an identity with this label already exists", context: ["label": label])
        }
        let expiration = Date(timeIntervalSinceNow: TimeInterval(days) * 86400)
        let identity: TLSIdentity
        if o.flags.contains("--ca") {
            identity = try TLSIdentity.createIssuer(attributes: attributes, expiration: expiration)
        } else if let issuerLabel = o.values["--issuer"] {
            guard let issuer = try store.identity(withLabel: issuerLabel) else {
                throw PeerSyncError(.notFound, "no issuer identity with this label", context: ["label": issuerLabel])
            }
            guard issuer.certificate.isCertificateAuthority else {
                throw PeerSyncError(.invalidArgument, "the issuer '\(issuerLabel)' is not a certificate authority; "
                                    + "create one with 'peersync identity create --label LABEL --ca'")
            }
            identity = try TLSIdentity.createIdentity(for: usages, attributes: attributes, expiration: expiration, issuer: issuer)
        } else {
            identity = try TLSIdentity.createIdentity(for: usages, attributes: attributes, expiration: expiration)
        }
        try store.save(identity, label: label)
        output("created \(label) \(identity.peerID)\n")
    }

    private static func list(_ o: Options, _ output: (String) -> Void) throws {
        let store = o.keyStore
        let formatter = ISO8601DateFormatter()
        for label in try store.labels() {
            // Listing needs only public data: read the chain, not the key. A damaged entry is
            // reported in place and does not hide the others.
            let cert: Certificate
            do throws(PeerSyncError) {
                guard let first = try store.certificates(withLabel: label)?.first else {
                    throw PeerSyncError(.invalidCertificate, "no certificate in the file")
                }
                cert = first
            } catch {
                output("\(label)\tunreadable: \(oneLine(error.message))\n")
                continue
            }
            let kind = cert.isCertificateAuthority ? "ca" : cert.keyUsages.description
            let issuer = cert.isSelfSigned ? "self-signed" : "issuer=\(cert.issuerCommonName ?? cert.issuerName)"
            output("\(label)\tCN=\(cert.commonName ?? "")\t\(kind)\t\(issuer)\texpires=\(formatter.string(from: cert.notAfter))\t\(cert.peerID)\n")
        }
    }

    private static func export(_ o: Options, _ output: (String) -> Void) throws {
        let label = try o.required("--label")
        let pem = o.flags.contains("--pem")
        let p12 = o.values["--p12"]
        guard pem != (p12 != nil) else { throw UsageError("export needs exactly one of --pem or --p12 FILE") }
        if pem, o.values["--password"] != nil { throw UsageError("--password applies to --p12 only") }
        let password = p12 == nil ? nil : try o.required("--password")
        guard let identity = try o.keyStore.identity(withLabel: label) else {
            throw PeerSyncError(.notFound, "no identity with this label", context: ["label": label])
        }
        if pem {
            output(identity.certificatesPEM())
        } else if let file = p12, let password {
            try identity.exportPKCS12(toFile: file, password: password, friendlyName: label)
            output("exported \(label) to \(file)\n")
        }
    }

    private static func importIdentity(_ o: Options, _ output: (String) -> Void) throws {
        guard let file = o.positional.first else { throw UsageError("import needs a FILE") }
        let label = try o.required("--label")
        try TLSKeyStore.validate(label: label)
        guard let data = FileManager.default.contents(atPath: file) else {
            throw PeerSyncError(.io, "cannot read file", context: ["path": file])
        }
        let identity = try TLSIdentity.importIdentity(withData: [UInt8](data), password: o.values["--password"])
        try o.keyStore.save(identity, label: label)
        output("imported \(label) \(identity.peerID)\n")
    }

    private static func delete(_ o: Options, _ output: (String) -> Void) throws {
        let label = try o.required("--label")
        try o.keyStore.deleteIdentity(withLabel: label)
        output("deleted \(label)\n")
    }

    private static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).joined(separator: " ")
    }

    // MARK: Argument parsing

    /// The words after the subcommand: `--flag`, `--name value` (once each) and up to
    /// `positional` other words. Mistakes are ``UsageError``s (exit 2).
    struct Options {
        var flags: Set<String> = []
        var values: [String: String] = [:]
        var positional: [String] = []

        init(_ words: [String], flags allowedFlags: Set<String>, values allowedValues: Set<String>,
             positional maxPositional: Int = 0) throws(UsageError) {
            var i = 0
            while i < words.count {
                let word = words[i]
                if allowedFlags.contains(word) {
                    flags.insert(word)
                } else if allowedValues.contains(word) {
                    guard i + 1 < words.count else { throw UsageError("\(word) needs a value") }
                    guard values[word] == nil else { throw UsageError("\(word) given twice") }
                    values[word] = words[i + 1]
                    i += 1
                } else if word.hasPrefix("-") && word.count > 1 {
                    throw UsageError("unknown option '\(word)'")
                } else {
                    guard positional.count < maxPositional else { throw UsageError("unexpected argument '\(word)'") }
                    positional.append(word)
                }
                i += 1
            }
        }

        func required(_ name: String) throws(UsageError) -> String {
            guard let value = values[name] else { throw UsageError("missing \(name)") }
            return value
        }

        var keyStore: TLSKeyStore {
            TLSKeyStore(directory: values["--keystore"] ?? TLSKeyStore.defaultDirectory())
        }
    }
}
