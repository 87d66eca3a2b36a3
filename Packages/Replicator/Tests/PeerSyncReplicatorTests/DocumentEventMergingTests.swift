import PeerSyncCore
@testable import PeerSyncReplicator
import Testing

/// A pull reports each stored revision as its own event; events waiting on the listener
/// queue together reach the listeners merged, in order, by direction.
@Suite struct DocumentEventMergingTests {
    private func event(_ isPush: Bool, _ ids: String...) -> DocumentReplication {
        DocumentReplication(isPush: isPush, documents: ids.map {
            ReplicatedDocument(id: $0, collection: "_default._default", flags: [], error: nil)
        })
    }

    @Test func consecutiveEventsOfOneDirectionMergeInOrder() {
        let merged = DocumentReplication.merged([
            event(false, "a"), event(false, "b", "c"), event(true, "d"), event(true, "e"), event(false, "f"),
        ])
        #expect(merged.map(\.isPush) == [false, true, false])
        #expect(merged.map { $0.documents.map(\.id) } == [["a", "b", "c"], ["d", "e"], ["f"]])
        #expect(DocumentReplication.merged([]).isEmpty)
        #expect(DocumentReplication.merged([event(false, "x")]).map { $0.documents.map(\.id) } == [["x"]])
    }
}
