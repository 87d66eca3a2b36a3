import PeerSyncCore
import PeerSyncTransport
import Synchronization
import Testing

/// Polls `condition` until it holds; records an issue if it does not within 30 s (a hang
/// guard, not a timing assertion).
func eventually(_ what: String, sourceLocation: SourceLocation = #_sourceLocation,
                _ condition: () -> Bool) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + .seconds(30)
    while !condition() {
        if clock.now > deadline {
            Issue.record("never happened: \(what)", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(2))
    }
}

private func bytesQueue(maxCount: Int = 100, maxBytes: Int) -> AsyncMessageQueue<[UInt8]> {
    AsyncMessageQueue(maxCount: maxCount, maxBytes: maxBytes, cost: { $0.count })
}

private func expectCode(_ code: PeerSyncError.Code, sourceLocation: SourceLocation = #_sourceLocation,
                        _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("expected PeerSyncError \(code), nothing thrown", sourceLocation: sourceLocation)
    } catch let error as PeerSyncError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected PeerSyncError \(code), got \(error)", sourceLocation: sourceLocation)
    }
}

@Suite struct AsyncMessageQueueTests {
    @Test func fifoWithCountLimit() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 2)
        #expect(try queue.trySend(1))
        #expect(try queue.trySend(2))
        #expect(try !queue.trySend(3))
        let sender = Task { try await queue.send(3) }
        try await eventually("the third send suspends") { queue.waitingSenderCount == 1 }
        #expect(queue.count == 2)
        #expect(try await queue.receive() == 1)
        try await sender.value  // admitted once there was room
        #expect(try await queue.receive() == 2)
        #expect(try await queue.receive() == 3)
        #expect(queue.count == 0 && queue.tryReceive() == nil)
    }

    @Test func byteLimitAdmitsAnOversizedElementOnlyAlone() async throws {
        let queue = bytesQueue(maxBytes: 10)
        #expect(try queue.trySend([UInt8](repeating: 0, count: 6)))
        #expect(try !queue.trySend([UInt8](repeating: 0, count: 6)))
        #expect(queue.byteCount == 6)
        _ = queue.tryReceive()
        #expect(try queue.trySend([UInt8](repeating: 1, count: 25)))  // alone: admitted
        #expect(try !queue.trySend([2]))                                // not next to it
        #expect(queue.tryReceive()?.count == 25)
        #expect(try queue.trySend([2]))
    }

    @Test func laterSendersNeverOvertakeWaitingOnes() async throws {
        let queue = bytesQueue(maxBytes: 10)
        try await queue.send([UInt8](repeating: 0, count: 5))
        let big = Task { try await queue.send([UInt8](repeating: 8, count: 8)) }
        try await eventually("the big send waits") { queue.waitingSenderCount == 1 }
        // There is room for one byte, but a sender is waiting: no overtaking.
        #expect(try !queue.trySend([1]))
        let small = Task { try await queue.send([1]) }
        try await eventually("the small send queues behind") { queue.waitingSenderCount == 2 }
        #expect(try await queue.receive()?.count == 5)
        try await big.value
        try await small.value
        #expect(try await queue.receive() == [UInt8](repeating: 8, count: 8))
        #expect(try await queue.receive() == [1])
    }

    @Test func cleanFinishDeliversBufferedThenNil() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 2)
        try await queue.send(1)
        try await queue.send(2)
        let waiting = Task { try await queue.send(3) }
        try await eventually("a sender waits") { queue.waitingSenderCount == 1 }
        queue.finish()
        await expectCode(.connectionClosed) { try await waiting.value }
        await expectCode(.connectionClosed) { try await queue.send(4) }
        #expect(throws: PeerSyncError.self) { try queue.trySend(4) }
        #expect(queue.isFinished)
        #expect(try await queue.receive() == 1)
        #expect(try await queue.receive() == 2)
        #expect(try await queue.receive() == nil)
        #expect(try await queue.receive() == nil)
    }

    @Test func finishWithErrorDeliversBufferedThenTheError() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 4)
        try await queue.send(1)
        let error = PeerSyncError(.connectionReset, "gone")
        queue.finish(throwing: error)
        queue.finish()  // the first finish decides
        #expect(try await queue.receive() == 1)
        for _ in 0..<2 {
            await #expect(throws: error) { try await queue.receive() }
        }
        await #expect(throws: error) { try await queue.send(2) }
    }

    @Test func discardingReturnsBufferedElements() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 4)
        for i in 1...3 { try await queue.send(i) }
        #expect(queue.finish() == [])
        #expect(queue.finish(discardingBuffered: true) == [1, 2, 3])
        #expect(queue.count == 0 && queue.byteCount == 0)
        #expect(try await queue.receive() == nil)
    }

    @Test func finishWakesWaitingReceivers() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 1)
        let receivers = (0..<3).map { _ in Task { try await queue.receive() } }
        try await Task.sleep(for: .milliseconds(20))
        queue.finish()
        for receiver in receivers { #expect(try await receiver.value == nil) }
    }

    @Test func cancellingAWaitingSendEnqueuesNothingAndLetsOthersIn() async throws {
        let queue = bytesQueue(maxBytes: 10)
        try await queue.send([UInt8](repeating: 0, count: 5))
        let big = Task { try await queue.send([UInt8](repeating: 8, count: 8)) }
        try await eventually("the big send waits") { queue.waitingSenderCount == 1 }
        let small = Task { try await queue.send([1]) }
        try await eventually("the small send waits") { queue.waitingSenderCount == 2 }
        big.cancel()
        await expectCode(.cancelled) { try await big.value }
        // With the big one gone, the small one fits next to the 5 bytes.
        try await small.value
        #expect(queue.waitingSenderCount == 0)
        #expect(try await queue.receive()?.count == 5)
        #expect(try await queue.receive() == [1])
        #expect(queue.tryReceive() == nil)
    }

    @Test func cancellingAWaitingReceiveTakesNothing() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 4)
        let receiver = Task { try await queue.receive() }
        try await Task.sleep(for: .milliseconds(20))
        receiver.cancel()
        await expectCode(.cancelled) { _ = try await receiver.value }
        try await queue.send(7)
        #expect(queue.tryReceive() == 7)
    }

    @Test func alreadyCancelledWaitersFailAtOnce() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 1)
        try await queue.send(1)
        let outcome = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            do {
                try await queue.send(2)
                return "sent"
            } catch let error as PeerSyncError {
                return error.code.rawValue
            } catch {
                return "\(error)"
            }
        }.value
        #expect(outcome == "cancelled")
        #expect(queue.count == 1)
    }

    @Test func eachElementGoesToExactlyOneReceiver() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 2)
        let receivers = (0..<3).map { _ in Task { try await queue.receive() } }
        for i in 1...3 { try await queue.send(i) }
        var got: [Int] = []
        for receiver in receivers { got.append(try #require(try await receiver.value)) }
        #expect(got.sorted() == [1, 2, 3])
    }

    @Test func isAnAsyncSequence() async throws {
        let queue = AsyncMessageQueue<String>(maxCount: 8)
        for word in ["a", "b", "c"] { try await queue.send(word) }
        queue.finish()
        var words: [String] = []
        for try await word in queue { words.append(word) }
        #expect(words == ["a", "b", "c"])
    }

    @Test func manyProducersAndConsumersLoseNothing() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 3)
        let producers = 8, perProducer = 500
        let consumed = try await withThrowingTaskGroup(of: [Int].self) { group in
            for p in 0..<producers {
                group.addTask {
                    for i in 0..<perProducer { try await queue.send(p * perProducer + i) }
                    return []
                }
            }
            for _ in 0..<4 {
                group.addTask {
                    var mine: [Int] = []
                    while let value = try await queue.receive() { mine.append(value) }
                    return mine
                }
            }
            var all: [Int] = []
            var finishedProducers = 0
            // Producers return [] when done; finish the queue once all are done.
            while let result = try await group.next() {
                if result.isEmpty {
                    finishedProducers += 1
                    if finishedProducers == producers { queue.finish() }
                } else {
                    all += result
                }
            }
            return all
        }
        #expect(consumed.count == producers * perProducer)
        #expect(Set(consumed).count == producers * perProducer)
    }

    @Test func oneConsumerSeesEachProducersOrder() async throws {
        let queue = AsyncMessageQueue<Int>(maxCount: 2)
        let producers = 4, perProducer = 300
        let done = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for p in 0..<producers {
                    group.addTask { for i in 0..<perProducer { try await queue.send(p * 10_000 + i) } }
                }
                try await group.waitForAll()
            }
            queue.finish()
        }
        var next = [Int](repeating: 0, count: producers)
        for try await value in queue {
            let (p, i) = (value / 10_000, value % 10_000)
            #expect(i == next[p])
            next[p] = i + 1
        }
        try await done.value
        #expect(next == [Int](repeating: perProducer, count: producers))
    }

    @Test func transportMessageQueueCountsPayloadBytes() throws {
        let queue = AsyncMessageQueue<TransportMessage>(maxCount: 10, maxBytes: 5)
        #expect(try queue.trySend(.text("é€")))  // 5 bytes
        #expect(queue.byteCount == 5)
        #expect(try !queue.trySend(.binary([1])))
    }
}
