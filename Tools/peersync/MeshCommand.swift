import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncDiscovery
import PeerSyncMesh
import PeerSyncMeshWiFi
import PeerSyncReplicator
#if BLE
import PeerSyncMeshBluetooth
#endif

/// `peersync --db DIR [--backend B] [--collection SCOPE.NAME] mesh --group G --identity LABEL
///  [--keystore DIR] [--trust-root FILE]... [--port P] [--interface IF] [--transports LIST] [--duration S] [--json]`
///
/// Joins peer group G on the local network (DNS-SD through the system's avahi-daemon, links
/// over WebSocket with mutual TLS) and keeps the collection (default `_default._default`) in
/// sync with every peer of the group, multi-hop, until SIGINT/SIGTERM or `--duration S`
/// seconds (decimals allowed), then prints a summary, stops and exits 0.
///
/// - The identity (from the keystore, default `TLSKeyStore.defaultDirectory()`) must allow
///   client and server authentication (`peersync identity create` makes such identities by
///   default).
/// - Trust: peers whose certificate chains to one of the `--trust-root` PEM files (each may
///   hold several certificates; repeat the option for more files). Without it: the root of the
///   identity's own chain — peers issued by the same CA; a self-signed identity then trusts
///   nobody but itself (pass the peers' certificates or their CA with `--trust-root`).
/// - `--port P`: the TLS listener's port (default 0: a free one). `--interface IF`: listen,
///   dial and discover on that interface only (default: every interface Avahi uses).
/// - `--transports LIST`: `wifi` (default), `bluetooth` or `wifi,bluetooth` (needs the BLE
///   trait). Wi-Fi is preferred where both reach a peer. Where Bluetooth is unavailable (no
///   adapter, or a kernel without it) the mesh prints `status bluetooth: inactive (Bluetooth is
///   not available on this system: …)` and carries on over Wi-Fi; with Bluetooth alone it
///   exits 1 with that line.
///
/// Output on stdout, one line per event as it happens (lines are prefixes a script can match;
/// peer IDs in full):
/// ```
/// mesh <peerID> group G listening on port P
/// status wifi: active
/// peer <peerID> online on wifi
/// link <peerID> outgoing on wifi: busy
/// pulled 3 from <peerID> on wifi: doc-1 doc-2 doc-3
/// summary: peer <peerID>, 2 peers online, links: <peerID> (idle), …; 12 documents, pushed 3, pulled 9
/// ```
/// With `--json`, each of those is one JSON object instead, with an `"event"` key: `started`
/// (`peer`, `group`, `port`), `status` (`transport` or null, `active`, `error`), `peer` (`peer`,
/// `transport`, `online`), `link` (`peer`, `transport`, `outgoing`, `activity`, `error`),
/// `documents` (`peer`, `transport`, `direction` push|pull, `ids`, `errors`), `summary` (`peer`,
/// `online`: the peers seen, `links`: [{`peer`, `activity`}], `documents`: the collection's
/// count, `pushed`, `pulled`: documents moved without error during the run).
///
/// Exit status: 0 after a signal or the duration; 1 on an error (one line on stderr, e.g. an
/// unknown identity or a port in use); 2 for usage errors (with the usage text).
enum MeshCommand {

    private struct Settings {
        var database: String
        var backend: String?
        var collection: String?
        var group: String
        var identityLabel: String
        var keyStore: TLSKeyStore
        var trustRootFiles: [String]
        var wifi: MultipeerWiFiOptions
        var transports: Set<MultipeerTransport>
        var duration: Duration?
        var json: Bool
    }

    static func run(_ args: [String]) async throws -> Int32 {
        let settings: Settings
        do {
            settings = try parse(args)
        } catch {
            return PeerSyncCLI.reportUsageError(error.message, args: args)
        }
        do {
            try await mesh(settings)
            return 0
        } catch let error as PeerSyncError {
            ReplicationCLI.fail(error.message)
            return 1
        }
    }

    private static func parse(_ args: [String]) throws(ReplicationCLIUsageError) -> Settings {
        let options = try ReplicationCLIOptions(args, valueOptions: ["db", "backend", "collection", "group", "identity", "keystore",
                                                                     "trust-root", "port", "interface", "transports", "duration"],
                                                flagOptions: ["json"])
        guard options.positionals == ["mesh"] else {
            throw ReplicationCLIUsageError("unexpected arguments: \(options.positionals.filter { $0 != "mesh" }.joined(separator: " "))")
        }
        guard let database = options.value("db") else { throw ReplicationCLIUsageError("--db DIR is required") }
        guard let group = options.value("group") else { throw ReplicationCLIUsageError("--group G is required") }
        guard let label = options.value("identity") else { throw ReplicationCLIUsageError("--identity LABEL is required") }
        var wifi = MultipeerWiFiOptions(interface: options.value("interface"))
        if let text = options.value("port") {
            guard let port = UInt16(text) else { throw ReplicationCLIUsageError("--port must be a number from 0 to 65535") }
            wifi.port = port
        }
        var transports: Set<MultipeerTransport> = [.wifi]
        if let text = options.value("transports") {
            transports = []
            for name in text.split(separator: ",", omittingEmptySubsequences: false) {
                guard let transport = MultipeerTransport(rawValue: name.trimmingCharacters(in: .whitespaces).lowercased()) else {
                    throw ReplicationCLIUsageError("--transports takes wifi, bluetooth or wifi,bluetooth, got '\(text)'")
                }
                transports.insert(transport)
            }
        }
        var duration: Duration?
        if let text = options.value("duration") {
            guard let seconds = Double(text), seconds > 0, seconds.isFinite else {
                throw ReplicationCLIUsageError("--duration must be a positive number of seconds, got '\(text)'")
            }
            duration = .milliseconds(Int64((seconds * 1000).rounded(.up)))
        }
        return Settings(database: database, backend: options.value("backend"), collection: options.value("collection"),
                        group: group, identityLabel: label,
                        keyStore: options.value("keystore").map { TLSKeyStore(directory: $0) } ?? .default,
                        trustRootFiles: options.values("trust-root"), wifi: wifi, transports: transports, duration: duration,
                        json: options.flag("json"))
    }

    private static func mesh(_ settings: Settings) async throws {
        _ = try PeerGroupID(settings.group)   // before anything is opened or created
        guard let identity = try settings.keyStore.identity(withLabel: settings.identityLabel) else {
            throw PeerSyncError(.notFound, "no identity '\(settings.identityLabel)' in \(settings.keyStore.directory)")
        }
        let roots = try trustRoots(settings.trustRootFiles, identity: identity)
        let db = try await ReplicationCLI.openDatabase(settings.database, backend: settings.backend)
        do {
            let collection = try await DatabaseCommands.resolveCollection(settings.collection, in: db, create: true)
            var config = try MultipeerReplicatorConfiguration(
                peerGroupID: settings.group, identity: identity,
                authenticator: MultipeerCertificateAuthenticator(rootCerts: roots),
                collections: [MultipeerCollectionConfiguration(collection: collection)])
            config.transports = settings.transports
            let replicator = try makeReplicator(config, settings)
            let printer = MeshEventPrinter(json: settings.json)
            let tokens = printer.listen(to: replicator)
            try await replicator.start()
            printer.started(replicator, group: settings.group)
            if let duration = settings.duration {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { try? await Task.sleep(for: duration) }
                    group.addTask { await ReplicationCLI.waitForTerminationSignal() }
                    await group.next()
                    group.cancelAll()
                }
            } else {
                await ReplicationCLI.waitForTerminationSignal()
            }
            await printer.summary(replicator, collection: collection)
            await replicator.stop()
            for token in tokens { token.remove() }
            try await db.close()
        } catch {
            try? await db.close()
            throw error
        }
    }

    /// The replicator on the transports asked for; Bluetooth needs the BLE trait.
    private static func makeReplicator(_ config: MultipeerReplicatorConfiguration, _ settings: Settings) throws -> MultipeerReplicator {
        guard config.transports.contains(.bluetooth) else { return try MultipeerReplicator(config: config, wifi: settings.wifi) }
        #if BLE
        return try MultipeerReplicator(config: config, wifi: settings.wifi, bluetooth: MultipeerBluetoothOptions())
        #else
        throw PeerSyncError(.invalidArgument, "this peersync was built without Bluetooth (the BLE trait): use --transports wifi")
        #endif
    }

    /// The certificates of every `--trust-root` file, or the root of `identity`'s own chain.
    private static func trustRoots(_ files: [String], identity: TLSIdentity) throws -> [Certificate] {
        guard !files.isEmpty else { return [identity.certs[identity.certs.count - 1]] }
        var roots: [Certificate] = []
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw PeerSyncError(.notFound, "cannot read the trust root file \(file)", context: ["path": file])
            }
            let certificates = try Certificate.certificates(fromPEM: String(decoding: data, as: UTF8.self))
            guard !certificates.isEmpty else {
                throw PeerSyncError(.invalidCertificate, "no certificate in \(file)", context: ["path": file])
            }
            roots += certificates
        }
        return roots
    }
}
