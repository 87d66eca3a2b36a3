import Synchronization

/// Process-wide counters of the replication protocol's work, summed over every session of the
/// process (both roles): what was offered, asked for, sent and received. For benchmarks and
/// diagnostics (`peersync bench mesh --json` prints them per run), never for behaviour.
///
/// Each counter is one relaxed atomic add per message or per batch, so counting costs nothing
/// measurable. Thread-safety: every member may be read and reset from any thread; a
/// ``snapshot()`` taken while sessions run is a consistent-enough sum, not an atomic one.
@_spi(Replication)
public enum ReplicationCounters {
    /// The counters at one moment, as plain values.
    public struct Snapshot: Sendable, Equatable {
        /// `changes` requests sent (passive side serving a subscription), and their entries.
        public var changesMessages = 0, changesEntries = 0
        /// `proposeChanges` requests sent (active side pushing), and their entries.
        public var proposeMessages = 0, proposeEntries = 0
        /// Entries of received `changes`/`proposeChanges` this side asked the revision for.
        public var entriesRequested = 0
        /// Entries this side first wanted but another link was fetching (a claim wait), and
        /// of those the ones the wait made unnecessary.
        public var entriesDeferred = 0, entriesSavedByClaims = 0
        /// Revisions sent (each in a `rev`, full or delta, or in a `revs` batch) and their
        /// body bytes (uncompressed).
        public var revsSent = 0, revBytesSent = 0
        /// `revs` requests sent (several revisions each, between PeerSync peers).
        public var revsMessagesSent = 0
        /// Revisions received (in `rev`s or `revs` batches), and of those the ones that stored a new revision.
        public var revsReceived = 0, revsInserted = 0
        /// `norev`s sent.
        public var noRevsSent = 0

        /// All zero.
        public init() {}

        /// Field names and values, in a fixed order (for JSON output).
        public var fields: [(String, Int)] { Self.named.map { ($0.name, self[keyPath: $0.path]) } }

        /// The difference `self − earlier`, counter by counter.
        public func since(_ earlier: Snapshot) -> Snapshot {
            var d = Snapshot()
            for counter in Self.named { d[keyPath: counter.path] = self[keyPath: counter.path] - earlier[keyPath: counter.path] }
            return d
        }

        /// Every counter: its JSON name and its field, in output order.
        private static let named: [(name: String, path: WritableKeyPath<Snapshot, Int> & Sendable)] = [
            ("changes_msgs", \.changesMessages), ("changes_entries", \.changesEntries),
            ("propose_msgs", \.proposeMessages), ("propose_entries", \.proposeEntries),
            ("entries_requested", \.entriesRequested), ("entries_deferred", \.entriesDeferred),
            ("entries_saved_by_claims", \.entriesSavedByClaims),
            ("revs_sent", \.revsSent), ("rev_bytes_sent", \.revBytesSent), ("revs_msgs", \.revsMessagesSent),
            ("revs_received", \.revsReceived), ("revs_inserted", \.revsInserted), ("norevs_sent", \.noRevsSent),
        ]
    }

    static let changesMessages = Atomic<Int>(0), changesEntries = Atomic<Int>(0)
    static let proposeMessages = Atomic<Int>(0), proposeEntries = Atomic<Int>(0)
    static let entriesRequested = Atomic<Int>(0)
    static let entriesDeferred = Atomic<Int>(0), entriesSavedByClaims = Atomic<Int>(0)
    static let revsSent = Atomic<Int>(0), revBytesSent = Atomic<Int>(0), revsMessagesSent = Atomic<Int>(0)
    static let revsReceived = Atomic<Int>(0), revsInserted = Atomic<Int>(0)
    static let noRevsSent = Atomic<Int>(0)

    static func add(_ counter: borrowing Atomic<Int>, _ value: Int = 1) {
        counter.wrappingAdd(value, ordering: .relaxed)
    }

    /// The current values of every counter (they only grow; subtract two snapshots with
    /// ``Snapshot/since(_:)`` for the work of an interval).
    public static func snapshot() -> Snapshot {
        var s = Snapshot()
        s.changesMessages = changesMessages.load(ordering: .relaxed)
        s.changesEntries = changesEntries.load(ordering: .relaxed)
        s.proposeMessages = proposeMessages.load(ordering: .relaxed)
        s.proposeEntries = proposeEntries.load(ordering: .relaxed)
        s.entriesRequested = entriesRequested.load(ordering: .relaxed)
        s.entriesDeferred = entriesDeferred.load(ordering: .relaxed)
        s.entriesSavedByClaims = entriesSavedByClaims.load(ordering: .relaxed)
        s.revsSent = revsSent.load(ordering: .relaxed)
        s.revBytesSent = revBytesSent.load(ordering: .relaxed)
        s.revsMessagesSent = revsMessagesSent.load(ordering: .relaxed)
        s.revsReceived = revsReceived.load(ordering: .relaxed)
        s.revsInserted = revsInserted.load(ordering: .relaxed)
        s.noRevsSent = noRevsSent.load(ordering: .relaxed)
        return s
    }
}
