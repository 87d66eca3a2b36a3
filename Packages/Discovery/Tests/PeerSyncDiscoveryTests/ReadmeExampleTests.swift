import PeerSyncCore
import PeerSyncDiscovery
import Testing

/// The example in Packages/Discovery/README.md, with `print` collected.
@Test func readmeExample() async throws {
    var printed: [String] = []
    func print(_ item: Any) { printed.append("\(item)") }

    let registry = try InProcessDiscoveryRegistry()
    let alice = InProcessDiscovery(registry: registry, hostName: "alice")
    let bob = InProcessDiscovery(registry: registry, hostName: "bob")
    let group = try PeerGroupID("team")

    let browser = try await bob.browse(group: group)
    let publication = try await alice.publish(
        PeerAnnouncement(peerID: PeerID("alice-1"), group: group, port: 4984, metadata: PeerMetadata(["name": "Alice"])))
    try await publication.updateMetadata(PeerMetadata(["name": "Alice B."]))
    await publication.unpublish()

    for await event in browser {
        print(event)
        if case .disappeared = event { break }
    }
    await browser.stop()
    await alice.shutdown()
    await bob.shutdown()

    #expect(printed == [
        "appeared alice-1 'alice-1' in team at alice#4984 [name=Alice] via inProcess",
        "updated alice-1 'alice-1' in team at alice#4984 [name=Alice B.] via inProcess",
        "disappeared alice-1 'alice-1' in team at alice#4984 [name=Alice B.] via inProcess",
    ])
}
