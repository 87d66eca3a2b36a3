import Dispatch

/// Runs closures one at a time, in the order they were submitted, on a dispatch queue of its
/// own — what `DispatchQueue.async` on a serial queue does, except that a burst of
/// submissions costs one dispatch (one thread wake-up) instead of one each: while a drain is
/// scheduled or running, new closures join its list.
///
/// Why: listener queues get an event per document moved (a mesh peer: several per revision
/// stored, ~400,000 revisions in a 64-peer benchmark), and each `DispatchQueue.async` woke a
/// thread — scheduling that showed as a large share of the kernel's time in the profile.
///
/// Items submitted with ``async(coalescing:key:deliver:)`` one after another under the same
/// key, with nothing else submitted between them, are delivered together, in one call, at the
/// place of the first: a burst of per-document events costs one listener call, not one each.
///
/// Ordering: closures run in the order ``async(_:)`` was called (callers that enqueue under
/// their own lock keep their order); never concurrently; never on the caller's thread.
/// Coalescing never moves an item across anything submitted between it and the first of its
/// batch (there is nothing between them), so the order of everything delivered stays the order
/// of submission.
/// Thread-safety: ``async(_:)`` may be called from any thread, also from a closure it runs.
package final class SerialDelivery: Sendable {
    private struct State {
        var pending: [@Sendable () -> Void] = []
        /// A drain is scheduled or running: it will run `pending`.
        var draining = false
        /// The last entry of `pending` when it is a batch of coalesced items still taking
        /// more: its key and its items' box. Anything else submitted, and the drain taking
        /// `pending`, ends it.
        var openBatch: (key: ObjectIdentifier, box: AnyObject)?
    }

    /// The items of one coalesced batch. Appended to only under the delivery's lock while the
    /// batch is open; read by its delivery closure, which runs after the drain took it from
    /// `pending` under that lock (and closed it), so never concurrently with an append.
    private final class Batch<Item: Sendable>: @unchecked Sendable {
        var items: [Item]
        init(_ item: Item) { items = [item] }
    }

    private let state = LockedValue(State())
    private let queue: DispatchQueue

    /// A delivery queue named `label` (as a dispatch queue's label).
    package init(label: String) {
        queue = DispatchQueue(label: label)
    }

    /// Runs `work` after every closure submitted before it.
    package func async(_ work: @escaping @Sendable () -> Void) {
        let schedule = state.withLock { s -> Bool in
            s.pending.append(work)
            s.openBatch = nil
            return Self.startDrain(&s)
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Delivers `item` with `deliver`, after every closure submitted before it; if the last
    /// thing submitted (and not yet taken by the drain) is a batch of the same `key`, `item`
    /// joins it and that batch's `deliver` gets it (so every submission with one key must
    /// deliver the same way). `deliver` gets the items in the order they were submitted.
    /// `key` is the identity of an object alive until the batch is delivered (`deliver`
    /// capturing it does that): a freed object's identifier can be a new object's.
    package func async<Item: Sendable>(coalescing item: Item, key: ObjectIdentifier,
                                       deliver: @escaping @Sendable ([Item]) -> Void) {
        let schedule = state.withLock { s -> Bool in
            if let open = s.openBatch, open.key == key, let batch = open.box as? Batch<Item> {
                batch.items.append(item)
                return false
            }
            let batch = Batch(item)
            s.pending.append { deliver(batch.items) }
            s.openBatch = (key, batch)
            return Self.startDrain(&s)
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Whether the caller must schedule a drain (none is scheduled or running).
    private static func startDrain(_ s: inout State) -> Bool {
        if s.draining { return false }
        s.draining = true
        return true
    }

    private func drain() {
        while true {
            let batch = state.withLock { s -> [@Sendable () -> Void] in
                if s.pending.isEmpty {
                    s.draining = false
                    return []
                }
                defer {
                    s.pending = []
                    s.openBatch = nil
                }
                return s.pending
            }
            if batch.isEmpty { return }
            for work in batch { work() }
        }
    }
}
