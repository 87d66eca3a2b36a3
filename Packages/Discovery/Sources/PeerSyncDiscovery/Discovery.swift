import PeerSyncCore

/// The plug-in point for finding peers: publish "I am peer X of group G, reachable on port P,
/// with this metadata", and browse a group for peers appearing, changing and disappearing.
/// DNS-SD over Avahi (PeerSyncDNSSD) and Bluetooth LE implement it; tests and simulations use
/// ``InProcessDiscovery``. A user can add one and prove it with the conformance suite
/// (`PeerSyncDiscoveryTesting`).
///
/// The contract (what `DiscoveryConformanceSuite` checks):
///
/// - **Publishing.** ``publish(_:)`` makes the announcement visible to browsers of its group
///   (on other hosts and on this one, this instance's own browsers included); the returned
///   ``PeerPublication`` updates the metadata and unpublishes. Names are unique per group:
///   a taken name is replaced by another (``PeerPublication/name``).
/// - **Browsing.** ``browse(group:)`` returns a ``PeerBrowser``: an `AsyncSequence` of
///   ``PeerEvent``s that first reports every peer of the group already visible
///   (``PeerEvent/appeared(_:)``), then every change — metadata updates as
///   ``PeerEvent/updated(_:)``, unpublished, shut down or unreachable peers as
///   ``PeerEvent/disappeared(_:)`` — per announcement name in the order
///   `appeared (updated)* disappeared`. Only peers of the browsed group are reported. Several
///   quick updates may arrive as one (the last state always arrives). A browse ends (the
///   sequence returns nil) on ``PeerBrowser/stop()``, when the iterating task is cancelled,
///   and on ``shutdown()``.
/// - **Outages.** When the service underneath goes away, ``status`` becomes
///   ``DiscoveryStatus/unavailable(_:)``; publications and browses are kept, and re-registered
///   and restarted when it is back (``DiscoveryStatus/recovered``). Browsers keep the peers
///   they reported and, after the restart, report only the differences (a peer unpublished
///   meanwhile disappears). ``publish(_:)`` and ``browse(group:)`` work while unavailable.
/// - **Shutdown.** ``shutdown()`` withdraws every publication (other hosts see them
///   disappear), ends every browse, and makes later calls throw
///   `PeerSyncError.Code.closed`. Idempotent.
///
/// Threading: every method may be called from any task, concurrently. No method blocks a
/// thread; `async` methods suspend at most until the service answered (see each).
public protocol Discovery: AnyObject, Sendable {
    /// Which discovery this is; stamped on every ``DiscoveredPeer/discovery``.
    var kind: DiscoveryKind { get }

    /// The current status.
    var status: DiscoveryStatus { get }

    /// A new stream of status changes: the current status first, then every change, in order.
    /// Ends after ``DiscoveryStatus/stopped``. Each call gets its own stream.
    func statusUpdates() -> AsyncStream<DiscoveryStatus>

    /// Publishes `announcement`. Returns once the service accepted it (DNS-SD: registered,
    /// after probing the name, usually under a second), or at once while the service is
    /// unavailable (it is then registered when the service is back). The announcement may
    /// still be renamed later if another host claims its name.
    ///
    /// Throws `PeerSyncError.Code.closed` after ``shutdown()``,
    /// `PeerSyncError.Code.discoveryFailed` if the service refused it.
    func publish(_ announcement: PeerAnnouncement) async throws -> any PeerPublication

    /// Starts browsing `group`. Returns at once; events follow on the returned browser.
    /// Throws `PeerSyncError.Code.closed` after ``shutdown()``.
    func browse(group: PeerGroupID) async throws -> PeerBrowser

    /// Unpublishes everything, ends every browse and reports ``DiscoveryStatus/stopped``.
    /// Idempotent; returns when the service was told (or at once if it is unavailable).
    func shutdown() async
}

/// One published announcement (from ``Discovery/publish(_:)``).
///
/// Threading: any task, concurrently; calls take effect in the order they were made.
public protocol PeerPublication: AnyObject, Sendable {
    /// The announcement as currently published (its metadata is the last one set).
    var announcement: PeerAnnouncement { get }

    /// The name it is published under: ``PeerAnnouncement/name``, or the alternative picked
    /// after a name conflict (which may happen at any time, when another host claims it).
    var name: String { get }

    /// Replaces the metadata; browsers see ``PeerEvent/updated(_:)``. Throws
    /// `PeerSyncError.Code.closed` after ``unpublish()`` or the discovery's shutdown,
    /// `PeerSyncError.Code.discoveryFailed` if the service refused it.
    func updateMetadata(_ metadata: PeerMetadata) async throws

    /// Withdraws the announcement; browsers see ``PeerEvent/disappeared(_:)``. Idempotent.
    func unpublish() async
}

/// The events of one browse (``Discovery/browse(group:)``) and the handle that stops it.
///
/// Iterate it once, from one task. It ends (returns nil) after ``stop()``, when the iterating
/// task is cancelled, and when the discovery shuts down.
public final class PeerBrowser: AsyncSequence, Sendable {
    public typealias Element = PeerEvent
    public typealias AsyncIterator = AsyncStream<PeerEvent>.Iterator

    /// The group browsed.
    public let group: PeerGroupID
    private let events: AsyncStream<PeerEvent>
    private let onStop: @Sendable () async -> Void

    /// For implementations: `events` is the stream the discovery feeds (it must finish it when
    /// `onStop` runs, and stop browsing when its `onTermination` runs, e.g. because the
    /// consumer's task was cancelled); `onStop` runs on every ``stop()`` call and must be
    /// idempotent.
    public init(group: PeerGroupID, events: AsyncStream<PeerEvent>, onStop: @escaping @Sendable () async -> Void) {
        self.group = group
        self.events = events
        self.onStop = onStop
    }

    public func makeAsyncIterator() -> AsyncStream<PeerEvent>.Iterator {
        events.makeAsyncIterator()
    }

    /// Stops browsing: the sequence ends after the events already delivered. Idempotent.
    public func stop() async {
        await onStop()
    }
}
