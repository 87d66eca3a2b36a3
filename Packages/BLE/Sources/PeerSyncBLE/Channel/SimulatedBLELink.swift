import PeerSyncCore
import PeerSyncPosix
import PeerSyncTransport

/// A simulated Bluetooth LE link between two L2CAP channel ends, made of real kernel sockets:
/// `central ⇄ shaper ⇄ peripheral`, two connected `AF_UNIX` `SOCK_SEQPACKET` pairs whose
/// inner ends a relay (on the same reactor as everything else) joins, shaped to
/// ``BLELinkConditions``. The ends are plain `SeqPacketSocket`s with the kernel's seqpacket
/// semantics (message boundaries, full buffers, shutdown, resets): whatever runs over them
/// would run over a BlueZ L2CAP socket unchanged.
///
/// Per direction, a packet read from one end occupies the link for `size × 8 / rate` seconds
/// after the packets ahead of it, then arrives ``BLELinkConditions/latency`` later, in order.
/// At most ``BLELinkConditions/inFlightBytes`` are in flight; beyond that the relay stops
/// reading, the sending end's socket fills and its sends suspend (back-pressure). A slow reader
/// at the other end blocks delivery the same way.
///
/// - **MTU**: a packet larger than ``BLELinkConditions/mtu`` breaks the link (a real channel
///   refuses it at `send` with `EMSGSIZE`; an `AF_UNIX` socket cannot be told the MTU, so the
///   relay, which sees it after the fact, fails loudly instead of passing it on).
/// - **Ending**: when one end shuts down its output or closes, what it sent still arrives,
///   then the other end reads the end of the stream (a half-close, as with TCP); once neither
///   direction can deliver any more, the relay closes its sockets and a peer still sending
///   gets an error. An end's reset breaks the link.
/// - **Loss of the link** (``cut(reason:)``, ``BLELinkConditions/lossAfterBytes``,
///   ``BLELinkConditions/lossProbability``, an oversized packet): both ends see the connection
///   end at once — their reads end (nil, or `.connectionReset`) and their sends fail — as when
///   a radio link drops; whatever else is in flight is dropped. A loss caused by a packet
///   happens when that packet would have arrived: the packets ahead of it in its direction
///   still arrive, so the same traffic is cut at the same point every run. ``cut(reason:)``
///   loses the link at once.
///
/// Threading: every member from any task. The relay runs in its own tasks until the link
/// ended; ``waitUntilEnded()`` waits for that.
public final class SimulatedBLELink: Sendable {
    /// What crossed the link so far.
    public struct Statistics: Sendable, Hashable {
        /// Packets and payload bytes accepted from the central end, toward the peripheral.
        public var packetsToPeripheral = 0
        /// Payload bytes accepted from the central end, toward the peripheral.
        public var bytesToPeripheral = 0
        /// Packets and payload bytes accepted from the peripheral end, toward the central.
        public var packetsToCentral = 0
        /// Payload bytes accepted from the peripheral end, toward the central.
        public var bytesToCentral = 0
        /// Packets over the MTU (each breaks the link).
        public var oversizedPackets = 0
        /// Why the link was lost, once it was (nil while up, and after an orderly end).
        public var lossReason: String?

        /// Payload bytes both directions carried.
        public var payloadBytes: Int { bytesToPeripheral + bytesToCentral }
    }

    /// The link's shape.
    public let conditions: BLELinkConditions

    /// The relay's sockets: index 0 is paired with the central end, 1 with the peripheral end.
    /// Direction `d` reads `inner[d]` and delivers to `inner[1 - d]`.
    private let inner: [SeqPacketSocket]
    private let wires: [AsyncMessageQueue<InFlightPacket>]
    private let state: LockedValue<State>

    private struct State {
        var statistics = Statistics()
        var random: [SplitMix64]
        /// Directions whose delivery ended (delivered everything, or the receiving end is gone).
        var finishedDirections = 0
        var ended = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private struct InFlightPacket: Sendable {
        var bytes: [UInt8]
        var arrival: ContinuousClock.Instant
        /// Set on the marker of a loss: the link is lost when it arrives (what is ahead of it
        /// still arrives, so a loss happens at the same point of the traffic every run).
        var loss: String? = nil
    }

    private init(conditions: BLELinkConditions, inner: [SeqPacketSocket]) {
        self.conditions = conditions
        self.inner = inner
        wires = (0..<2).map { _ in
            AsyncMessageQueue(maxCount: conditions.inFlightBytes, maxBytes: conditions.inFlightBytes, cost: { $0.bytes.count })
        }
        state = LockedValue(State(random: [SplitMix64(seed: conditions.seed), SplitMix64(seed: ~conditions.seed)]))
    }

    /// Opens a link and returns it with its two ends (owned by the caller, who closes them).
    /// Throws `PeerSyncError.Code.invalidArgument` for invalid conditions, or the socket
    /// errors of `SeqPacketSocket.pair()`.
    public static func open(conditions: BLELinkConditions = .bluetoothLE) throws(PeerSyncError)
        -> (link: SimulatedBLELink, central: SeqPacketSocket, peripheral: SeqPacketSocket) {
        try conditions.validate()
        let (central, centralInner) = try SeqPacketSocket.pair()
        let peripheral: SeqPacketSocket, peripheralInner: SeqPacketSocket
        do {
            (peripheral, peripheralInner) = try SeqPacketSocket.pair()
        } catch {
            central.close()
            centralInner.close()
            throw error
        }
        let link = SimulatedBLELink(conditions: conditions, inner: [centralInner, peripheralInner])
        for direction in 0..<2 {
            Task { await link.carry(direction) }
            Task { await link.deliver(direction) }
        }
        return (link, central, peripheral)
    }

    /// What crossed the link so far.
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Whether the link has ended (lost, or both directions finished).
    public var hasEnded: Bool { state.withLock { $0.ended } }

    /// Loses the link now (see the type's documentation). Idempotent; nothing happens once the
    /// link has ended.
    public func cut(reason: String = "the link was cut") {
        lose(reason)
    }

    /// Suspends until the link has ended.
    public func waitUntilEnded() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ended = state.withLock { s -> Bool in
                if s.ended { return true }
                s.endWaiters.append(continuation)
                return false
            }
            if ended { continuation.resume() }
        }
    }

    // MARK: Relay

    private enum Admission { case carry, lose(String) }

    /// Accounts a packet read in `direction`; decides whether it breaks the link.
    private func admit(_ size: Int, direction: Int) -> Admission {
        state.withLock { s -> Admission in
            if size > conditions.mtu {
                s.statistics.oversizedPackets += 1
                return .lose("a \(size)-byte packet exceeded the link's \(conditions.mtu)-byte MTU")
            }
            let carried: Int
            if direction == 0 {
                s.statistics.packetsToPeripheral += 1
                s.statistics.bytesToPeripheral += size
                carried = s.statistics.bytesToPeripheral
            } else {
                s.statistics.packetsToCentral += 1
                s.statistics.bytesToCentral += size
                carried = s.statistics.bytesToCentral
            }
            if let limit = conditions.lossAfterBytes, carried > limit {
                return .lose("the link was lost after \(limit) bytes in one direction")
            }
            if conditions.lossProbability > 0,
               Double.random(in: 0..<1, using: &s.random[direction]) < conditions.lossProbability {
                return .lose("the link was lost at random (probability \(conditions.lossProbability) per packet)")
            }
            return .carry
        }
    }

    /// Reads packets from the end of `direction` and puts them on its wire with their arrival
    /// times; at the end's shutdown, finishes the wire (what is on it still arrives).
    private func carry(_ direction: Int) async {
        let from = inner[direction]
        let wire = wires[direction]
        let clock = ContinuousClock()
        var linkFreeAt = clock.now
        var delivering = true
        do {
            while let packet = try await from.receive(maxBytes: conditions.mtu + 1) {
                let admission = admit(packet.count, direction: direction)
                guard delivering else {
                    // The receiving end is gone: nothing arrives, but a loss still ends the link.
                    if case .lose(let reason) = admission { lose(reason) }
                    continue
                }
                linkFreeAt = max(clock.now, linkFreeAt) + conditions.transmissionTime(packet.count)
                var item = InFlightPacket(bytes: packet, arrival: linkFreeAt + conditions.latency)
                if case .lose(let reason) = admission {
                    item = InFlightPacket(bytes: [], arrival: item.arrival, loss: reason)
                }
                do {
                    try await wire.send(item)
                } catch {
                    delivering = false
                    if item.loss != nil { lose(item.loss ?? "") }
                }
                if item.loss != nil { return }  // the link ends when the marker arrives
            }
            wire.finish()
        } catch let error as PeerSyncError where error.code == .closed {
            return  // the relay closed its sockets: the link has ended
        } catch {
            lose("an end of the link broke: \(error)")
        }
    }

    /// Delivers the packets of `direction`'s wire at their arrival times, then shuts down the
    /// receiving end's input (it reads the end of the stream).
    private func deliver(_ direction: Int) async {
        let to = inner[1 - direction]
        let wire = wires[direction]
        do {
            while let packet = try await wire.receive() {
                try await Task.sleep(until: packet.arrival, clock: .continuous)
                if let loss = packet.loss {
                    lose(loss)
                    return
                }
                try await to.send(packet.bytes)
            }
            to.shutdownOutput()
        } catch {
            // The link was lost, or the receiving end is gone: this direction delivers no more.
            _ = wire.finish(discardingBuffered: true)
        }
        let bothFinished = state.withLock { s -> Bool in
            s.finishedDirections += 1
            return s.finishedDirections == 2
        }
        if bothFinished { end(lossReason: nil) }
    }

    private func lose(_ reason: String) {
        end(lossReason: reason)
    }

    /// Ends the link: records a loss, drops what is in flight, closes the relay's sockets
    /// (both ends see the connection end) and wakes ``waitUntilEnded()``. Once only.
    private func end(lossReason: String?) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>]? in
            if s.ended { return nil }
            s.ended = true
            s.statistics.lossReason = lossReason
            defer { s.endWaiters = [] }
            return s.endWaiters
        }
        guard let waiters else { return }
        if let lossReason {
            let error = PeerSyncError(.connectionReset, "the simulated BLE link was lost: \(lossReason)")
            for wire in wires { _ = wire.finish(throwing: error, discardingBuffered: true) }
        }
        for socket in inner { socket.close() }
        for waiter in waiters { waiter.resume() }
    }
}
