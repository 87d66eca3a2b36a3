import Synchronization

/// A memory budget for incoming messages that are still arriving (a large frame read so far,
/// or the fragments of a message before its last one), shared by several connections —
/// normally every connection of one ``WebSocketServer``.
///
/// Each connection's reader reports how many bytes of unfinished message its decoder holds
/// after every socket read. When that connection's growth would take the total over
/// ``limit``, the growth is refused: the connection drops its partial message at once (its
/// buffer is freed) and closes with 1009 (message too big). Connections that already hold
/// their share keep it, so the one asking for more — the newest or fastest-growing — is the
/// one closed. Bytes are returned when a message completes, and when a connection ends.
///
/// ``bufferedBytes`` never exceeds ``limit``. Real memory can briefly exceed it by up to one
/// socket read (256 KiB) per connection: a reader decodes a read before it reports the
/// growth. Complete messages waiting for `receive()` are not counted here (each connection
/// bounds them with ``WebSocketConfiguration/receiveBufferBytes``).
///
/// Thread-safe (one atomic counter).
public final class PartialMessageBudget: Sendable {
    /// The most bytes of unfinished incoming messages all sharing connections may hold.
    public let limit: Int
    private let used = Atomic<Int>(0)

    /// `limit` is clamped to at least 0. A limit below a connection's
    /// ``WebSocketConfiguration/maxMessageSize`` means a message that large can never be
    /// received.
    public init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Bytes of unfinished incoming messages held now by the sharing connections.
    public var bufferedBytes: Int { used.load(ordering: .relaxed) }

    /// Takes `bytes` (> 0) if the total stays within ``limit``; false (nothing taken) if not.
    func take(_ bytes: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while true {
            let wanted = current + bytes
            if wanted > limit { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: wanted, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    /// Returns `bytes` taken before.
    func giveBack(_ bytes: Int) {
        used.subtract(bytes, ordering: .relaxed)
    }
}

/// The part of a ``PartialMessageBudget`` one connection's reader holds. Owned by that reader
/// (not shared): it is a value the read loop keeps and releases when it ends.
struct PartialMessageShare {
    let budget: PartialMessageBudget?
    private(set) var held = 0

    init(budget: PartialMessageBudget?) {
        self.budget = budget
    }

    /// Makes the share `bytes`: gives back the difference when smaller, takes it when larger.
    /// Returns false (share unchanged) when taking it would exceed the budget.
    mutating func resize(to bytes: Int) -> Bool {
        guard let budget, bytes != held else { return true }
        if bytes < held {
            budget.giveBack(held - bytes)
        } else if !budget.take(bytes - held) {
            return false
        }
        held = bytes
        return true
    }

    /// Gives the whole share back.
    mutating func release() {
        _ = resize(to: 0)
    }
}

/// A count of live objects (thread-safe): a ``WebSocketServer`` counts the connections whose
/// machinery — engine, queues, buffers — has not been released yet.
final class LiveCount: Sendable {
    private let count = Atomic<Int>(0)

    func add(_ delta: Int) {
        count.add(delta, ordering: .relaxed)
    }

    var value: Int { count.load(ordering: .relaxed) }
}
