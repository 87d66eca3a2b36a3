import Foundation
import PeerSyncBLIP
import PeerSyncCore
import PeerSyncDatabase
import PeerSyncLoopback
import PeerSyncReplicator
import PeerSyncTransport
import Synchronization
import Testing

/// Records the BLIP error responses (ERR frames) a connection receives. Frame headers are
/// never compressed: `varint number, flags byte`; type 2 in the low bits = ERR.
final class ErrorFrameWatcher: MessageConnection {
    let inner: any MessageConnection
    /// Payloads of uncompressed ERR frames (their properties hold `Error-Code`), and a count.
    let errors = Mutex<[String]>([])

    init(_ inner: any MessageConnection) { self.inner = inner }

    func send(_ message: TransportMessage) async throws { try await inner.send(message) }

    func receive() async throws -> TransportMessage? {
        let m = try await inner.receive()
        if case .binary(let bytes)? = m {
            var i = 0
            while i < bytes.count, bytes[i] & 0x80 != 0 { i += 1 }
            i += 1
            if i < bytes.count, bytes[i] & 0x07 == 2 {
                let compressed = bytes[i] & 0x08 != 0
                let payload = bytes[(i + 1)...].dropLast(4)
                errors.withLock { $0.append(compressed ? "compressed" : String(decoding: payload, as: UTF8.self)) }
            }
        }
        return m
    }

    func close(code: CloseCode, reason: String) async { await inner.close(code: code, reason: reason) }
    var closeInfo: CloseInfo? { inner.closeInfo }
    var remoteAddress: String? { inner.remoteAddress }
    var peerCertificateChain: [[UInt8]] { inner.peerCertificateChain }
    var kind: TransportKind { inner.kind }
    var maxMessageSize: Int { inner.maxMessageSize }
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
            cfg.replyTimeout = .seconds(10)
            cfg.maxAttemptWaitTime = .milliseconds(100)
            cfg.addCollection(a)
            let watchers = Mutex<[ErrorFrameWatcher]>([])
            let connect = p[1].connector()
            let replicator = try Replicator(config: cfg, connector: { config in
                let w = ErrorFrameWatcher(try await connect(config))
                watchers.withLock { $0.append(w) }
                return w
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
            let errors = watchers.withLock { $0.flatMap { $0.errors.withLock { $0 } } }
            #expect(errors.count == 1, "\(errors)")
            #expect(errors.first?.contains("Error-Code\u{0}422") == true, "\(errors)")
            #expect(watchers.withLock { $0.count } == 1)
            #expect(replicator.status.error == nil)
        }
    }
}
