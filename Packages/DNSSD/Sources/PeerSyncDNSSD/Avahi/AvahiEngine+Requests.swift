import PeerSyncCore
import PeerSyncDiscovery

/// The requests of ``DNSSDDiscovery`` and its publications and browsers: each hops onto the
/// loop thread and suspends the calling task (never blocks it) until the loop answered.
extension AvahiEngine {
    /// Registers `announcement`; returns once the daemon established it (after probing) or at
    /// once while the daemon is not running. Throws ``PeerSyncError/Code/closed`` after
    /// shutdown, or Avahi's refusal (and then forgets the registration).
    func publish(_ announcement: PeerAnnouncement) async throws -> (id: Int, snapshot: LockedValue<(name: String, announcement: PeerAnnouncement)>) {
        let id = makeID()
        return try await withCheckedThrowingContinuation { continuation in
            let accepted = loop.enqueue { [self] in
                guard !closed else {
                    continuation.resume(throwing: Self.closedError())
                    return
                }
                let registration = AvahiRegistration(engine: self, id: id, announcement: announcement)
                registrations[id] = registration
                registration.register()
                registration.whenSettled { result in
                    switch result {
                    case .success:
                        continuation.resume(returning: (id, registration.snapshot))
                    case .failure(let error):
                        registration.unpublish(because: error)
                        continuation.resume(throwing: error)
                    }
                }
            }
            if !accepted { continuation.resume(throwing: Self.closedError()) }
        }
    }

    /// Replaces a registration's metadata. Throws ``PeerSyncError/Code/closed`` once it was
    /// unpublished (or the discovery shut down), or Avahi's refusal.
    func updateMetadata(_ metadata: PeerMetadata, of id: Int) async throws {
        try await loop.perform { [self] in
            guard !closed, let registration = registrations[id] else {
                throw PeerSyncError(.closed, "the announcement was unpublished")
            }
            try registration.updateMetadata(metadata)
        }
    }

    /// Withdraws a registration (nothing if it is gone already).
    func unpublish(_ id: Int) async {
        _ = try? await loop.perform { [self] in
            registrations[id]?.unpublish(because: PeerSyncError(.closed, "the announcement was unpublished"))
        }
    }

    /// Starts browsing `group`. Throws ``PeerSyncError/Code/closed`` after shutdown.
    func browse(_ group: PeerGroupID) async throws -> PeerBrowser {
        let (stream, feed) = OrderedStreamFeed<PeerEvent>.makeStream()
        let id = makeID()
        // The consumer cancelled (or the stream finished): stop browsing on the loop thread.
        feed.onTermination { [loop, self] in
            loop.enqueue { [self] in browses[id]?.stop() }
        }
        try await loop.perform { [self] in
            guard !closed else { throw Self.closedError() }
            let browse = AvahiBrowse(engine: self, id: id, group: group, feed: feed)
            browses[id] = browse
            browse.start()
        }
        return PeerBrowser(group: group, events: stream, onStop: { [self] in
            _ = try? await loop.perform { [self] in browses[id]?.stop() }
            feed.finish()
        })
    }

    /// Withdraws every publication, ends every browse, frees the client and stops the loop
    /// thread. Returns when done (a second, concurrent call returns at once).
    func shutdown() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let accepted = loop.stop { [self] in
                shutdownOnLoop()
                continuation.resume()
            }
            if !accepted { continuation.resume() }
        }
    }

    /// ``shutdown()`` without waiting (for `deinit`).
    func shutdownSoon() {
        loop.stop { [self] in shutdownOnLoop() }
    }
}
