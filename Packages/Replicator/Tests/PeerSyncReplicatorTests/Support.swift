import PeerSyncBLIP
import PeerSyncCore
import PeerSyncReplicatorTestSupport
import Synchronization

// The peers, syncs and snapshots these tests use are in PeerSyncReplicatorTestSupport (shared
// with Tests/PeerSyncConvergenceTests); what only these tests use is here.

final class Counter: Sendable {
    let value = Mutex(0)
}

/// The answers of a `changes`/`proposeChanges` reply, padded with the 0s a peer may leave out
/// at the end, to `count` entries.
func replyAnswers(_ reply: BLIPMessage, count: Int) throws -> [JSONValue] {
    var out = try JSONValue(parsing: reply.body).arrayValue ?? []
    while out.count < count { out.append(.int(0)) }
    return out
}
