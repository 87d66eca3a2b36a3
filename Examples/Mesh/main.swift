// Three peers in three processes find each other over DNS-SD (Avahi), write, and converge
// through a MultipeerReplicator. `Examples/Mesh/run` does it all inside a private avahi-daemon
// on loopback (see README.md); by hand, with an avahi-daemon on the system bus:
//
//   example-mesh setup DIR 3          a CA and three peer identities in DIR/keys
//   example-mesh peer DIR peer-1 3    (and peer-2, peer-3, each in its own terminal)
//
// A peer writes three tasks into DIR/<name>, joins the group "tasks-example", waits until it
// holds the tasks of all N peers (at most 60 s), prints them, and stops.

import Foundation
import PeerSync

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

#if Mesh
let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 3, let peerCount = Int(arguments.last ?? ""), peerCount > 0 else {
    say("usage: example-mesh setup DIR N | example-mesh peer DIR NAME N")
    exit(2)
}
let directory = arguments[1]
let keys = TLSKeyStore(directory: directory + "/keys")

do {
    switch arguments[0] {
    case "setup":
        // One certificate authority; every peer's identity is issued by it and carries both key
        // usages (a mesh peer is a TLS server and a TLS client).
        let ca = try TLSIdentity.createIssuer(attributes: [certAttrCommonName: "Example mesh CA"])
        try keys.save(ca, label: "ca", overwrite: true)
        for index in 1...peerCount {
            let identity = try TLSIdentity.createIdentity(for: [.clientAuth, .serverAuth],
                                                          attributes: [certAttrCommonName: "peer-\(index)"], issuer: ca)
            try keys.save(identity, label: "peer-\(index)", overwrite: true)
        }
        say("made a CA and \(peerCount) peer identities in \(keys.directory)")

    case "peer" where arguments.count == 4:
        let name = arguments[2]
        guard let identity = try keys.identity(withLabel: name), let ca = try keys.certificates(withLabel: "ca")?.first else {
            throw PeerSyncError(.notFound, "run 'example-mesh setup \(directory) \(peerCount)' first")
        }
        let db = try await Database(name: name, config: DatabaseConfiguration(directory: directory + "/" + name))
        let tasks = try db.defaultCollection()
        for index in 1...3 {
            var task = MutableDocument(id: "\(name)-task-\(index)")
            task.setString("Task \(index) of \(name)", forKey: "title")
            try await tasks.save(document: &task)
        }

        // Peers of the group whose certificate chains to the CA are trusted, on both ends.
        let config = try MultipeerReplicatorConfiguration(
            peerGroupID: "tasks-example", identity: identity,
            authenticator: MultipeerCertificateAuthenticator(rootCerts: [ca]),
            collections: MultipeerCollectionConfiguration.fromCollections([tasks]))
        let replicator = try MultipeerReplicator(config: config)
        let token = replicator.addPeerDiscoveryStatusListener { change in
            if change.online { say("\(name): found peer \(change.peerID.rawValue.prefix(12))… on \(change.transport)") }
        }
        try await replicator.start()
        say("\(name): peer \(replicator.peerID.rawValue.prefix(12))… joined tasks-example, wrote 3 tasks")

        let expected = 3 * peerCount
        let deadline = ContinuousClock.now + .seconds(60)
        while try await tasks.count < expected, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        let titles = try await tasks.allDocuments().compactMap { $0.string(forKey: "title") }.sorted()
        say("\(name): holds \(titles.count) of \(expected) tasks: \(titles.joined(separator: ", "))")
        token.remove()
        await replicator.stop()
        try await db.close()
        exit(titles.count == expected ? 0 : 1)

    default:
        say("usage: example-mesh setup DIR N | example-mesh peer DIR NAME N")
        exit(2)
    }
} catch {
    say("example-mesh: \(error)")
    exit(1)
}
#else
say("example-mesh needs the Mesh trait: swift build --traits Mesh (Tools/test and Examples/Mesh/run enable it)")
exit(2)
#endif
