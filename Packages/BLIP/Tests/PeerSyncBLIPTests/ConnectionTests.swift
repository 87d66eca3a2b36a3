import Foundation
import Synchronization
import Testing
@testable import PeerSyncBLIP
import PeerSyncCore

/// An unbounded frame queue with one reader (test support only).
final class FrameQueue: Sendable {
    private struct State {
        var frames: [[UInt8]] = []
        var waiter: CheckedContinuation<[UInt8]?, Never>?
        var finished = false
    }
    private let state = Mutex(State())

    func push(_ frame: [UInt8]) {
        let waiter: CheckedContinuation<[UInt8]?, Never>? = state.withLock { s in
            if s.finished { return nil }
            if let w = s.waiter { s.waiter = nil; return w }
            s.frames.append(frame)
            return nil
        }
        waiter?.resume(returning: frame)
    }

    func finish() {
        let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, Never>? in
            s.finished = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: nil)
    }

    func pop() async -> [UInt8]? {
        await withCheckedContinuation { continuation in
            let immediate: [UInt8]?? = state.withLock { s in
                if !s.frames.isEmpty { return .some(s.frames.removeFirst()) }
                if s.finished { return .some(nil) }
                s.waiter = continuation
                return .none
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }
}

/// Two in-memory channels wired back to back; counts sent frames for assertions.
final class MemoryChannel: BLIPFrameChannel, Sendable {
    let inbound = FrameQueue()
    let peer = Mutex<MemoryChannel?>(nil)
    let sentFrames = Mutex<Int>(0)

    static func pair() -> (MemoryChannel, MemoryChannel) {
        let a = MemoryChannel(), b = MemoryChannel()
        a.peer.withLock { $0 = b }
        b.peer.withLock { $0 = a }
        return (a, b)
    }

    func sendFrame(_ frame: [UInt8]) async throws {
        guard let peer = peer.withLock({ $0 }) else { throw PeerSyncError(.closed, "closed") }
        sentFrames.withLock { $0 += 1 }
        peer.inbound.push(frame)
    }

    func receiveFrame() async throws -> [UInt8]? { await inbound.pop() }

    func close(code: Int, reason: String) async {
        let p = peer.withLock { p in defer { p = nil }; return p }
        inbound.finish()
        p?.inbound.finish()
    }

    /// Injects raw bytes as if the peer had sent them.
    func inject(_ frame: [UInt8]) { inbound.push(frame) }
}

@Suite struct ConnectionTests {
    func connected() async throws -> (BLIPConnection, BLIPConnection, MemoryChannel, MemoryChannel) {
        let (a, b) = MemoryChannel.pair()
        return (try BLIPConnection(channel: a), try BLIPConnection(channel: b), a, b)
    }

    @Test func requestResponseAndUnknownProfile() async throws {
        let (client, server, _, _) = try await connected()
        await server.setHandler(profile: "echo") { request in
            BLIPMessage(type: .response, properties: ["n": request.properties["n"] ?? ""], body: request.body.reversed())
        }
        await server.setHandler(profile: "fail") { _ in
            throw PeerSyncError(.conflict, blip: .http(409, "nope"))
        }
        await client.start()
        await server.start()
        let reply = try await client.sendRequest(.request("echo", properties: ["n": "7"], body: [1, 2, 3]))
        #expect(reply.type == .response && reply.properties["n"] == "7" && reply.body == [3, 2, 1])
        let missing = try await client.sendRequest(.request("whatever"))
        #expect(missing.errorDomain == "BLIP" && missing.errorCode == 404)
        let failed = try await client.sendRequest(.request("fail"))
        #expect(failed.errorDomain == "HTTP" && failed.errorCode == 409 && failed.bodyString == "nope")
        #expect(failed.blipError == .http(409, "nope"))
        await client.close()
        #expect(await server.waitUntilClosed() == .normal)
    }

    /// `waitUntilHandlersFinished()` returns only once every request received has been through
    /// its handler — a concurrent one still running after the connection closed, and a
    /// sequential one queued behind a busy handler — and at once when none is running.
    @Test func waitUntilHandlersFinishedWaitsForRunningAndQueuedHandlers() async throws {
        let (client, server, _, _) = try await connected()
        let released = Mutex(false)
        let finished = Mutex<[String]>([])
        @Sendable func waitForRelease() async {
            while !released.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(2)) }
        }
        await server.setHandler(profile: "slow", concurrent: true) { _ in
            await waitForRelease()
            finished.withLock { $0.append("slow") }
            return nil
        }
        await server.setHandler(profile: "first") { _ in
            await waitForRelease()
            finished.withLock { $0.append("first") }
            return nil
        }
        await server.setHandler(profile: "second") { _ in
            finished.withLock { $0.append("second") }
            return nil
        }
        await server.setHandler(profile: "ping", concurrent: true) { _ in nil }
        await server.start()
        await client.start()
        await server.waitUntilHandlersFinished()  // none yet: returns at once
        for profile in ["slow", "first", "second"] {
            _ = try await client.sendRequest(BLIPMessage.request(profile, flags: .noReply))
        }
        // Requests are dispatched in order: once "ping" is answered, the three are dispatched.
        _ = try await client.sendRequest(BLIPMessage.request("ping"))
        await client.close()
        _ = await server.waitUntilClosed()
        let waiting = Task { await server.waitUntilHandlersFinished(); return finished.withLock { $0 } }
        try await Task.sleep(for: .milliseconds(100))
        #expect(finished.withLock { $0 }.isEmpty)
        released.withLock { $0 = true }
        let seen = await waiting.value
        #expect(Set(seen) == ["slow", "first", "second"])
    }

    /// A handler's error reply is the `BLIPError` its thrown error carries, on the wire exactly
    /// the properties `Error-Domain`, `Error-Code` and the message as body; any other error is
    /// `BLIP`/500 with the error's message. The requester reads the reply back as a `BLIPError`.
    @Test func errorRepliesAreTypedValues() async throws {
        let typed = BLIPMessage.error(BLIPError(domain: "LiteCore", code: 7, message: "missing"))
        let byName = BLIPMessage.error(domain: "LiteCore", code: 7, message: "missing")
        #expect(typed.encodedContent() == byName.encodedContent())
        #expect(typed.properties.map { "\($0.0)=\($0.1)" } == ["Error-Domain=LiteCore", "Error-Code=7"])

        let carried = PeerSyncError(.conflict, blip: .http(409, "conflict"), context: ["docID": "a"])
        #expect(carried.blipError == .http(409, "conflict") && carried.message == "conflict")
        #expect(carried.with("rev", "1-a").blipError == carried.blipError)
        #expect(carried != PeerSyncError(.conflict, "conflict", context: ["docID": "a"]))
        #expect(PeerSyncError(.io, "plain").blipError == nil)

        let (client, server, _, _) = try await connected()
        await server.setHandler(profile: "plain") { _ in throw PeerSyncError(.io, "disk on fire") }
        await client.start()
        await server.start()
        let reply = try await client.sendRequest(.request("plain"))
        #expect(reply.blipError == .blip(500, "disk on fire"))
        #expect(BLIPMessage(type: .response).blipError == nil)
        await client.close()
    }

    /// Issue 9: NUL separates properties on the wire, so a property holding one would reach
    /// the peer malformed ("odd number of strings") and kill the connection. Sending such a
    /// request throws a clear error instead and sends nothing; a handler's response holding
    /// one becomes an error response. The connection stays usable either way.
    @Test func propertiesWithNULAreRefusedBeforeSending() async throws {
        let (client, server, _, _) = try await connected()
        await server.setHandler(profile: "echo") { request in
            BLIPMessage(type: .response, properties: ["n": request.properties["n"] ?? ""])
        }
        await server.setHandler(profile: "bad") { _ in
            BLIPMessage(type: .response, properties: ["id": "a\u{0}b"])
        }
        await client.start()
        await server.start()
        for request in [BLIPMessage.request("echo", properties: ["id": "a\u{0}b"]),
                        .request("echo", properties: [("bad\u{0}name", "x")]),
                        .request("echo", properties: ["id": "\u{0}"], flags: .noReply)] {
            let error = await #expect(throws: PeerSyncError.self) { try await client.sendRequest(request) }
            #expect(error?.code == .invalidArgument)
            #expect(error?.message.contains("contains NUL") == true)
        }
        await #expect(throws: PeerSyncError.self) {
            try await client.sendRequest(.request("echo", properties: ["id": "a\u{0}b"]), timeout: .seconds(5), waitingFor: "echo")
        }
        await #expect(throws: PeerSyncError.self) {
            try await client.sendRequestStreamingResponse(.request("echo", properties: ["id": "a\u{0}b"]))
        }
        let refused = try await client.sendRequest(.request("bad"))
        #expect(refused.isError && refused.bodyString.contains("contains NUL"))
        let reply = try await client.sendRequest(.request("echo", properties: ["n": "ok"]))
        #expect(reply.properties["n"] == "ok")
        let clientClosed = await client.isClosed, serverClosed = await server.isClosed
        #expect(!clientClosed && !serverClosed)
        await client.close()
        #expect(await server.waitUntilClosed() == .normal)
    }

    @Test func manyConcurrentRequestsCompressedAndNot() async throws {
        let (client, server, _, _) = try await connected()
        await server.setHandler(profile: "sum") { request in
            let n = request.body.reduce(0) { $0 + Int($1) }
            return BLIPMessage(type: .response, flags: [.compressed], body: Array(String(n).utf8))
        }
        await client.start()
        await server.start()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    let body = [UInt8](repeating: UInt8(i % 50), count: 100 + i * 37)
                    let flags: BLIPFlags = i % 2 == 0 ? [.compressed] : (i % 3 == 0 ? [.urgent] : [])
                    let reply = try await client.sendRequest(.request("sum", body: body, flags: flags))
                    #expect(reply.bodyString == String(body.reduce(0) { $0 + Int($1) }))
                }
            }
            try await group.waitForAll()
        }
        await client.close()
    }

    @Test func fiftyMegabyteMessageFlowsWithAcks() async throws {
        var tuning = BLIPTuning()
        tuning.maxMessageSize = 64 * 1024 * 1024
        let (a, b) = MemoryChannel.pair()
        let client = try BLIPConnection(channel: a, tuning: tuning)
        let server = try BLIPConnection(channel: b, tuning: tuning)
        let received = Mutex<[UInt8]>([])
        await server.setHandler(profile: "store") { request in
            received.withLock { $0 = request.body }
            return BLIPMessage(type: .response, body: Array(String(request.body.count).utf8))
        }
        await client.start()
        await server.start()
        // Incompressible content: a 64 KiB random block repeated (farther apart than deflate's window).
        var block = [UInt8](repeating: 0, count: 65536)
        var rng = SystemRandomNumberGenerator()
        for i in 0..<block.count { block[i] = UInt8.random(in: 0...255, using: &rng) }
        var body: [UInt8] = []
        body.reserveCapacity(50 * 1024 * 1024)
        while body.count < 50 * 1024 * 1024 { body.append(contentsOf: block) }
        let reply = try await client.sendRequest(.request("store", body: body))
        #expect(reply.bodyString == String(body.count))
        #expect(received.withLock { $0 == body })
        // 50 MiB in ≤16 KiB frames: thousands of frames; the sender only got past the
        // 128,000-byte window because the receiver ACKed: one ACK per ≥ 50,000 and < 50,000 + one
        // frame (16,384) bytes, so at least 52,428,800 / 66,384 ≈ 790 ACKs.
        #expect(a.sentFrames.withLock { $0 } > 3000)
        #expect(b.sentFrames.withLock { $0 } > 780)
        await client.close()
    }

    @Test func protocolViolationClosesWithErrorAndFailsPending() async throws {
        let (client, server, _, serverChannel) = try await connected()
        await server.setHandler(profile: "slow") { _ in
            try await Task.sleep(for: .seconds(30))
            return nil
        }
        await client.start()
        await server.start()
        let pending = Task { try await client.sendRequest(.request("slow")) }
        try await Task.sleep(for: .milliseconds(50))
        serverChannel.inject([0x09, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef])  // request #9: out of order
        let reason = await server.waitUntilClosed()
        guard case .error(let error) = reason else { Issue.record("expected an error close"); return }
        #expect(error.code == .protocolError)
        await #expect(throws: PeerSyncError.self) { _ = try await pending.value }
        // The server closed the link, so the client saw the stream end.
        #expect(await client.waitUntilClosed() == .normal)
    }

    /// Answered requests leave the reply-deadline queue as their responses arrive, not when
    /// the watchdog next wakes (a whole timeout later): memory must not grow with the number
    /// of requests sent within one timeout.
    @Test func answeredRequestsDoNotAccumulateDeadlines() async throws {
        let (client, server, _, _) = try await connected()
        await server.setHandler(profile: "echo") { request in BLIPMessage(type: .response, body: request.body) }
        await client.start()
        await server.start()
        for i in 0..<2_000 {
            let reply = try await client.sendRequest(.request("echo", body: [UInt8(i & 0xFF)]), timeout: .seconds(60), waitingFor: "echo")
            #expect(reply.body == [UInt8(i & 0xFF)])
        }
        #expect(await client.heldDeadlineCount == 0)
        await client.close()
    }

    @Test func replyTimeoutAndCancellationDropTheLateResponse() async throws {
        let (client, server, _, _) = try await connected()
        let (release, releaser) = AsyncStream<Void>.makeStream()
        let gate = Mutex<AsyncStream<Void>?>(release)
        await server.setHandler(profile: "slow", concurrent: true) { _ in
            if let stream = gate.withLock({ g in defer { g = nil }; return g }) {
                for await _ in stream { break }
            }
            return BLIPMessage(type: .response, body: Array("late".utf8))
        }
        await server.setHandler(profile: "echo") { request in BLIPMessage(type: .response, body: request.body) }
        await client.start()
        await server.start()

        // No answer within the limit: `.timeout`, naming what was awaited.
        do {
            _ = try await client.sendRequest(.request("slow"), timeout: .milliseconds(100), waitingFor: "slow thing")
            Issue.record("expected a timeout")
        } catch let error as PeerSyncError {
            #expect(error.code == .timeout && error.context["waitingFor"] == "slow thing")
        }
        // The late response is dropped; the connection goes on.
        releaser.yield()
        let reply = try await client.sendRequest(.request("echo", body: [7]), timeout: .seconds(30), waitingFor: "echo")
        #expect(reply.body == [7])
        #expect(await client.isClosed == false)

        // Cancelling the caller ends its wait at once (the handler never answers this one).
        let (never, _) = AsyncStream<Void>.makeStream()
        gate.withLock { $0 = never }
        let waiting = Task { try await client.sendRequest(.request("slow"), timeout: .seconds(60), waitingFor: "slow") }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        await #expect(throws: CancellationError.self) { _ = try await waiting.value }
        let again = try await client.sendRequest(.request("echo", body: [8]), timeout: .seconds(30), waitingFor: "echo")
        #expect(again.body == [8])
        await client.close()
    }
}

/// A channel whose sends take `delay` each, or never finish once `stalled` (a peer that stopped
/// reading): the frames behind wait in the connection's queue.
final class SlowSendChannel: BLIPFrameChannel, Sendable {
    let inner: MemoryChannel
    let delay: Duration
    let stalled = Mutex(false)

    init(_ inner: MemoryChannel, delay: Duration) {
        self.inner = inner
        self.delay = delay
    }

    func sendFrame(_ frame: [UInt8]) async throws {
        while stalled.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
        try await Task.sleep(for: delay)
        try await inner.sendFrame(frame)
    }

    func receiveFrame() async throws -> [UInt8]? { try await inner.receiveFrame() }
    func close(code: Int, reason: String) async {
        stalled.withLock { $0 = false }
        await inner.close(code: code, reason: reason)
    }
}

@Suite struct ReplyTimeoutTests {
    /// Under load a request can wait in its own connection's queue longer than the reply
    /// timeout (the mesh at 64 peers on 2 cores: 800 `rev`s queued per link). That wait is not
    /// the peer's silence: the timeout runs from when the request starts going out.
    @Test func aRequestQueuedBehindOthersTimesOutOnlyOnThePeersSilence() async throws {
        let (a, b) = MemoryChannel.pair()
        let client = try BLIPConnection(channel: SlowSendChannel(a, delay: .milliseconds(400)))
        let server = try BLIPConnection(channel: b)
        await server.setHandler(profile: "echo") { request in BLIPMessage(type: .response, body: request.body) }
        await client.start()
        await server.start()
        // 12 requests × 400 ms per frame: the last starts going out ~4.4 s after it was queued,
        // far beyond its 2 s timeout; each is answered well within 2 s of going out.
        try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for i in 0..<12 {
                group.addTask {
                    try await client.sendRequest(.request("echo", body: [UInt8(i)]), timeout: .seconds(2), waitingFor: "echo").body
                }
            }
            var bodies: [[UInt8]] = []
            for try await body in group { bodies.append(body) }
            #expect(Set(bodies) == Set((0..<12).map { [UInt8($0)] }))
        }
        await client.close()
    }

    /// A peer that stops reading still ends every wait: the request being written times out from
    /// when it went out, and one queued behind it once nothing went out for a whole timeout.
    @Test func aStalledPeerStillTimesOutRequestsStillQueued() async throws {
        let (a, b) = MemoryChannel.pair()
        let slow = SlowSendChannel(a, delay: .zero)
        let client = try BLIPConnection(channel: slow)
        let server = try BLIPConnection(channel: b)
        await server.setHandler(profile: "echo") { request in BLIPMessage(type: .response, body: request.body) }
        await client.start()
        await server.start()
        #expect(try await client.sendRequest(.request("echo", body: [1]), timeout: .seconds(30), waitingFor: "echo").body == [1])
        slow.stalled.withLock { $0 = true }
        let first = Task { try await client.sendRequest(.request("echo", body: [2]), timeout: .milliseconds(300), waitingFor: "first") }
        let queued = Task { try await client.sendRequest(.request("echo", body: [3]), timeout: .milliseconds(300), waitingFor: "queued") }
        for (task, name) in [(first, "first"), (queued, "queued")] {
            do {
                _ = try await task.value
                Issue.record("\(name): expected a timeout")
            } catch let error as PeerSyncError {
                #expect(error.code == .timeout && error.context["waitingFor"] == name)
            }
        }
        await client.close()
    }
}
