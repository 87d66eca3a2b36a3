import PeerSyncCore
import PeerSyncTransport

/// One direction of a loopback link.
public enum LinkDirection: Sendable, Hashable, CustomStringConvertible {
    /// From the end that connected to the end that accepted.
    case clientToServer
    /// From the end that accepted to the end that connected.
    case serverToClient

    public var description: String {
        self == .clientToServer ? "client→server" : "server→client"
    }
}

/// Records what the simulated wire of a conditioned link did: every fragment with its size and
/// computed delays, and the disconnect if the link conditions broke the link. The recorded
/// values are computed from the link conditions and the traffic, not measured, so the same
/// seed and traffic give the same trace (per direction; the two directions interleave freely).
///
/// Pass one in ``LoopbackConnectOptions/trace``. Thread-safe (a lock guards the events).
public final class LinkTrace: Sendable {
    /// One event on the wire.
    public struct Event: Sendable, Hashable {
        /// What happened on the wire.
        public enum Kind: Sendable, Hashable {
            /// A fragment left the sender.
            case fragment
            /// The link conditions broke the link at this fragment (it was not delivered).
            case disconnect
            /// The close message left the sender.
            case close
        }
        /// Which way the fragment (or close) travelled.
        public var direction: LinkDirection
        /// A fragment sent, the link broken at it, or the close sent.
        public var kind: Kind
        /// The fragment's number in its direction, from 0.
        public var index: Int
        /// Payload bytes in the fragment.
        public var bytes: Int
        /// Whether the fragment completes a message.
        public var endsMessage: Bool
        /// How long the fragment occupied the wire (`bytes / bandwidth`).
        public var transmission: Duration
        /// Latency plus jitter drawn for the fragment.
        public var delay: Duration
    }

    /// The most events kept; later ones are counted in ``droppedCount`` only.
    public let limit: Int
    private let state = LockedValue<(events: [Event], dropped: Int)>(([], 0))

    /// Creates a trace that keeps at most `limit` events.
    public init(limit: Int = 100_000) {
        self.limit = Swift.max(0, limit)
    }

    /// Every recorded event, in recording order.
    public var events: [Event] { state.withLock { $0.events } }

    /// The recorded events of one direction, in order.
    public func events(_ direction: LinkDirection) -> [Event] {
        state.withLock { $0.events.filter { $0.direction == direction } }
    }

    /// Events not kept because ``limit`` was reached.
    public var droppedCount: Int { state.withLock { $0.dropped } }

    func record(_ event: Event) {
        state.withLock { s in
            if s.events.count < limit { s.events.append(event) } else { s.dropped += 1 }
        }
    }
}
