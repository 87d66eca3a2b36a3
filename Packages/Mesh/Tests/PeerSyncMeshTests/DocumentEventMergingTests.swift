import PeerSyncCore
import PeerSyncDiscovery
@testable import PeerSyncMesh
import Testing

/// Per-document events waiting on the mesh's listener queue together reach the listeners
/// merged — by peer, transport and direction, documents in order.
@Suite struct MeshDocumentEventMergingTests {
    @Test func consecutiveEventsOfOnePeerTransportAndDirectionMergeInOrder() throws {
        let (p, q) = (try PeerID("p"), try PeerID("q"))
        func event(_ peer: PeerID, _ transport: MultipeerTransport, _ isPush: Bool, _ id: String) -> PeerDocumentReplication {
            PeerDocumentReplication(peerID: peer, transport: transport, isPush: isPush, documents: [
                MultipeerReplicatedDocument(scope: "_default", collection: "_default", id: id, flags: [], error: nil),
            ])
        }
        let merged = PeerDocumentReplication.merged([
            event(p, .wifi, false, "a"), event(p, .wifi, false, "b"), event(q, .wifi, false, "c"),
            event(q, .bluetooth, false, "d"), event(q, .bluetooth, true, "e"), event(q, .bluetooth, true, "f"),
        ])
        #expect(merged.map { $0.documents.map(\.id) } == [["a", "b"], ["c"], ["d"], ["e", "f"]])
        #expect(merged.map(\.peerID) == [p, q, q, q])
    }
}
