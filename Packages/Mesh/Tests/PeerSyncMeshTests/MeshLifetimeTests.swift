import PeerSyncCore
@testable import PeerSyncMesh
import PeerSyncReplicator
import Testing

/// What a stopped run leaves behind: nothing of its links.
@Suite struct MeshLifetimeTests {
    /// A weak reference to a replicator.
    final class WeakReplicator: Sendable {
        private struct Box { weak var value: Replicator? }
        private let box: LockedValue<Box>

        init(_ replicator: Replicator) { box = LockedValue(Box(value: replicator)) }

        var isAlive: Bool { box.withLock { $0.value != nil } }
    }

    /// Weak references to the outgoing links' replicators of `peers` (no strong one escapes).
    static func weakLinkReplicators(_ peers: [MeshPeer]) -> [WeakReplicator] {
        peers.flatMap { $0.replicator.outgoingLinkReplicators.map(WeakReplicator.init) }
    }

    /// The replicator of an outgoing link held listeners that captured the link, and the link
    /// holds the replicator: every link's replicator (and its connection) outlived the run.
    @Test func stoppedRunReleasesItsLinksReplicators() async throws {
        try await withMesh(3) { mesh in
            try await mesh.startAll()
            try await mesh.peers[0].save("one", ["n": 1])
            try await mesh.expectConvergence(expecting: 1, within: .seconds(30), "not converged")
            let links = Self.weakLinkReplicators(mesh.peers)
            #expect(!links.isEmpty)
            for peer in mesh.peers { await peer.replicator.stop() }
            #expect(try await eventually(.seconds(30)) { links.allSatisfy { !$0.isAlive } },
                    "\(links.filter(\.isAlive).count) of \(links.count) link replicators outlived the stopped run")
        }
    }
}
