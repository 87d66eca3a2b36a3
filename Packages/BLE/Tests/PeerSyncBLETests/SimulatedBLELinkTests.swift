import PeerSyncBLE
import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport
import PeerSyncTransportTesting
import Testing

/// The shaped seqpacket link: what it carries, how it shapes it, and how it ends.
@Suite(.timeLimit(.minutes(2 * TestTiming.slowFactor))) struct SimulatedBLELinkTests {
    /// A fast link for tests that are not about timing.
    static let fast = BLELinkConditions(bitsPerSecond: 400_000_000, latency: .milliseconds(1))

    /// Reads from `socket` until it ends; returns the bytes and whether it ended with an error.
    static func drain(_ socket: SeqPacketSocket) async -> (bytes: [UInt8], packets: Int, failed: Bool) {
        var bytes: [UInt8] = []
        var packets = 0
        do {
            while let packet = try await socket.receive(maxBytes: 4096) {
                bytes += packet
                packets += 1
            }
            return (bytes, packets, false)
        } catch {
            return (bytes, packets, true)
        }
    }

    /// Sends until a send fails (the link ended); returns whether one did within `limit` sends.
    static func sendUntilFailure(_ socket: SeqPacketSocket, limit: Int = 100_000) async -> Bool {
        for _ in 0..<limit {
            do { try await socket.send([UInt8](repeating: 1, count: 100)) } catch { return true }
        }
        return false
    }

    @Test func carriesPacketsInOrderBothWays() async throws {
        let (link, central, peripheral) = try SimulatedBLELink.open(conditions: Self.fast)
        async let fromCentral = Self.drain(peripheral)
        async let fromPeripheral = Self.drain(central)
        for i in 0..<300 {
            try await central.send([UInt8](repeating: UInt8(i % 251), count: 1 + i % 247))
            try await peripheral.send([UInt8(i % 256), UInt8(i / 256)])
        }
        central.shutdownOutput()
        peripheral.shutdownOutput()
        let (atPeripheral, atCentral) = await (fromCentral, fromPeripheral)
        #expect(!atPeripheral.failed && !atCentral.failed)
        #expect(atPeripheral.packets == 300 && atCentral.packets == 300)
        var sentByCentral: [UInt8] = [], sentByPeripheral: [UInt8] = []
        for i in 0..<300 {
            sentByCentral += [UInt8](repeating: UInt8(i % 251), count: 1 + i % 247)
            sentByPeripheral += [UInt8(i % 256), UInt8(i / 256)]
        }
        #expect(atPeripheral.bytes == sentByCentral)
        #expect(atCentral.bytes == sentByPeripheral)
        await link.waitUntilEnded()
        let statistics = link.statistics
        #expect(statistics.packetsToPeripheral == 300 && statistics.packetsToCentral == 300)
        #expect(statistics.bytesToCentral == 600)
        #expect(statistics.lossReason == nil)
        central.close()
        peripheral.close()
    }

    /// Lower bounds only (a loaded machine makes it slower, never faster): 30 KB at 480 kbit/s
    /// take at least 0.5 s plus the latency; a round trip at least twice the latency.
    @Test func shapesRateAndLatency() async throws {
        let conditions = BLELinkConditions(bitsPerSecond: 480_000, latency: .milliseconds(40))
        let (_, central, peripheral) = try SimulatedBLELink.open(conditions: conditions)
        defer { central.close(); peripheral.close() }
        let clock = ContinuousClock()
        var start = clock.now
        try await central.send([1])
        #expect(try await peripheral.receive(maxBytes: 10) == [1])
        try await peripheral.send([2])
        #expect(try await central.receive(maxBytes: 10) == [2])
        #expect(clock.now - start >= .milliseconds(80))

        start = clock.now
        async let received: Int = {
            var total = 0
            while total < 30_000, let packet = try await peripheral.receive(maxBytes: 4096) { total += packet.count }
            return total
        }()
        for _ in 0..<125 { try await central.send([UInt8](repeating: 7, count: 240)) }
        #expect(try await received == 30_000)
        #expect(clock.now - start >= .milliseconds(500 + 40))
    }

    @Test func aPacketOverTheMTUBreaksTheLinkForBothEnds() async throws {
        let (link, central, peripheral) = try SimulatedBLELink.open(conditions: Self.fast)
        defer { central.close(); peripheral.close() }
        try await central.send([UInt8](repeating: 1, count: 247))
        #expect(try await peripheral.receive(maxBytes: 4096)?.count == 247)
        try await central.send([UInt8](repeating: 1, count: 248))
        await link.waitUntilEnded()
        #expect(link.statistics.oversizedPackets == 1)
        #expect(link.statistics.lossReason != nil)
        let atPeripheral = await Self.drain(peripheral)
        #expect(atPeripheral.bytes.isEmpty)
        #expect(await Self.sendUntilFailure(central))
        #expect(await Self.sendUntilFailure(peripheral))
    }

    @Test func aCutEndsTheConnectionForBothEnds() async throws {
        let (link, central, peripheral) = try SimulatedBLELink.open(conditions: Self.fast)
        defer { central.close(); peripheral.close() }
        try await central.send([1, 2, 3])
        #expect(try await peripheral.receive(maxBytes: 10) == [1, 2, 3])
        let centralEnd = Task { await Self.drain(central) }
        let peripheralEnd = Task { await Self.drain(peripheral) }
        link.cut(reason: "test")
        await link.waitUntilEnded()
        #expect(link.hasEnded)
        #expect(link.statistics.lossReason == "test")
        #expect(await centralEnd.value.bytes.isEmpty)
        #expect(await peripheralEnd.value.bytes.isEmpty)
        #expect(await Self.sendUntilFailure(central))
        #expect(await Self.sendUntilFailure(peripheral))
    }

    /// A half-close: what the central sent arrives, then the end of the stream; the peripheral
    /// can still answer. When both sides are done the link ends without a loss.
    @Test func shutdownIsAHalfClose() async throws {
        let (link, central, peripheral) = try SimulatedBLELink.open(conditions: Self.fast)
        defer { central.close(); peripheral.close() }
        try await central.send([1])
        central.shutdownOutput()
        #expect(try await peripheral.receive(maxBytes: 10) == [1])
        #expect(try await peripheral.receive(maxBytes: 10) == nil)
        try await peripheral.send([2])
        #expect(try await central.receive(maxBytes: 10) == [2])
        peripheral.close()
        #expect(try await central.receive(maxBytes: 10) == nil)
        await link.waitUntilEnded()
        #expect(link.statistics.lossReason == nil)
    }

    /// What arrives before a loss depends only on the conditions and the traffic.
    @Test(arguments: [BLELinkConditions(bitsPerSecond: 400_000_000, latency: .milliseconds(1), lossAfterBytes: 10_000),
                      BLELinkConditions(bitsPerSecond: 400_000_000, latency: .milliseconds(1), lossProbability: 0.01, seed: 7)])
    func aLossHappensAtTheSamePointEveryRun(conditions: BLELinkConditions) async throws {
        var deliveries: [Int] = []
        for _ in 0..<3 {
            let (link, central, peripheral) = try SimulatedBLELink.open(conditions: conditions)
            async let atPeripheral = Self.drain(peripheral)
            let sender = Task { await Self.sendUntilFailure(central, limit: 10_000) }
            let received = await atPeripheral
            #expect(await sender.value)
            await link.waitUntilEnded()
            #expect(link.statistics.lossReason != nil)
            deliveries.append(received.bytes.count)
            central.close()
            peripheral.close()
        }
        #expect(Set(deliveries).count == 1, "bytes delivered before the loss: \(deliveries)")
        if conditions.lossAfterBytes != nil { #expect(deliveries.first == 10_000) }
        #expect((deliveries.first ?? 0) < 100 * 10_000)
    }

    @Test func invalidConditionsAreRefused() {
        #expect(throws: PeerSyncError.self) { try SimulatedBLELink.open(conditions: BLELinkConditions(mtu: 0)) }
        #expect(throws: PeerSyncError.self) { try SimulatedBLELink.open(conditions: BLELinkConditions(bitsPerSecond: 0)) }
        #expect(throws: PeerSyncError.self) { try SimulatedBLELink.open(conditions: BLELinkConditions(inFlightBytes: 10)) }
        #expect(throws: PeerSyncError.self) { try SimulatedBLELink.open(conditions: BLELinkConditions(lossProbability: 2)) }
    }
}
