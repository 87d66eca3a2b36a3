import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncReplicatorTestSupport
import PeerSyncTransport
import Synchronization
import Testing

/// The payload of a BLIP error response (ERR frame; its properties hold `Error-Code`), or
/// "compressed", or nil for any other message. Frame headers are never compressed:
/// `varint number, flags byte`; type 2 in the low bits = ERR.
func errorFramePayload(_ message: TransportMessage) -> String? {
    guard case .binary(let bytes) = message else { return nil }
    var i = 0
    while i < bytes.count, bytes[i] & 0x80 != 0 { i += 1 }
    i += 1
    guard i < bytes.count, bytes[i] & 0x07 == 2 else { return nil }
    if bytes[i] & 0x08 != 0 { return "compressed" }
    return String(decoding: bytes[(i + 1)...].dropLast(4), as: UTF8.self)
}

@Suite struct DeltaResendTests {
    /// The receiver lost the delta's base (purged the document) between two pushes of one
    /// continuous session: it answers the delta `rev` with `HTTP`/422, the pusher resends the
    /// whole body, and both databases end identical.
    @Test func refusedDeltaIsResentWhole() async throws {
        try await withPeers(2) { p in
            try p[1].listen(options: .init(enableDeltaSync: true))
            let a = try p[0].defaultCollection, b = try p[1].defaultCollection
            let body1 = DeltaSyncTests.bigBody(version: 1)
            let rev1 = try await save(a, "big", body1).revisionID

            var cfg = ReplicatorConfiguration(target: p[1].endpoint)
            cfg.replicatorType = .push
            cfg.continuous = true
            cfg.replyTimeout = slow(.seconds(10))
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollection(a)
            let errorFrames = Mutex<[String]>([])
            let connections = Mutex(0)
            let connect = p[1].connector()
            let replicator = try Replicator(config: cfg, connector: { config in
                connections.withLock { $0 += 1 }
                return MessageConnectionTap(try await connect(config), onReceive: { m in
                    if let payload = errorFramePayload(m) { errorFrames.withLock { $0.append(payload) } }
                })
            })
            replicator.start()
            #expect(try await eventually { try await b.document(id: "big")?.revisionID == rev1 })

            // The receiver loses the base; then a small edit goes out as a delta against it.
            try await b.purge(id: "big")
            var body2 = body1
            body2["version"] = 2
            let rev2 = try await save(a, "big", body2).revisionID
            #expect(try await eventually { try await b.document(id: "big")?.revisionID == rev2 })
            replicator.stop()
            await replicator.waitUntilStopped()

            #expect(try await b.document(id: "big")?.properties == body2)
            #expect(try await snapshot(a) == snapshot(b))
            let errors = errorFrames.withLock { $0 }
            #expect(errors.count == 1, "\(errors)")
            #expect(errors.first?.contains("Error-Code\u{0}422") == true, "\(errors)")
            #expect(connections.withLock { $0 } == 1)
            #expect(replicator.status.error == nil)
        }
    }
}
