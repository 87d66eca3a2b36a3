import PeerSyncCore
import PeerSyncTransport

/// Two connected ends made for one conformance case, and the hooks the suite needs.
public struct TransportPair: Sendable {
    /// The end that connected.
    public var client: any MessageConnection
    /// The end that accepted.
    public var server: any MessageConnection
    /// Drops the server end abruptly, without a close handshake, as if its process died or the
    /// cable was pulled (e.g. close the socket without a WebSocket close frame). The client end
    /// must then notice within the suite's timeout.
    public var dropServer: @Sendable () async -> Void
    /// Frees everything the pair holds (connections, listeners, child processes, ports). Called
    /// once after every case, whether it passed or failed.
    public var cleanup: @Sendable () async -> Void

    /// A pair of connected ends; `cleanup` defaults to nothing.
    public init(client: any MessageConnection, server: any MessageConnection,
                dropServer: @escaping @Sendable () async -> Void,
                cleanup: @escaping @Sendable () async -> Void = {}) {
        self.client = client
        self.server = server
        self.dropServer = dropServer
        self.cleanup = cleanup
    }
}

/// The transport conformance suite: every `Transport` (loopback, WebSocket, BLE, a user's own)
/// runs it to show it keeps the `MessageConnection` and `TransportListener` contracts.
///
/// It uses no test framework, so it runs under Swift Testing, XCTest or a plain executable:
///
/// ```swift
/// let suite = TransportConformanceSuite(transport: myTransport,
///                                       listenOn: try Endpoint(url: "serial://dev:0"),
///                                       drop: { await ($0 as? MyConnection)?.kill() })
/// @Test(arguments: TransportConformanceSuite.caseNames)
/// func conformance(_ name: String) async throws { try await suite.run(name) }
/// ```
///
/// Every case makes fresh pairs, and every wait has a timeout (``Configuration/timeout``), so a
/// broken transport fails with a `ConformanceFailure` naming what did not happen; it never
/// hangs the suite. Cases are independent and may run in parallel.
public struct TransportConformanceSuite: Sendable {
    /// Sizes and limits of the suite.
    public struct Configuration: Sendable {
        /// The longest any single wait may take before the case fails.
        public var timeout: Duration = .seconds(60)
        /// The largest message the `messageSizes` case sends; the transport's
        /// `MessageConnection.maxMessageSize` must be at least this. Default 16 MiB.
        public var largestMessage: Int = 16 << 20
        /// Messages per direction in the `ordering` case.
        public var orderingCount: Int = 1000
        /// Concurrent sending tasks per side in the `concurrentSenders` case.
        public var concurrentSenders: Int = 16
        /// Messages each of those tasks sends.
        public var messagesPerSender: Int = 50
        /// The `backpressure` case fails if the sender gets this many bytes accepted while
        /// the peer reads nothing. Default 64 MiB.
        public var backpressureLimit: Int = 64 << 20
        /// A sender that made no progress for this long counts as blocked by backpressure.
        public var stallWindow: Duration = .milliseconds(500)
        /// How many pairs the `simultaneousClose` case closes from both sides at once.
        public var closeRepetitions: Int = 10
        /// Connections the `listenerAcceptsMany` case opens at once.
        public var listenerConnections: Int = 8

        /// The defaults listed with each property.
        public init() {}
    }

    /// Everything the listener cases need: a way to listen and a way to connect.
    struct ListenerHarness: Sendable {
        let endpoint: Endpoint
        let listen: @Sendable (Endpoint) async throws -> any TransportListener
        let connect: @Sendable (Endpoint) async throws -> any MessageConnection
    }

    /// The cases that need only connected pairs.
    public static let connectionCaseNames = [
        "metadata", "ordering", "messageSizes", "oversizedMessage", "concurrentSenders",
        "backpressure", "closeCodeAndReason", "useAfterClose", "simultaneousClose",
        "closeWhileSending", "peerVanishes", "peerVanishesWhileSending",
    ]
    /// The cases that also need a `Transport` (``init(transport:listenOn:connectOptions:listenOptions:configuration:drop:)``).
    public static let listenerCaseNames = ["listenerAcceptsMany", "listenerClose"]
    /// Every case.
    public static let caseNames = connectionCaseNames + listenerCaseNames

    /// The counts, sizes and waits the cases use.
    public let configuration: Configuration
    let makePair: @Sendable () async throws -> TransportPair
    let harness: ListenerHarness?

    /// A suite over pairs made by `makePair`. Only ``connectionCaseNames`` can run; the listener
    /// cases fail with "needs a transport".
    public init(configuration: Configuration = Configuration(),
                makePair: @escaping @Sendable () async throws -> TransportPair) {
        self.configuration = configuration
        self.makePair = makePair
        self.harness = nil
    }

    /// A suite over `transport`: each pair comes from a listener on `endpoint` (use port 0 or a
    /// fresh name per call if cases run in parallel) and a client connecting to the endpoint it
    /// bound. `drop` must break a connection without a close handshake (see
    /// ``TransportPair/dropServer``). Runs every case in ``caseNames``.
    public init<T: Transport>(transport: T, listenOn endpoint: Endpoint,
                              connectOptions: T.ConnectOptions = T.ConnectOptions(),
                              listenOptions: T.ListenOptions = T.ListenOptions(),
                              configuration: Configuration = Configuration(),
                              drop: @escaping @Sendable (any MessageConnection) async -> Void) {
        let harness = ListenerHarness(
            endpoint: endpoint,
            listen: { try await transport.listen(on: $0, options: listenOptions) },
            connect: { try await transport.connect(to: $0, options: connectOptions) })
        let timeout = configuration.timeout
        self.configuration = configuration
        self.harness = harness
        self.makePair = {
            let listener = try await harness.listen(harness.endpoint)
            do {
                async let accepted = within(timeout, "the listener accepting a connection") { try await listener.accept() }
                let client = try await harness.connect(listener.endpoint)
                guard let server = try await accepted else {
                    await client.close()
                    throw CheckFailure("accept() returned nil on an open listener")
                }
                return TransportPair(client: client, server: server, dropServer: { await drop(server) }, cleanup: {
                    await client.close(code: .goingAway, reason: "")
                    await server.close(code: .goingAway, reason: "")
                    await listener.close()
                })
            } catch {
                await listener.close()
                throw error
            }
        }
    }

    /// The cases this suite can run: ``caseNames`` with a transport, else ``connectionCaseNames``.
    public var availableCaseNames: [String] {
        harness == nil ? Self.connectionCaseNames : Self.caseNames
    }

    /// Runs one case. Throws a `ConformanceFailure` if the transport breaks the contract (or
    /// an unknown name is given); returns normally if it passes.
    public func run(_ name: String) async throws {
        do {
            try await runCase(name)
        } catch let failure as ConformanceFailure {
            throw failure
        } catch let failure as CheckFailure {
            throw ConformanceFailure(suite: "transport", caseName: name, message: failure.message)
        } catch {
            throw ConformanceFailure(suite: "transport", caseName: name, message: "unexpected error: \(describe(error))")
        }
    }

    /// The outcome of one case in ``runAll()``.
    public typealias CaseResult = ConformanceCaseResult

    /// Runs every available case one after the other, for callers without a test framework.
    public func runAll() async -> [CaseResult] {
        await runConformanceCases(availableCaseNames, suite: "transport") { try await run($0) }
    }

    private func runCase(_ name: String) async throws {
        switch name {
        case "metadata": try await metadata()
        case "ordering": try await ordering()
        case "messageSizes": try await messageSizes()
        case "oversizedMessage": try await oversizedMessage()
        case "concurrentSenders": try await concurrentSenders()
        case "backpressure": try await backpressure()
        case "closeCodeAndReason": try await closeCodeAndReason()
        case "useAfterClose": try await useAfterClose()
        case "simultaneousClose": try await simultaneousClose()
        case "closeWhileSending": try await closeWhileSending()
        case "peerVanishes": try await peerVanishes()
        case "peerVanishesWhileSending": try await peerVanishesWhileSending()
        case "listenerAcceptsMany": try await listenerAcceptsMany()
        case "listenerClose": try await listenerClose()
        default:
            throw ConformanceFailure(suite: "transport", caseName: name, message: "unknown case; see TransportConformanceSuite.caseNames")
        }
    }

    // MARK: Helpers

    var timeout: Duration { configuration.timeout }

    /// Makes a pair, runs `body`, and always cleans up.
    func withPair(_ body: (TransportPair) async throws -> Void) async throws {
        let make = makePair
        let pair = try await within(timeout, "making a connected pair") { try await make() }
        do {
            try await body(pair)
        } catch {
            _ = try? await within(timeout, "cleaning up a pair") { await pair.cleanup() }
            throw error
        }
        try await within(timeout, "cleaning up a pair") { await pair.cleanup() }
    }

    func send(_ connection: any MessageConnection, _ message: TransportMessage, _ what: String) async throws {
        try await within(timeout, "sending \(what)") { try await connection.send(message) }
    }

    func receive(_ connection: any MessageConnection, _ what: String) async throws -> TransportMessage {
        guard let message = try await within(timeout, "receiving \(what)", { try await connection.receive() }) else {
            throw CheckFailure("the connection closed (\(connection.closeInfo.map { "\($0)" } ?? "no close info")) while waiting for \(what)")
        }
        return message
    }

    /// Waits for `receive()` to end: `nil`, or a thrown error (returned).
    func receiveEnd(_ connection: any MessageConnection, _ what: String) async throws -> (any Error)? {
        try await within(timeout, "the end of \(what)") {
            do {
                while let message = try await connection.receive() {
                    throw CheckFailure("expected \(what) to end, but received \(message)")
                }
                return nil
            } catch let failure as CheckFailure {
                throw failure
            } catch {
                return error
            }
        }
    }

    /// Expects `send` to throw a ``PeerSyncError`` with one of `codes`.
    func expectSendFails(_ connection: any MessageConnection, _ codes: [PeerSyncError.Code], _ what: String) async throws {
        let outcome: (any Error)? = try await within(timeout, "a send \(what)") {
            do {
                try await connection.send(.binary([1, 2, 3]))
                return nil
            } catch {
                return error
            }
        }
        guard let error = outcome else {
            throw CheckFailure("send \(what) succeeded; expected PeerSyncError \(codes)")
        }
        try check(isPeerSyncError(error, codes), "send \(what) threw \(describe(error)); expected PeerSyncError \(codes)")
    }

    /// Polls `counter` until it stops changing for the stall window (returns its value) or
    /// reaches `limit` (throws).
    func waitForStall(_ counter: Counter, limit: Int, senderDone: Flag, what: String) async throws -> Int {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var last = counter.value
        var lastChange = clock.now
        while true {
            try await Task.sleep(for: .milliseconds(20))
            let value = counter.value
            if value >= limit {
                throw CheckFailure("\(what): the sender got \(value) messages accepted while the peer read nothing; expected send to suspend (backpressure, bounded memory)")
            }
            if senderDone.isSet {
                throw CheckFailure("\(what): the sender stopped after \(value) messages without being blocked")
            }
            if value != last {
                last = value
                lastChange = clock.now
            } else if clock.now - lastChange >= configuration.stallWindow {
                return value
            }
            if clock.now > deadline {
                throw CheckFailure("\(what): the sender never blocked within \(timeout) (\(value) messages accepted)")
            }
        }
    }

    func requireHarness() throws -> ListenerHarness {
        guard let harness else {
            throw CheckFailure("needs a transport: create the suite with init(transport:listenOn:...)")
        }
        return harness
    }

    // MARK: Cases

    /// Metadata is consistent and there is no close info while open.
    func metadata() async throws {
        try await withPair { pair in
            for (name, connection) in [("client", pair.client), ("server", pair.server)] {
                try check(connection.closeInfo == nil, "\(name).closeInfo is \(String(describing: connection.closeInfo)) on an open connection")
                try check(connection.maxMessageSize > 0, "\(name).maxMessageSize is \(connection.maxMessageSize)")
                if let address = connection.remoteAddress {
                    try check(!address.isEmpty, "\(name).remoteAddress is an empty string; use nil when unknown")
                }
                for certificate in connection.peerCertificateChain {
                    try check(certificate.first == 0x30, "\(name).peerCertificateChain holds something that is not DER (first byte \(certificate.first.map { String($0) } ?? "none"))")
                }
            }
            try check(pair.client.kind == pair.server.kind, "client.kind \(pair.client.kind) != server.kind \(pair.server.kind)")
            try await send(pair.client, .text("hello"), "a first message")
            let message = try await receive(pair.server, "a first message")
            try check(message == .text("hello"), "server received \(message), expected text 'hello'")
        }
    }

    /// 1000 messages each way, at the same time, arrive in order and intact.
    func ordering() async throws {
        let count = configuration.orderingCount
        try await withPair { pair in
            let timeout = self.timeout
            @Sendable func message(_ i: Int, text: Bool) -> TransportMessage {
                text ? .text("message \(i) " + Payload.text(seed: UInt64(i), byteCount: i % 61))
                     : Payload.tagged(UInt64(i), size: i % 97)
            }
            func sender(_ connection: any MessageConnection, text: Bool, _ name: String) -> @Sendable () async throws -> Void {
                {
                    try await within(timeout, "\(name) sending \(count) messages") {
                        for i in 0..<count { try await connection.send(message(i, text: text)) }
                    }
                }
            }
            func receiver(_ connection: any MessageConnection, text: Bool, _ name: String) -> @Sendable () async throws -> Void {
                {
                    try await within(timeout, "\(name) receiving \(count) messages") {
                        for i in 0..<count {
                            guard let received = try await connection.receive() else {
                                throw CheckFailure("\(name): the connection ended after \(i) of \(count) messages")
                            }
                            guard received == message(i, text: text) else {
                                throw CheckFailure("\(name): message \(i) is \(received), expected \(message(i, text: text)) (out of order or corrupted)")
                            }
                        }
                    }
                }
            }
            try await concurrently([
                sender(pair.client, text: false, "client"), receiver(pair.server, text: false, "server"),
                sender(pair.server, text: true, "server"), receiver(pair.client, text: true, "client"),
            ])
        }
    }

    /// Binary and text messages from 0 bytes to ``Configuration/largestMessage`` arrive intact.
    func messageSizes() async throws {
        let largest = configuration.largestMessage
        try await withPair { pair in
            let limit = Swift.min(pair.client.maxMessageSize, pair.server.maxMessageSize)
            try check(limit >= largest, "maxMessageSize is \(limit) bytes, below the \(largest) bytes the suite sends; lower Configuration.largestMessage only if the transport documents a smaller limit")
            let sizes = [0, 1, 2, 125, 126, 127, 128, 1000, 4095, 4096, 4097, 65535, 65536, 65537,
                         1 << 20, (1 << 20) + 3, largest].filter { $0 <= largest }
            var cases: [(from: String, TransportMessage)] = []
            for (i, size) in sizes.enumerated() {
                cases.append(("client", .binary(Payload.bytes(seed: UInt64(1000 + i), count: size))))
                cases.append(("client", .text(Payload.text(seed: UInt64(2000 + i), byteCount: size))))
            }
            for size in [0, 65536, largest] {
                cases.append(("server", .binary(Payload.bytes(seed: UInt64(3000 + size), count: size))))
                cases.append(("server", .text(Payload.text(seed: UInt64(4000 + size), byteCount: size))))
            }
            for (from, message) in cases {
                let (sender, receiver) = from == "client" ? (pair.client, pair.server) : (pair.server, pair.client)
                let what = "a \(message) from the \(from)"
                // Send and receive at once: a transport may stream a large message only while
                // the peer reads.
                try await concurrently([
                    { try await self.send(sender, message, what) },
                    {
                        let received = try await self.receive(receiver, what)
                        guard Payload.same(received, message) else {
                            throw CheckFailure("\(what) arrived as \(received), with different content")
                        }
                    },
                ])
            }
        }
    }

    /// A message over ``MessageConnection/maxMessageSize`` throws `tooLarge`; the connection
    /// stays usable and the peer never sees the message.
    func oversizedMessage() async throws {
        try await withPair { pair in
            let size = pair.client.maxMessageSize
            // Only affordable limits are checked; a transport with a larger limit passes trivially.
            if size < 256 << 20 {
                let outcome: (any Error)? = try await within(timeout, "sending an oversized message") {
                    do {
                        try await pair.client.send(.binary([UInt8](repeating: 7, count: size + 1)))
                        return nil
                    } catch {
                        return error
                    }
                }
                guard let outcome else {
                    throw CheckFailure("sending \(size + 1) bytes (maxMessageSize + 1) succeeded; expected PeerSyncError tooLarge")
                }
                try check(isPeerSyncError(outcome, [.tooLarge]), "sending maxMessageSize + 1 bytes threw \(describe(outcome)); expected PeerSyncError tooLarge")
            }
            try await send(pair.client, .text("after"), "a message after the oversized one")
            let message = try await receive(pair.server, "the message after the oversized one")
            try check(message == .text("after"), "the server received \(message); expected only the message sent after the oversized one")
        }
    }

    /// Many tasks send on one connection (both directions at once); every message arrives
    /// whole, once, in each task's order.
    func concurrentSenders() async throws {
        let senders = configuration.concurrentSenders
        let perSender = configuration.messagesPerSender
        let sizes = [0, 1, 100, 1000, 5000, 70_000, 17]
        try await withPair { pair in
            let timeout = self.timeout
            @Sendable func tag(_ sender: Int, _ seq: Int) -> UInt64 { UInt64(sender) << 32 | UInt64(seq) }
            @Sendable func message(_ sender: Int, _ seq: Int) -> TransportMessage {
                if seq % 3 == 2 {
                    return .text("\(sender) \(seq) " + Payload.text(seed: tag(sender, seq), byteCount: sizes[(sender + seq) % sizes.count]))
                }
                return Payload.tagged(tag(sender, seq), size: sizes[(sender + seq) % sizes.count])
            }
            func sending(_ connection: any MessageConnection, _ name: String) -> [@Sendable () async throws -> Void] {
                (0..<senders).map { sender in
                    {
                        try await within(timeout, "\(name) task \(sender) sending \(perSender) messages") {
                            for seq in 0..<perSender { try await connection.send(message(sender, seq)) }
                        }
                    }
                }
            }
            func receiving(_ connection: any MessageConnection, _ name: String) -> @Sendable () async throws -> Void {
                {
                    try await within(timeout, "\(name) receiving \(senders * perSender) messages") {
                        var next = [Int](repeating: 0, count: senders)
                        for received in 0..<(senders * perSender) {
                            guard let incoming = try await connection.receive() else {
                                throw CheckFailure("\(name): the connection ended after \(received) messages")
                            }
                            let sender: Int
                            let seq: Int
                            switch incoming {
                            case .binary:
                                let tag = try Payload.verifyTagged(incoming)
                                sender = Int(tag >> 32)
                                seq = Int(tag & 0xFFFF_FFFF)
                            case .text(let text):
                                let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
                                guard parts.count >= 2, let s = Int(parts[0]), let q = Int(parts[1]) else {
                                    throw CheckFailure("\(name): received a corrupted text message (\(incoming))")
                                }
                                sender = s
                                seq = q
                            }
                            guard sender >= 0, sender < senders, seq >= 0, seq < perSender else {
                                throw CheckFailure("\(name): received a message with an impossible tag (sender \(sender), seq \(seq))")
                            }
                            guard incoming == message(sender, seq) else {
                                throw CheckFailure("\(name): message \(seq) of task \(sender) is corrupted or interleaved")
                            }
                            guard seq == next[sender] else {
                                throw CheckFailure("\(name): task \(sender)'s message \(seq) arrived when \(next[sender]) was expected (lost, duplicated or reordered)")
                            }
                            next[sender] += 1
                        }
                    }
                }
            }
            try await concurrently(sending(pair.client, "client") + sending(pair.server, "server")
                                   + [receiving(pair.server, "server"), receiving(pair.client, "client")])
        }
    }

    /// A sender blocks while the peer does not read (memory stays bounded), and resumes, with
    /// nothing lost, when the peer reads again.
    func backpressure() async throws {
        let messageSize = 64 << 10
        let limit = Swift.max(2, configuration.backpressureLimit / messageSize)
        try await withPair { pair in
            let sent = Counter()
            let stop = Flag()
            let done = Flag()
            let client = pair.client
            let timeout = self.timeout
            let sender = Task { () throws -> Int in
                defer { done.set() }
                var i = 0
                while i < limit && !stop.isSet {
                    try await client.send(Payload.tagged(UInt64(i), size: messageSize))
                    i += 1
                    sent.set(i)
                }
                try await client.send(.text("end"))
                return i
            }
            do {
                _ = try await waitForStall(sent, limit: limit, senderDone: done, what: "backpressure")
            } catch {
                sender.cancel()
                throw error
            }
            stop.set()
            // Read everything; the blocked sender must resume and finish.
            let received = try await within(timeout, "draining the blocked sender's messages") {
                var index = 0
                while true {
                    guard let message = try await pair.server.receive() else {
                        throw CheckFailure("the connection ended while draining after \(index) messages")
                    }
                    if message == .text("end") { return index }
                    let tag = try Payload.verifyTagged(message)
                    guard tag == UInt64(index) else {
                        throw CheckFailure("message \(index) arrived as \(tag): lost or reordered under backpressure")
                    }
                    index += 1
                }
            }
            let total = try await within(timeout, "the blocked sender finishing") { try await sender.value }
            try check(received == total, "the server received \(received) messages, the client sent \(total)")
        }
    }

    /// The code and reason of a close reach the peer, after the messages sent before it;
    /// long reasons are truncated, unsendable codes become `normal`.
    func closeCodeAndReason() async throws {
        try await withPair { pair in
            for i in 0..<3 { try await send(pair.client, .text("before close \(i)"), "message \(i) before the close") }
            let reason = "custom reason ✓"
            try await within(timeout, "client.close") { await pair.client.close(code: 4321, reason: reason) }
            for i in 0..<3 {
                let message = try await receive(pair.server, "message \(i) sent before the close")
                try check(message == .text("before close \(i)"), "message \(i) sent before the close arrived as \(message)")
            }
            if let error = try await receiveEnd(pair.server, "the server's messages after the peer's close") {
                throw CheckFailure("after a clean close the peer's receive threw \(describe(error)); expected nil")
            }
            let expected = CloseInfo(code: 4321, reason: reason)
            try check(pair.server.closeInfo == expected, "server.closeInfo is \(String(describing: pair.server.closeInfo)); expected \(expected)")
            try check(pair.client.closeInfo == expected, "client.closeInfo is \(String(describing: pair.client.closeInfo)); expected its own \(expected)")
        }
        try await withPair { pair in
            let long = String(repeating: "close reason é 😀 ", count: 12)
            try await within(timeout, "server.close") { await pair.server.close(code: .goingAway, reason: long) }
            if let error = try await receiveEnd(pair.client, "the client's messages after the server's close") {
                throw CheckFailure("after a clean close the peer's receive threw \(describe(error)); expected nil")
            }
            let expected = CloseInfo(code: .goingAway, reason: CloseInfo.truncatedReason(long))
            try check(expected.reason.utf8.count <= CloseInfo.maxReasonBytes && !expected.reason.isEmpty, "internal: bad truncation")
            try check(pair.client.closeInfo == expected, "client.closeInfo is \(String(describing: pair.client.closeInfo)); expected \(expected) (reason truncated to \(CloseInfo.maxReasonBytes) UTF-8 bytes)")
        }
        try await withPair { pair in
            try await within(timeout, "closing with an unsendable code") { await pair.client.close(code: .abnormalClosure, reason: "x") }
            _ = try await receiveEnd(pair.server, "the server's messages after the client's close")
            try check(pair.server.closeInfo?.code == .normal, "closing with unsendable code 1006 reached the peer as \(String(describing: pair.server.closeInfo)); expected 1000 (normal)")
        }
    }

    /// After a close, sends throw `connectionClosed`, receives return nil, close is idempotent,
    /// on both sides.
    func useAfterClose() async throws {
        try await withPair { pair in
            try await send(pair.client, .binary([1]), "a message")
            _ = try await receive(pair.server, "a message")
            try await within(timeout, "client.close") { await pair.client.close(code: .normal, reason: "done") }
            try await expectSendFails(pair.client, [.connectionClosed], "after close")
            for attempt in 1...2 {
                if let error = try await receiveEnd(pair.client, "client.receive after its own close (call \(attempt))") {
                    throw CheckFailure("client.receive after its own close threw \(describe(error)); expected nil")
                }
            }
            try await within(timeout, "a second client.close") { await pair.client.close(code: .normal, reason: "again") }
            try check(pair.client.closeInfo == CloseInfo(code: .normal, reason: "done"), "client.closeInfo is \(String(describing: pair.client.closeInfo)) after a second close; the first close decides")

            for attempt in 1...2 {
                if let error = try await receiveEnd(pair.server, "server.receive after the peer closed (call \(attempt))") {
                    throw CheckFailure("server.receive after the peer's close threw \(describe(error)); expected nil")
                }
            }
            try check(pair.server.closeInfo == CloseInfo(code: .normal, reason: "done"), "server.closeInfo is \(String(describing: pair.server.closeInfo))")
            try await expectSendFails(pair.server, [.connectionClosed], "after the peer closed")
            try await within(timeout, "server.close after the peer closed") { await pair.server.close() }
            try await expectSendFails(pair.server, [.connectionClosed], "after closing")
        }
    }

    /// Both sides close at the same moment: both closes return, both ends see the end, no hang.
    func simultaneousClose() async throws {
        for round in 0..<configuration.closeRepetitions {
            try await withPair { pair in
                try await concurrently([
                    { try await within(self.timeout, "client.close racing server.close (round \(round))") { await pair.client.close(code: .normal, reason: "client") } },
                    { try await within(self.timeout, "server.close racing client.close (round \(round))") { await pair.server.close(code: .goingAway, reason: "server") } },
                ])
                for (name, connection) in [("client", pair.client), ("server", pair.server)] {
                    if let error = try await receiveEnd(connection, "\(name).receive after both closed (round \(round))") {
                        try check(isPeerSyncError(error), "\(name).receive threw \(describe(error)) after both closed; expected nil or a PeerSyncError")
                    }
                    guard let info = connection.closeInfo else {
                        throw CheckFailure("\(name).closeInfo is nil after both sides closed (round \(round))")
                    }
                    try check([CloseCode.normal, .goingAway, .abnormalClosure].contains(info.code),
                              "\(name).closeInfo is \(info) after both closed; expected one of the two codes sent")
                    try await expectSendFails(connection, [.connectionClosed, .connectionReset], "on the \(name) after both closed")
                }
            }
        }
    }

    /// Closing while a send is in progress: close returns, the send completes or throws, the
    /// peer gets every message accepted before the close, intact and in order, then the close.
    func closeWhileSending() async throws {
        try await withPair { pair in
            let accepted = Counter()
            let client = pair.client
            let sender = Task { () -> (any Error)? in
                for i in 0..<100_000 {
                    do {
                        try await client.send(Payload.tagged(UInt64(i), size: i % 10 == 9 ? 1 << 20 : 16 << 10))
                    } catch {
                        return error
                    }
                    accepted.set(i + 1)
                }
                return nil
            }
            let receiver = Task { () throws -> (Int, (any Error)?) in
                var index = 0
                do {
                    while let message = try await pair.server.receive() {
                        let tag = try Payload.verifyTagged(message)
                        guard tag == UInt64(index) else {
                            throw CheckFailure("message \(index) arrived as \(tag) while the sender was closing")
                        }
                        index += 1
                    }
                    return (index, nil)
                } catch let failure as CheckFailure {
                    throw failure
                } catch {
                    return (index, error)
                }
            }
            try await within(timeout, "the sender getting 20 messages accepted") {
                while accepted.value < 20 { try await Task.sleep(for: .milliseconds(2)) }
            }
            let acceptedBeforeClose = accepted.value
            try await within(timeout, "client.close while a send is in progress") { await client.close(code: 4000, reason: "closing while sending") }
            let sendError = try await within(timeout, "the in-progress send finishing after close") { await sender.value }
            guard let sendError else {
                throw CheckFailure("the sender sent 100000 messages without any failing after close")
            }
            try check(isPeerSyncError(sendError, [.connectionClosed]), "a send during/after close threw \(describe(sendError)); expected PeerSyncError connectionClosed")
            let (received, receiveError) = try await within(timeout, "the server reading until the close") { try await receiver.value }
            if let receiveError {
                throw CheckFailure("the server's receive threw \(describe(receiveError)) after \(received) messages; expected a clean close")
            }
            try check(received >= acceptedBeforeClose, "the server received \(received) messages but \(acceptedBeforeClose) were accepted before close was called")
            try check(pair.server.closeInfo == CloseInfo(code: 4000, reason: "closing while sending"), "server.closeInfo is \(String(describing: pair.server.closeInfo))")
            try await expectSendFails(client, [.connectionClosed], "after close")
        }
    }

    /// The peer vanishes without a close handshake: this side's receive ends (error or nil)
    /// within the timeout, sends soon fail, close returns.
    func peerVanishes() async throws {
        try await withPair { pair in
            try await send(pair.client, .text("ping"), "a message before the peer vanishes")
            _ = try await receive(pair.server, "a message before vanishing")
            try await within(timeout, "dropping the server") { await pair.dropServer() }
            if let error = try await receiveEnd(pair.client, "client.receive after the peer vanished") {
                try check(isPeerSyncError(error), "client.receive after the peer vanished threw \(describe(error)); expected a PeerSyncError")
            }
            try check(pair.client.closeInfo != nil, "client.closeInfo is nil after its receive ended")
            let failed: Bool = try await within(timeout, "a send failing after the peer vanished") {
                for _ in 0..<100 {
                    do {
                        try await pair.client.send(.binary([UInt8](repeating: 1, count: 1024)))
                    } catch {
                        guard isPeerSyncError(error) else { throw CheckFailure("send after the peer vanished threw \(describe(error)); expected a PeerSyncError") }
                        return true
                    }
                }
                return false
            }
            try check(failed, "100 sends succeeded after the peer vanished and receive ended")
            try await within(timeout, "client.close after the peer vanished") { await pair.client.close() }
        }
    }

    /// The peer vanishes while this side is blocked in send: the send throws, no hang.
    func peerVanishesWhileSending() async throws {
        let messageSize = 64 << 10
        let limit = Swift.max(2, configuration.backpressureLimit / messageSize)
        try await withPair { pair in
            let sent = Counter()
            let done = Flag()
            let client = pair.client
            let sender = Task { () -> (any Error)? in
                defer { done.set() }
                for i in 0..<limit * 2 {
                    do {
                        try await client.send(Payload.tagged(UInt64(i), size: messageSize))
                    } catch {
                        return error
                    }
                    sent.set(i + 1)
                }
                return nil
            }
            do {
                _ = try await waitForStall(sent, limit: limit, senderDone: done, what: "blocking the sender")
            } catch {
                sender.cancel()
                throw error
            }
            try await within(timeout, "dropping the server") { await pair.dropServer() }
            let error = try await within(timeout, "the blocked send failing after the peer vanished") { await sender.value }
            guard let error else { throw CheckFailure("the blocked sender completed every send after the peer vanished") }
            try check(isPeerSyncError(error), "the blocked send threw \(describe(error)); expected a PeerSyncError")
            if let receiveError = try await receiveEnd(pair.client, "client.receive after the peer vanished") {
                try check(isPeerSyncError(receiveError), "client.receive threw \(describe(receiveError)); expected a PeerSyncError")
            }
        }
    }

    /// A listener accepts many concurrent connections, each a separate channel.
    func listenerAcceptsMany() async throws {
        let harness = try requireHarness()
        let count = configuration.listenerConnections
        let listener = try await within(timeout, "listening on \(harness.endpoint)") { try await harness.listen(harness.endpoint) }
        let opened = OpenConnections()
        do {
            try await concurrently([
                {
                    try await within(self.timeout, "accepting \(count) connections and echoing") {
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for _ in 0..<count {
                                guard let connection = try await listener.accept() else {
                                    throw CheckFailure("accept() returned nil on an open listener")
                                }
                                opened.add(connection)
                                group.addTask {
                                    guard let message = try await connection.receive() else {
                                        throw CheckFailure("an accepted connection ended before its first message")
                                    }
                                    try await connection.send(message)
                                }
                            }
                            try await group.waitForAll()
                        }
                    }
                },
                {
                    try await concurrently((0..<count).map { i in
                        {
                            let client = try await within(self.timeout, "connecting client \(i)") { try await harness.connect(listener.endpoint) }
                            opened.add(client)
                            try await self.send(client, .text("client \(i)"), "client \(i)'s greeting")
                            let echo = try await self.receive(client, "client \(i)'s echo")
                            try check(echo == .text("client \(i)"), "client \(i) got \(echo) back: connections are mixed up")
                        }
                    })
                },
            ])
        } catch {
            await opened.closeAll(timeout: timeout)
            await listener.close()
            throw error
        }
        await opened.closeAll(timeout: timeout)
        try await within(timeout, "closing the listener") { await listener.close() }
    }

    /// Closing a listener ends accept(), frees the endpoint (connect is refused) and leaves
    /// accepted connections working; a bound endpoint cannot be bound twice.
    func listenerClose() async throws {
        let harness = try requireHarness()
        let listener = try await within(timeout, "listening on \(harness.endpoint)") { try await harness.listen(harness.endpoint) }
        let opened = OpenConnections()
        do {
            let bound = listener.endpoint
            let second: (any Error)? = try await within(timeout, "listening twice on \(bound)") {
                do {
                    let other = try await harness.listen(bound)
                    await other.close()
                    return nil
                } catch {
                    return error
                }
            }
            guard let second else { throw CheckFailure("listening on \(bound) twice succeeded; expected PeerSyncError addressInUse") }
            try check(isPeerSyncError(second, [.addressInUse]), "listening on \(bound) twice threw \(describe(second)); expected PeerSyncError addressInUse")

            async let acceptedServer = within(timeout, "accepting a connection") { try await listener.accept() }
            let client = try await within(timeout, "connecting to \(bound)") { try await harness.connect(bound) }
            opened.add(client)
            guard let server = try await acceptedServer else { throw CheckFailure("accept() returned nil on an open listener") }
            opened.add(server)

            let pendingAccept = Task { try await listener.accept() }
            try await within(timeout, "closing the listener") { await listener.close() }
            let afterClose = try await within(timeout, "a pending accept() ending when the listener closes") { try await pendingAccept.value }
            try check(afterClose == nil, "a pending accept() returned a connection after the listener closed")
            let later = try await within(timeout, "accept() after close") { try await listener.accept() }
            try check(later == nil, "accept() after close returned a connection")

            try await send(client, .text("still open"), "a message after the listener closed")
            try check(try await receive(server, "a message after the listener closed") == .text("still open"), "wrong message after the listener closed")
            try await send(server, .text("reply"), "a reply after the listener closed")
            try check(try await receive(client, "a reply after the listener closed") == .text("reply"), "wrong reply after the listener closed")

            let refused: (any Error)? = try await within(timeout, "connecting to a closed listener") {
                do {
                    let connection = try await harness.connect(bound)
                    await connection.close()
                    return nil
                } catch {
                    return error
                }
            }
            guard let refused else { throw CheckFailure("connecting to \(bound) after its listener closed succeeded") }
            try check(isPeerSyncError(refused, [.connectionRefused]), "connecting to a closed listener threw \(describe(refused)); expected PeerSyncError connectionRefused")
        } catch {
            await opened.closeAll(timeout: timeout)
            await listener.close()
            throw error
        }
        await opened.closeAll(timeout: timeout)
    }
}

/// Connections opened by a case, closed at its end.
private final class OpenConnections: Sendable {
    private let list = LockedValue<[any MessageConnection]>([])
    func add(_ connection: any MessageConnection) { list.withLock { $0.append(connection) } }
    func closeAll(timeout: Duration) async {
        let all = list.withLock { list in
            let all = list
            list.removeAll()
            return all
        }
        for connection in all {
            _ = try? await within(timeout, "closing a connection") { await connection.close() }
        }
    }
}
