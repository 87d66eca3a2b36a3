import Foundation
import PeerSyncAuth
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncListener

/// `peersync --db DIR [--backend B] serve [--port P] [--no-tls] [--identity LABEL] [--keystore DIR]
///  [--user U --password P] [--read-only] [--delta-sync] [--rest] [--name DBNAME] [--interface IF]`
///
/// Serves the database's default collection on `/<DBNAME>/_blipsync`, and the REST API on the
/// same port only with `--rest`. DBNAME defaults to the folder's name made valid
/// (``URLEndpointListener/defaultDatabaseName(for:)``); an explicit `--name` must match
/// `[a-z][a-z0-9_$()+-]*` (else exit 1). Prints exactly one line `listening on <url>`
/// on stdout when ready, then serves until SIGINT/SIGTERM (exit 0). Errors: one line on
/// stderr, exit 1 (2 for usage errors).
enum ServeCommand {

    static func run(_ args: [String]) async throws -> Int32 {
        let options: ReplicationCLIOptions
        do {
            options = try ReplicationCLIOptions(args, valueOptions: ["db", "backend", "port", "identity", "keystore", "user",
                                                                     "password", "name", "interface", "collection"],
                                                flagOptions: ["no-tls", "read-only", "delta-sync", "rest"])
            guard options.positionals == ["serve"] else { throw ReplicationCLIUsageError("unexpected arguments: \(options.positionals.dropFirst().joined(separator: " "))") }
            guard options.value("db") != nil else { throw ReplicationCLIUsageError("--db DIR is required") }
            guard (options.value("user") == nil) == (options.value("password") == nil) else {
                throw ReplicationCLIUsageError("--user and --password go together")
            }
            if options.flag("no-tls") && options.value("identity") != nil {
                throw ReplicationCLIUsageError("--identity needs TLS (drop --no-tls)")
            }
        } catch let error as ReplicationCLIUsageError {
            return PeerSyncCLI.reportUsageError(error.message, args: args)
        }
        var port = 0
        if let p = options.value("port") {
            guard let value = Int(p), (0...65535).contains(value) else {
                return PeerSyncCLI.reportUsageError("--port must be a number from 0 to 65535", args: args)
            }
            port = value
        }

        do {
            let db = try await ReplicationCLI.openDatabase(options.value("db") ?? "", backend: options.value("backend"))
            let collection = try db.defaultCollection()
            var config = URLEndpointListenerConfiguration(collections: [collection])
            config.port = port
            config.disableTLS = options.flag("no-tls")
            config.readOnly = options.flag("read-only")
            config.enableDeltaSync = options.flag("delta-sync")
            config.enableREST = options.flag("rest")
            config.networkInterface = options.value("interface")
            config.databaseName = options.value("name")
            if let user = options.value("user"), let password = options.value("password") {
                config.authenticator = ListenerPasswordAuthenticator.matching(username: user, password: password)
            }
            if let label = options.value("identity") {
                let store = options.value("keystore").map { TLSKeyStore(directory: $0) } ?? .default
                guard let identity = try store.identity(withLabel: label) else {
                    throw PeerSyncError(.notFound, "no identity '\(label)' in \(store.directory)")
                }
                config.tlsIdentity = identity
            }
            let listener = try URLEndpointListener(config: config)
            try await listener.start()
            let url = listener.urls.first
            ReplicationCLI.emit("listening on \(url?.absoluteString ?? "port \(listener.port ?? 0)")")
            if let identity = listener.tlsIdentity, ReplicationCLI.stderrIsTerminal {
                FileHandle.standardError.write(Data("certificate SHA-256 \(identity.certificate.peerID)\n".utf8))
            }
            await ReplicationCLI.waitForTerminationSignal()
            await listener.stop()
            try await db.close()
            return 0
        } catch let error as PeerSyncError {
            ReplicationCLI.fail(error.message)
            return 1
        } catch let error as ReplicationCLIUsageError {
            return PeerSyncCLI.reportUsageError(error.message, args: args)
        }
    }
}
