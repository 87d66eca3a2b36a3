import PeerSyncCore
import PeerSyncTransport
import PeerSyncTransportTesting
import Synchronization
import Testing

/// The example custom transport passes the whole suite.
@Suite struct ExamplePipeTransportConformance {
    static let suite = TransportConformanceSuite(
        transport: PipeTransport(),
        listenOn: try! Endpoint(url: "pipe://example:0"),
        drop: { ($0 as? PipeConnection)?.abort() })

    @Test(arguments: TransportConformanceSuite.caseNames)
    func conformance(_ name: String) async throws {
        try await Self.suite.run(name)
    }
}

/// A deliberately broken connection wrapping a correct one, to show the suite catches each
/// kind of contract violation (a suite that cannot fail proves nothing).
final class FaultyConnection: MessageConnection {
    enum Fault: Sendable {
        /// `send` returns at once and sends in the background: no backpressure, no order.
        case noBackpressure
        /// Every second message is sent before the one ahead of it.
        case reorder
        /// Large messages get one byte flipped.
        case corruptLarge
        /// `close` does nothing.
        case ignoreClose
        /// `send` after close pretends to succeed.
        case sendAfterCloseSucceeds
        /// Claims a 1 MiB limit but does not enforce it.
        case unenforcedLimit
        /// Sends messages over 64 KiB as two messages.
        case splitLarge
        /// `receive` never returns and ignores cancellation (until the test releases it).
        case hangingReceive
        /// `closeInfo` is always nil.
        case noCloseInfo
    }

    let inner: any MessageConnection
    let fault: Fault
    private let held = Mutex<TransportMessage?>(nil)
    let hang: Hang

    init(_ inner: any MessageConnection, fault: Fault, hang: Hang) {
        self.inner = inner
        self.fault = fault
        self.hang = hang
    }

    var kind: TransportKind { inner.kind }
    var remoteAddress: String? { inner.remoteAddress }
    var peerCertificateChain: [[UInt8]] { inner.peerCertificateChain }
    var maxMessageSize: Int { fault == .unenforcedLimit ? 1 << 20 : inner.maxMessageSize }
    var closeInfo: CloseInfo? { fault == .noCloseInfo ? nil : inner.closeInfo }

    func send(_ message: TransportMessage) async throws {
        switch fault {
        case .noBackpressure:
            let inner = self.inner
            Task { try? await inner.send(message) }
        case .reorder:
            let previous = held.withLock { held -> TransportMessage? in
                if let previous = held {
                    held = nil
                    return previous
                }
                held = message
                return nil
            }
            if let previous {
                try await inner.send(message)
                try await inner.send(previous)
            }
        case .corruptLarge:
            if case .binary(var bytes) = message, bytes.count > 65536 {
                bytes[bytes.count / 2] ^= 0xFF
                try await inner.send(.binary(bytes))
            } else {
                try await inner.send(message)
            }
        case .sendAfterCloseSucceeds:
            try? await inner.send(message)
        case .splitLarge:
            if case .binary(let bytes) = message, bytes.count > 65536 {
                try await inner.send(.binary(Array(bytes[..<(bytes.count / 2)])))
                try await inner.send(.binary(Array(bytes[(bytes.count / 2)...])))
            } else {
                try await inner.send(message)
            }
        default:
            try await inner.send(message)
        }
    }

    func receive() async throws -> TransportMessage? {
        if fault == .hangingReceive {
            await hang.wait()
            return nil
        }
        return try await inner.receive()
    }

    func close(code: CloseCode, reason: String) async {
        if fault == .ignoreClose { return }
        await inner.close(code: code, reason: reason)
    }
}

/// Suspends callers, ignoring cancellation, until `release()`.
final class Hang: Sendable {
    private let waiters = Mutex<(released: Bool, list: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = waiters.withLock { w in
                if w.released { return true }
                w.list.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func release() {
        let list = waiters.withLock { w in
            w.released = true
            let list = w.list
            w.list = []
            return list
        }
        for continuation in list { continuation.resume() }
    }
}

@Suite struct ConformanceSuiteCatchesBrokenTransports {
    /// A suite over pipe pairs whose ends are wrapped with `fault`, with short waits.
    static func suite(_ fault: FaultyConnection.Fault, hang: Hang = Hang()) -> TransportConformanceSuite {
        var configuration = TransportConformanceSuite.Configuration()
        configuration.timeout = .seconds(3)
        configuration.stallWindow = .milliseconds(200)
        configuration.backpressureLimit = 8 << 20
        configuration.largestMessage = 1 << 20
        configuration.closeRepetitions = 2
        let transport = PipeTransport()
        return TransportConformanceSuite(configuration: configuration) {
            let listener = try await transport.listen(on: Endpoint(url: "pipe://faulty:0"))
            let client = try await transport.connect(to: listener.endpoint)
            guard let server = try await listener.accept() else { throw PeerSyncError(.internalError, "no connection") }
            await listener.close()
            return TransportPair(
                client: FaultyConnection(client, fault: fault, hang: hang),
                server: FaultyConnection(server, fault: fault, hang: hang),
                dropServer: { (server as? PipeConnection)?.abort() },
                cleanup: {
                    await client.close()
                    await server.close()
                })
        }
    }

    static func expectFailure(_ fault: FaultyConnection.Fault, _ caseName: String, hang: Hang = Hang(),
                              sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            try await suite(fault, hang: hang).run(caseName)
            Issue.record("case \(caseName) passed with fault \(fault)", sourceLocation: sourceLocation)
        } catch let failure as ConformanceFailure {
            #expect(failure.caseName == caseName, sourceLocation: sourceLocation)
            #expect(!failure.message.isEmpty, sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected a ConformanceFailure, got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test func missingBackpressure() async { await Self.expectFailure(.noBackpressure, "backpressure") }
    @Test func reordering() async { await Self.expectFailure(.reorder, "ordering") }
    @Test func corruption() async { await Self.expectFailure(.corruptLarge, "messageSizes") }
    @Test func splitMessages() async { await Self.expectFailure(.splitLarge, "concurrentSenders") }
    @Test func closeThatDoesNotClose() async { await Self.expectFailure(.ignoreClose, "closeCodeAndReason") }
    @Test func sendAfterClose() async { await Self.expectFailure(.sendAfterCloseSucceeds, "useAfterClose") }
    @Test func unenforcedLimit() async { await Self.expectFailure(.unenforcedLimit, "oversizedMessage") }
    @Test func missingCloseInfo() async { await Self.expectFailure(.noCloseInfo, "peerVanishes") }

    @Test func aHangingTransportFailsInsteadOfHanging() async {
        let hang = Hang()
        let clock = ContinuousClock()
        let start = clock.now
        await Self.expectFailure(.hangingReceive, "metadata", hang: hang)
        // The case ran into its 3 s timeout instead of waiting forever (hang guard only).
        #expect(clock.now - start < .seconds(60))
        hang.release()
    }

    @Test func unknownCaseAndMissingTransport() async {
        let suite = Self.suite(.reorder)
        #expect(suite.availableCaseNames == TransportConformanceSuite.connectionCaseNames)
        await #expect(throws: ConformanceFailure.self) { try await suite.run("noSuchCase") }
        await #expect(throws: ConformanceFailure.self) { try await suite.run("listenerClose") }
    }

    @Test func runAllReportsEveryCase() async {
        var configuration = TransportConformanceSuite.Configuration()
        configuration.largestMessage = 1 << 20
        configuration.closeRepetitions = 2
        let suite = TransportConformanceSuite(transport: PipeTransport(), listenOn: try! Endpoint(url: "pipe://all:0"),
                                              configuration: configuration,
                                              drop: { ($0 as? PipeConnection)?.abort() })
        let results = await suite.runAll()
        #expect(results.map(\.name) == TransportConformanceSuite.caseNames)
        #expect(results.allSatisfy { $0.failure == nil }, "\(results.compactMap(\.failure))")
    }
}
